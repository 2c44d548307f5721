"""Pydantic models of OpenAI's legacy completions API (``POST /v1/completions``).

The prompt is the whole model input (no chat template, no retrieval), decoded by the same
engine (speculative, exact): what LlamaIndex's ``OpenAILike`` calls by default, with its own
context already in the prompt. Sampling parameters are those of the chat route.
"""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from copilot.answer.assembly import Answer
from copilot.api.schemas.chat import StreamOptions
from copilot.api.schemas.common import Bool, Int
from copilot.api.schemas.openai import SamplingParams, UnsupportedParameterError, Usage, finish_reason
from copilot.search.filters import Text


class CompletionRequest(SamplingParams):
    """``POST /v1/completions``: one choice per prompt."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [
        {"model": "opscopilot", "prompt": "The dCache pool dc-pool-07 went offline because", "max_tokens": 32}]})

    model: Text = Field(min_length=1)
    prompt: Text | list[Text] | list[int] | list[list[int]] = Field(
        description="a string or a list of strings (token-id prompts are not supported)")
    max_tokens: Int | None = Field(None, ge=1, description="answer budget (default: the server's max_new_tokens, "
                                   "not OpenAI's 16)")
    stream: Bool | None = False
    stream_options: StreamOptions | None = None
    echo: Bool | None = Field(False, description="the prompt is prepended to each choice's text")
    n: Int | None = Field(None, ge=1, le=128, description="only 1")
    best_of: Int | None = Field(None, ge=1, le=128, description="only 1")
    logprobs: Int | None = Field(None, ge=0, le=5, description="not supported")
    suffix: Text | None = Field(None, description="not supported")
    user: Text | None = Field(None, description="logged with the request")

    def prompts(self) -> list[str]:
        """The prompt(s) as strings.

        Raises:
            UnsupportedParameterError: a token-id prompt, or an empty list.
        """
        if isinstance(self.prompt, str):
            return [self.prompt]
        prompts = [p for p in self.prompt if isinstance(p, str)]
        if not prompts or len(prompts) < len(self.prompt):
            raise UnsupportedParameterError("prompt", "prompt: token-id or empty prompts are not supported by this "
                                            "server; send a string or a list of strings")
        return prompts

    def unsupported(self) -> UnsupportedParameterError | None:
        """The first parameter this server cannot honour, as an error naming it (else None)."""
        for param, default in (("n", 1), ("best_of", 1)):
            value = getattr(self, param)
            if value is not None and value != default:
                return UnsupportedParameterError(param, f"{param}: {param}={value} is not supported by this server "
                                                 "(only one choice per prompt)")
        if self.logprobs is not None:
            return UnsupportedParameterError("logprobs", "logprobs: not supported by this server")
        if self.suffix:
            return UnsupportedParameterError("suffix", "suffix: insertion is not supported by this server")
        if self.stream and isinstance(self.prompt, list) and len(self.prompt) > 1:
            return UnsupportedParameterError("prompt", "prompt: streaming several prompts at once is not supported "
                                             "by this server")
        return None


class CompletionChoice(BaseModel):
    """One prompt's completion (``index`` is the prompt's position)."""

    text: str
    index: int = 0
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None = None


class Completion(BaseModel):
    """A whole completion (also each streamed chunk, with ``choices[0].text`` the delta)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: Usage | None = None

    @classmethod
    def from_answers(cls, answers: Sequence[Answer], prompts: Sequence[str] | None, *, id: str, created: int,
                     model: str, system_fingerprint: str) -> "Completion":
        """The whole completion of a request's prompts: one choice per answer, its prompt first
        when ``prompts`` are given (``echo``), the usage summed."""
        choices = [CompletionChoice(text=(prompts[i] if prompts else "") + a.text, index=i,
                                    finish_reason=finish_reason(a)) for i, a in enumerate(answers)]
        return cls(id=id, created=created, model=model, system_fingerprint=system_fingerprint, choices=choices,
                   usage=Usage.from_answers(*answers))
