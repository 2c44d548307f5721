"""What the OpenAI-compatible requests and responses share: the sampling parameters (OpenAI's
names, and the transformers / vLLM names clients send in ``extra_body``), the refusals of what
this server cannot honour, the token usage and the finish reason."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from copilot.answer.assembly import Answer
from copilot.answer.question import GenerationParams
from copilot.api.schemas.common import GenerationKnobs, Int
from copilot.search.filters import Text


class UnsupportedParameterError(ValueError):
    """A chat parameter set to a value OpsCopilot cannot honour (HTTP 400, ``param`` names it)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class SamplingParams(GenerationKnobs):
    """The generation parameters the chat and completions routes share (OpenAI's names, and the
    transformers / vLLM names clients send in ``extra_body``), all honoured exactly: the output
    is what ``generate()`` gives with the same logits processors."""

    model_config = ConfigDict(extra="ignore")

    top_k: Int | None = Field(None, ge=-1, description="sampling top-k, as vLLM (0 or -1 = off); the number of "
                              "sources is max_sources")
    stop: Text | list[Text] | None = Field(None, description="up to 4 stop strings")

    @field_validator("stop")
    @classmethod
    def _check_stops(cls, stop: str | list[str] | None) -> str | list[str] | None:
        stops = [stop] if isinstance(stop, str) else stop or []
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("at most 4 non-empty strings")
        return stop

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """``stop`` as a tuple (empty when unset)."""
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def generation_params(self, max_new_tokens: int | None) -> GenerationParams:
        """The generation knobs for :meth:`copilot.service.CopilotService.question` (``top_k`` -1 is 0: off).

        Args:
            max_new_tokens: the answer budget as the request names it (``max_tokens``, ...).
        """
        return self.knobs(max_new_tokens, None if self.top_k is None else max(self.top_k, 0), self.stop_strings)


def refused(param: str, what: str) -> UnsupportedParameterError:
    """The error for ``param`` set to ``what``, which this server cannot honour (a 400 naming it)."""
    return UnsupportedParameterError(param, f"{param}: {what} is not supported by this server")


def store_refused() -> UnsupportedParameterError:
    """``store: true``, refused alike on chat completions and responses: nothing is stored, so
    nothing could be fetched or continued later."""
    return refused("store", "store=true (nothing is stored: send the conversation with each request)")


def tool_use_refused(tool_choice: object, param: str = "tool_choice") -> UnsupportedParameterError | None:
    """Tools are accepted and never called: a ``tool_choice`` absent, ``"auto"`` or ``"none"``
    lets the model answer in text (Open WebUI sends its tools by default); one that forces a
    call (``"required"``, a named function) cannot be honoured; any other string is no OpenAI value."""
    if tool_choice is None or tool_choice in ("none", "auto"):
        return None
    if isinstance(tool_choice, str) and tool_choice != "required" or tool_choice == {}:
        return UnsupportedParameterError(param, f"{param}: {str(tool_choice)[:40]!r} is not a valid value; use 'none', "
                                         "'auto', 'required' or an object naming a tool")
    return refused(param, "forcing a tool call (tools are accepted, but this server never calls one)")


def tools_invalid(tools: list[dict[str, Any]] | None, nested: bool,
                  param: str = "tools") -> UnsupportedParameterError | None:
    """The first malformed tool, as an error naming it (None when every tool is well formed).

    A tool is an object with a string ``type``; a ``function`` tool names its function, under
    ``function.name`` in chat completions (``nested``) and ``name`` in the Responses API
    (OpenAI's two tool shapes). Tools are never called, but a client sending a malformed one
    has a bug it should hear about, as OpenAI tells it.
    """
    for i, tool in enumerate(tools or []):
        kind = tool.get("type")
        if not isinstance(kind, str) or not kind:
            return UnsupportedParameterError(f"{param}.{i}", f"{param}.{i}: a tool needs a string 'type' "
                                             "(e.g. 'function')")
        if kind == "function":
            holder = tool.get("function") if nested else tool
            name = holder.get("name") if isinstance(holder, dict) else None
            if not isinstance(name, str) or not name:
                where = "function.name" if nested else "name"
                return UnsupportedParameterError(f"{param}.{i}", f"{param}.{i}: a function tool needs a "
                                                 f"string '{where}'")
    return None


def finish_reason(answer: Answer) -> Literal["stop", "length"]:
    """OpenAI's finish reason of an answer: the budget is ``length``, everything else ``stop``
    (the engine's own reason, e.g. ``repetition``, is in ``stats.finish_reason``)."""
    return "length" if answer.finish_reason == "length" else "stop"


class Usage(BaseModel):
    """Token counts: the prompt (instructions, sources, history, question) and the answer."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def from_answers(cls, *answers: Answer) -> "Usage":
        """The token counts of one answer, or of several summed (one per prompt of a request)."""
        prompt, completion = sum(a.prompt_tokens for a in answers), sum(a.completion_tokens for a in answers)
        return cls(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
