"""Pydantic models of the OpenAI-compatible chat API (``/v1/chat/completions``, ``/v1/models``).

Every chat parameter of OpenAI's API is modelled. Those OpsCopilot implements are used;
``logit_bias``, ``frequency_penalty`` and ``presence_penalty`` are honoured exactly (the output
is what ``generate()`` gives with the same logits processors); those it cannot honour (``n`` > 1,
``logprobs``, a forced tool call, a ``response_format`` other than text, audio output, ...) are
refused with a 400 naming the parameter when set to anything but their default
(:meth:`ChatCompletionRequest.unsupported`);
``tools`` are accepted and never called (a ``tool_choice`` forcing a call is refused); ``user``
and ``metadata`` are logged with the request; names OpenAI does not define are ignored.
``top_k`` is sampling top-k, as in vLLM. Extensions (``extra_body`` in the ``openai``
client): ``max_sources``, ``use_context`` and ``filters`` in the request; ``sources``,
``quotes``, ``unverified``, ``not_found`` and ``stats`` in the response (and in the last
streamed chunk)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from copilot.answer.assembly import Answer
from copilot.api.schemas.common import Bool, Int
from copilot.api.schemas.openai import (
    SamplingParams,
    UnsupportedParameterError,
    Usage,
    finish_reason,
    refused,
    store_refused,
    tool_use_refused,
    tools_invalid,
)
from copilot.api.schemas.sources import DestructiveOut, QuoteOut, SourceOut, UnverifiedOut, trust_fields
from copilot.search.filters import Filters, JSONObject, Text


class ContentPart(BaseModel):
    """A part of a message's content; only ``text`` parts are supported."""

    model_config = ConfigDict(extra="ignore")

    type: Text
    text: Text | None = None


class ChatMessage(BaseModel):
    """One message; ``system``/``developer`` messages are added to OpsCopilot's instructions
    (or, with ``use_context: false``, sent as the system message); ``tool``/``function``
    messages are left out of the prompt."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Text | list[ContentPart] | None = None
    name: Text | None = None

    def text(self) -> str:
        """The message text (text parts joined by newlines).

        Raises:
            ValueError: a non-text content part.
        """
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        bad = [p.type for p in self.content if p.type != "text"]
        if bad:
            raise ValueError(f"only text content is supported, got a {bad[0]!r} part")
        return "\n".join(p.text or "" for p in self.content)


class StreamOptions(BaseModel):
    """``stream_options``: only ``include_usage`` has an effect."""

    model_config = ConfigDict(extra="ignore")

    include_usage: Bool = False


class ChatCompletionRequest(SamplingParams):
    """``POST /v1/chat/completions``: retrieval runs on the last message (which must be the user's);
    earlier user/assistant messages become the conversation history, system and developer
    messages are added to the instructions."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [
        {"model": "opscopilot", "messages": [{"role": "user", "content": "Which command restarted dc-pool-07?"}]},
        {"model": "opscopilot", "stream": True, "max_tokens": 200, "max_sources": 3,
         "messages": [{"role": "system", "content": "Answer in one sentence."},
                      {"role": "user", "content": "How was OPS-107 resolved?"}]}]})

    model: Text = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1, max_length=100)
    stream: Bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: Int | None = Field(None, ge=1, description="deprecated OpenAI name of max_completion_tokens")
    max_completion_tokens: Int | None = Field(None, ge=1)
    # OpenAI parameters refused unless at their default (see unsupported())
    n: Int | None = Field(None, ge=1, le=128, description="only 1 choice is supported")
    logprobs: Bool | None = Field(None, description="not supported (only false)")
    top_logprobs: Int | None = Field(None, ge=0, le=20, description="not supported")
    tools: list[JSONObject] | None = Field(None, description="accepted; no tool is ever called")
    tool_choice: Text | JSONObject | None = Field(None, description="only 'none' or 'auto' (never calls a tool)")
    parallel_tool_calls: Bool | None = None
    functions: list[JSONObject] | None = Field(None, description="accepted (deprecated tools); never called")
    function_call: Text | JSONObject | None = Field(None, description="only 'none' or 'auto'")
    response_format: JSONObject | None = Field(None, description="only {\"type\": \"text\"}")
    modalities: list[Text] | None = Field(None, description="only ['text']")
    audio: JSONObject | None = Field(None, description="not supported")
    web_search_options: JSONObject | None = Field(None, description="not supported")
    reasoning_effort: Text | None = Field(None, description="not supported (not a reasoning model)")
    store: Bool | None = Field(None, description="only false (completions are not stored)")
    # OpenAI parameters without effect on an answer (logged with the request)
    user: Text | None = Field(None, description="logged with the request")
    metadata: dict[Text, Text] | None = Field(None, description="logged with the request")
    service_tier: Text | None = None
    # OpsCopilot extensions
    max_sources: Int | None = Field(None, ge=1, le=100, description="source documents to retrieve and show")
    use_context: Bool = Field(True, description="false: no retrieval; the model answers the messages as sent")
    filters: Filters | None = None

    @field_validator("messages")
    @classmethod
    def _last_is_the_question(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        if messages and messages[-1].role != "user":
            raise ValueError(f"the last message must be the user's question, got role {messages[-1].role!r}")
        return messages

    def unsupported(self) -> UnsupportedParameterError | None:
        """The first parameter set to a value this server cannot honour, as an error naming it
        (None when every parameter can be honoured)."""
        if self.n is not None and self.n != 1:
            return refused("n", f"n={self.n} (only one choice)")
        if self.logprobs:
            return refused("logprobs", "logprobs=true")
        if self.top_logprobs:
            return refused("top_logprobs", f"top_logprobs={self.top_logprobs}")
        tool_error = (tools_invalid(self.tools, nested=True) or tool_use_refused(self.tool_choice)
                      or tool_use_refused(self.function_call, "function_call"))
        if tool_error is not None:
            return tool_error
        if self.response_format is not None and self.response_format.get("type", "text") != "text":
            kind = self.response_format.get("type")
            return refused("response_format", f"response_format type {str(kind)[:40]!r} (only 'text')")
        if self.modalities is not None and any(m != "text" for m in self.modalities):
            return refused("modalities", "output other than text")
        for param, what in (("audio", "audio output"), ("web_search_options", "web search"),
                            ("reasoning_effort", "reasoning_effort (not a reasoning model)")):
            if getattr(self, param) is not None:
                return refused(param, what)
        if self.store:
            return store_refused()
        return None

    @property
    def max_new_tokens(self) -> int | None:
        """The answer budget: ``max_completion_tokens``, else ``max_tokens``, else None (the server default)."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def budget_param(self) -> str:
        """The name the client gave the answer budget (for ``error.param``)."""
        return "max_tokens" if self.max_completion_tokens is None and self.max_tokens is not None \
            else "max_completion_tokens"

    def instructions(self) -> str:
        """The system and developer messages' text, in order (added to the instructions)."""
        return "\n\n".join(m.text() for m in self.messages if m.role in ("system", "developer") and m.text())


class AssistantMessage(BaseModel):
    """The answer as an assistant message (its content ends with the sources footer)."""

    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    """The one choice of a chat completion."""

    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]
    logprobs: None = None


class ChatCompletion(BaseModel):
    """A whole answer; ``[n]`` in the content cites ``sources[n-1]``."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None
    sources: list[SourceOut] = Field(description="OpsCopilot extension: the numbered passages")
    quotes: list[QuoteOut] = Field(default_factory=list, description="OpsCopilot extension: literals of the answer "
                                   "found in a source")
    unverified: list[UnverifiedOut] = Field(default_factory=list, description="OpsCopilot extension: literals of "
                                            "the answer found in no source")
    not_found: bool = Field(False, description="OpsCopilot extension: the sources do not answer the question")
    destructive: list[DestructiveOut] = Field(default_factory=list, description="OpsCopilot extension: "
                                              "destructive commands in the answer")
    stats: dict[str, Any] = Field(description="OpsCopilot extension: decoding statistics")

    @classmethod
    def from_answer(cls, answer: Answer, content: str, sources: list[SourceOut], *, id: str, created: int,
                    model: str, system_fingerprint: str) -> "ChatCompletion":
        """The completion of a finished answer: ``content`` is its text with the sources footer,
        ``sources`` its sources as shown."""
        return cls(id=id, created=created, model=model, system_fingerprint=system_fingerprint,
                   choices=[Choice(message=AssistantMessage(content=content), finish_reason=finish_reason(answer))],
                   usage=Usage.from_answers(answer), sources=sources, **trust_fields(answer), stats=answer.stats)


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: Literal["stop", "length"] | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One streamed event; the chunk with ``finish_reason`` also carries ``sources``, ``quotes``,
    ``unverified``, ``not_found``, ``destructive`` and ``stats``;
    with ``stream_options.include_usage`` a last chunk has empty ``choices`` and the ``usage``."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChunkChoice]
    usage: Usage | None = None
    sources: list[SourceOut] | None = None
    quotes: list[QuoteOut] | None = None
    unverified: list[UnverifiedOut] | None = None
    not_found: bool | None = None
    destructive: list[DestructiveOut] | None = None
    stats: dict[str, Any] | None = None
