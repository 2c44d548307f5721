"""Pydantic models of the OpenAI-compatible chat API (``/v1/chat/completions``, ``/v1/models``).

Every chat parameter of OpenAI's API is modelled. Those OpsCopilot implements are used;
``logit_bias``, ``frequency_penalty`` and ``presence_penalty`` are honoured exactly (the output
is what ``generate()`` gives with the same logits processors); those it cannot honour (``n`` > 1,
``logprobs``, ``tools``, a ``response_format`` other than text, audio output, ...) are refused with a 400 naming the
parameter when set to anything but their default (:meth:`ChatCompletionRequest.unsupported`);
the rest (``user``, ``metadata``, ``store``, ...) have no effect on an answer and are ignored,
as are names OpenAI does not define. Extensions: ``top_k`` and ``filters`` in the request
(``extra_body`` in the ``openai`` client), ``sources`` and ``stats`` in the response (and in
the last streamed chunk).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from copilot.api.schemas import (SPECULATION_HELP, Filters, JSONObject, QuoteOut, Seed, SourceOut, Speculation, Text,
                                 UnverifiedOut, logits_settings, speculation_settings)


class ContentPart(BaseModel):
    """A part of a message's content; only ``text`` parts are supported."""

    model_config = ConfigDict(extra="ignore")

    type: Text
    text: Text | None = None


class ChatMessage(BaseModel):
    """One message; ``system``/``developer`` messages are ignored (OpsCopilot has its own instructions)."""

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

    include_usage: bool = False


class UnsupportedParameterError(ValueError):
    """A chat parameter set to a value OpsCopilot cannot honour (HTTP 400, ``param`` names it)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``: retrieval runs on the last message (which must be the user's);
    earlier user/assistant messages become the conversation history."""

    model_config = ConfigDict(extra="ignore")

    model: Text = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1, max_length=100)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=0, description="deprecated OpenAI name of max_completion_tokens")
    max_completion_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="default 0: greedy, exact")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: Seed | None = None
    stop: Text | list[Text] | None = Field(None, description="up to 4 stop strings")
    # Logits settings, honoured exactly (as generate() with the same processors applies them);
    # the last five are the transformers / vLLM names clients send in extra_body.
    logit_bias: dict[Text, float] | None = Field(None, description="{token id: bias in [-100, 100]}")
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0, description="CTRL repetition penalty (1 = off)")
    no_repeat_ngram_size: int | None = Field(None, ge=0, le=64)
    min_new_tokens: int | None = Field(None, ge=0)
    bad_words_ids: list[list[Annotated[int, Field(ge=0)]]] | None = Field(None, max_length=1024)
    suppress_tokens: list[Annotated[int, Field(ge=0)]] | None = Field(None, max_length=4096)
    # OpenAI parameters refused unless at their default (see unsupported())
    n: int | None = Field(None, ge=1, le=128, description="only 1 choice is supported")
    logprobs: bool | None = Field(None, description="not supported (only false)")
    top_logprobs: int | None = Field(None, ge=0, le=20, description="not supported")
    tools: list[JSONObject] | None = Field(None, description="not supported (no tool calls)")
    tool_choice: Text | JSONObject | None = Field(None, description="only 'none' or 'auto' (never calls a tool)")
    parallel_tool_calls: bool | None = None
    functions: list[JSONObject] | None = Field(None, description="not supported (deprecated tools)")
    function_call: Text | JSONObject | None = Field(None, description="only 'none' or 'auto'")
    response_format: JSONObject | None = Field(None, description="only {\"type\": \"text\"}")
    modalities: list[Text] | None = Field(None, description="only ['text']")
    audio: JSONObject | None = Field(None, description="not supported")
    web_search_options: JSONObject | None = Field(None, description="not supported")
    # OpenAI parameters without effect on an answer here (accepted, ignored)
    user: Text | None = None
    metadata: dict[Text, Text] | None = None
    store: bool | None = None
    service_tier: Text | None = None
    reasoning_effort: Text | None = None
    # OpsCopilot extensions
    top_k: int | None = Field(None, ge=1, le=100, description="source documents to retrieve")
    filters: Filters | None = None
    speculation: Speculation | None = Field(None, description=SPECULATION_HELP)
    num_speculative_tokens: int | None = Field(None, ge=1, le=16,
                                               description="γ ceiling per round (default: settings)")

    @model_validator(mode="after")
    def _check(self) -> "ChatCompletionRequest":
        if self.messages[-1].role != "user":
            raise ValueError(f"the last message must be the user's question, got role {self.messages[-1].role!r}")
        stops = self.stop_strings
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("stop: at most 4 non-empty strings")
        return self

    def unsupported(self) -> UnsupportedParameterError | None:
        """The first parameter set to a value this server cannot honour, as an error naming it
        (None when every parameter can be honoured)."""
        def error(param: str, what: str) -> UnsupportedParameterError:
            return UnsupportedParameterError(param, f"{param}: {what} is not supported by this server")

        if self.n is not None and self.n != 1:
            return error("n", f"n={self.n} (only one choice)")
        if self.logprobs:
            return error("logprobs", "logprobs=true")
        if self.top_logprobs:
            return error("top_logprobs", f"top_logprobs={self.top_logprobs}")
        if self.tools:
            return error("tools", "tool calling")
        if self.functions:
            return error("functions", "function calling")
        for param in ("tool_choice", "function_call"):
            choice = getattr(self, param)
            if choice is not None and choice not in ("none", "auto"):
                return error(param, "forcing a tool call")
        if self.response_format is not None and self.response_format.get("type", "text") != "text":
            kind = self.response_format.get("type")
            return error("response_format", f"response_format type {str(kind)[:40]!r} (only 'text')")
        if self.modalities is not None and any(m != "text" for m in self.modalities):
            return error("modalities", "output other than text")
        if self.audio is not None:
            return error("audio", "audio output")
        if self.web_search_options is not None:
            return error("web_search_options", "web search")
        return None

    def logits_settings(self) -> dict[str, Any]:
        """``logit_bias`` and the penalties for :meth:`CopilotService.generation_config`."""
        return logits_settings(self)

    def speculation_settings(self) -> dict[str, Any]:
        """The speculation settings for :meth:`CopilotService.generation_config` (unset ones left out)."""
        return speculation_settings(self)

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """``stop`` as a tuple (empty when unset)."""
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def budget(self) -> int | None:
        """``max_completion_tokens``, else ``max_tokens``, else None (the server default)."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]
    logprobs: None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


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
    stats: dict[str, Any] = Field(description="OpsCopilot extension: decoding statistics")


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
    ``unverified``, ``not_found`` and ``stats``;
    with ``stream_options.include_usage`` a last chunk has empty ``choices`` and the ``usage``."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    sources: list[SourceOut] | None = None
    quotes: list[QuoteOut] | None = None
    unverified: list[UnverifiedOut] | None = None
    not_found: bool | None = None
    stats: dict[str, Any] | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "opscopilot"


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class OpenAIErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIError(BaseModel):
    """Error body of the OpenAI-compatible routes (``detail`` too, like every other route)."""

    error: OpenAIErrorBody
    detail: Any
