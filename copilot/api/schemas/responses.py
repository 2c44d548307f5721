"""Pydantic models of OpenAI's Responses API (``POST /v1/responses``), the text subset.

A request is answered as the chat route answers the same messages (retrieval, citations,
checked literals): ``instructions`` and system/developer items are added to the instructions,
the last user item is the question, earlier user/assistant items the history. Nothing is
stored: ``previous_response_id`` is refused and every response says ``store: false``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from copilot.answer.assembly import Answer
from copilot.api.schemas.chat import ChatCompletionRequest
from copilot.api.schemas.common import Bool, Int, Number
from copilot.api.schemas.openai import UnsupportedParameterError, store_refused, tool_use_refused, tools_invalid
from copilot.api.schemas.sources import DestructiveOut, QuoteOut, SourceOut, UnverifiedOut
from copilot.search.filters import Filters, JSONObject, Text


class InputText(BaseModel):
    """A text part of an input item (``input_text``, or ``output_text`` of an earlier answer)."""

    model_config = ConfigDict(extra="ignore")

    type: Text
    text: Text | None = None


class InputItem(BaseModel):
    """One message of ``input``."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Text | list[InputText]

    def text(self) -> str:
        """The item's text.

        Raises:
            ValueError: a part other than text (an image, a file).
        """
        if isinstance(self.content, str):
            return self.content
        bad = [p.type for p in self.content if p.type not in ("input_text", "output_text", "text")]
        if bad:
            raise ValueError(f"only text input is supported, got a {bad[0]!r} part")
        return "\n".join(p.text or "" for p in self.content)


class ResponseRequest(BaseModel):
    """``POST /v1/responses``."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [
        {"model": "opscopilot", "input": "How was OPS-107 resolved?", "instructions": "Be brief."}]})

    model: Text = Field(min_length=1)
    input: Text | list[InputItem] = Field(description="the question, or messages whose last is the user's")
    instructions: Text | None = Field(None, description="added to OpsCopilot's instructions")
    max_output_tokens: Int | None = Field(None, ge=1)
    temperature: Number | None = Field(None, ge=0.0, le=2.0)
    top_p: Number | None = Field(None, gt=0.0, le=1.0)
    stream: Bool | None = False
    tools: list[JSONObject] | None = Field(None, description="accepted; no tool is ever called")
    tool_choice: Text | JSONObject | None = Field(None, description="only 'none' or 'auto'")
    parallel_tool_calls: Bool | None = None
    previous_response_id: Text | None = Field(None, description="not supported (nothing is stored)")
    reasoning: JSONObject | None = Field(None, description="not supported (not a reasoning model)")
    text: JSONObject | None = Field(None, description="only {\"format\": {\"type\": \"text\"}}")
    store: Bool | None = Field(None, description="only false (nothing is stored; the response says store: false)")
    metadata: dict[Text, Text] | None = None
    user: Text | None = None
    # OpsCopilot extensions
    max_sources: Int | None = Field(None, ge=1, le=100)
    use_context: Bool = True
    filters: Filters | None = None

    def unsupported(self) -> UnsupportedParameterError | None:
        """The first parameter this server cannot honour, as an error naming it (else None)."""
        if self.previous_response_id:
            return UnsupportedParameterError("previous_response_id", "previous_response_id: responses are not "
                                             "stored by this server; send the conversation in input")
        if self.reasoning:
            return UnsupportedParameterError("reasoning", "reasoning: not supported by this server")
        fmt = (self.text or {}).get("format") or {}
        if isinstance(fmt, dict) and fmt.get("type", "text") != "text":
            return UnsupportedParameterError("text", "text.format: only 'text' is supported by this server")
        if self.store:
            return store_refused()
        return tools_invalid(self.tools, nested=False) or tool_use_refused(self.tool_choice)

    def as_chat(self) -> ChatCompletionRequest:
        """The same request in chat-completions form.

        Raises:
            ValueError: the last item is not the user's, or an item holds a non-text part.
        """
        items = [InputItem(role="user", content=self.input)] if isinstance(self.input, str) else self.input
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.instructions}] if self.instructions \
            else []
        messages += [{"role": item.role, "content": item.text()} for item in items]
        return ChatCompletionRequest(model=self.model, messages=messages, max_completion_tokens=self.max_output_tokens,
                                     temperature=self.temperature, top_p=self.top_p, user=self.user,
                                     metadata=self.metadata, max_sources=self.max_sources,
                                     use_context=self.use_context, filters=self.filters)


class OutputText(BaseModel):
    """The answer's text (with the sources footer)."""

    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[JSONObject] = Field(default_factory=list)


class OutputMessage(BaseModel):
    """The assistant message of a response."""

    id: str
    type: Literal["message"] = "message"
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    role: Literal["assistant"] = "assistant"
    content: list[OutputText] = Field(default_factory=list)


class ResponseUsage(BaseModel):
    """Token counts, in the Responses API's names."""

    input_tokens: int
    input_tokens_details: dict[str, int] = Field(default_factory=lambda: {"cached_tokens": 0})
    output_tokens: int
    output_tokens_details: dict[str, int] = Field(default_factory=lambda: {"reasoning_tokens": 0})
    total_tokens: int

    @classmethod
    def from_answer(cls, answer: Answer) -> "ResponseUsage":
        """An answer's token counts."""
        return cls(input_tokens=answer.prompt_tokens, output_tokens=answer.completion_tokens,
                   total_tokens=answer.prompt_tokens + answer.completion_tokens)


class ResponseObject(BaseModel):
    """A response; ``[n]`` in the text cites ``sources[n-1]``."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["in_progress", "completed", "incomplete"]
    model: str
    output: list[OutputMessage]
    incomplete_details: dict[str, str] | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: list[JSONObject] = Field(default_factory=list)
    tool_choice: str = "auto"
    parallel_tool_calls: bool = False
    text: JSONObject = Field(default_factory=lambda: {"format": {"type": "text"}})
    store: bool = False
    metadata: dict[str, str] = Field(default_factory=dict)
    error: JSONObject | None = None
    usage: ResponseUsage | None = None
    sources: list[SourceOut] = Field(default_factory=list, description="OpsCopilot extension: the numbered passages")
    quotes: list[QuoteOut] = Field(default_factory=list, description="OpsCopilot extension")
    unverified: list[UnverifiedOut] = Field(default_factory=list, description="OpsCopilot extension")
    not_found: bool = Field(False, description="OpsCopilot extension")
    destructive: list[DestructiveOut] = Field(default_factory=list, description="OpsCopilot extension: "
                                              "destructive commands in the answer")
    stats: dict[str, Any] = Field(default_factory=dict, description="OpsCopilot extension: decoding statistics")
