"""Pydantic models of the OpenAI-compatible chat API (``/v1/chat/completions``, ``/v1/models``).

Only what OpsCopilot serves is modelled; unknown request parameters are ignored so
existing clients work unchanged. Extensions: ``top_k`` and ``filters`` in the request
(``extra_body`` in the ``openai`` client), ``sources`` and ``stats`` in the response
(and in the last streamed chunk).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from copilot.api.schemas import Filters, Seed, SourceOut, Text


class ContentPart(BaseModel):
    """A part of a message's content; only ``text`` parts are supported."""

    model_config = ConfigDict(extra="ignore")

    type: str
    text: Text | None = None


class ChatMessage(BaseModel):
    """One message; ``system``/``developer`` messages are ignored (OpsCopilot has its own instructions)."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[ContentPart] | None = None

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
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``: retrieval runs on the last message (which must be the user's);
    earlier user/assistant messages become the conversation history."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1, max_length=100)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=0, description="deprecated OpenAI name of max_completion_tokens")
    max_completion_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="default 0: greedy, exact")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: Seed | None = None
    stop: str | list[str] | None = Field(None, description="up to 4 stop strings")
    n: int = Field(1, ge=1, le=1, description="only 1 choice is supported")
    # OpsCopilot extensions
    top_k: int | None = Field(None, ge=1, le=100, description="source documents to retrieve")
    filters: Filters | None = None

    @model_validator(mode="after")
    def _check(self) -> "ChatCompletionRequest":
        if self.messages[-1].role != "user":
            raise ValueError(f"the last message must be the user's question, got role {self.messages[-1].role!r}")
        stops = self.stop_strings
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("stop: at most 4 non-empty strings")
        return self

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
    """One streamed event; the chunk with ``finish_reason`` also carries ``sources`` and ``stats``;
    with ``stream_options.include_usage`` a last chunk has empty ``choices`` and the ``usage``."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    sources: list[SourceOut] | None = None
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
