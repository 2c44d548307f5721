"""A request model's generation knobs as :class:`~copilot.answer.question.GenerationParams`.

``POST /v1/ask``'s :class:`~copilot.api.schemas.AskRequest` and the OpenAI requests
(:class:`~copilot.api.openai_schemas.SamplingParams`) share these knobs under the same names;
:func:`generation_params` reads them once, for every route.
"""

from __future__ import annotations

from typing import Protocol

from copilot.answer.question import GenerationParams
from decoding.config import SpeculationMode


class LogitsFields(Protocol):
    """The logits-processing knobs :class:`AskRequest` and the OpenAI requests share (read-only)."""

    @property
    def repetition_penalty(self) -> float | None: ...
    @property
    def no_repeat_ngram_size(self) -> int | None: ...
    @property
    def min_new_tokens(self) -> int | None: ...
    @property
    def bad_words_ids(self) -> list[list[int]] | None: ...
    @property
    def suppress_tokens(self) -> list[int] | None: ...
    @property
    def logit_bias(self) -> dict[str, float] | None: ...
    @property
    def frequency_penalty(self) -> float | None: ...
    @property
    def presence_penalty(self) -> float | None: ...


class GenerationFields(LogitsFields, Protocol):
    """The generation knobs :class:`AskRequest` and the OpenAI requests share, under their own names."""

    @property
    def temperature(self) -> float | None: ...
    @property
    def top_p(self) -> float | None: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def speculation(self) -> SpeculationMode | None: ...
    @property
    def num_speculative_tokens(self) -> int | None: ...


def generation_params(body: GenerationFields, max_new_tokens: int | None, top_k: int | None = None,
                      stop_strings: tuple[str, ...] = ()) -> GenerationParams:
    """A request's generation knobs for :meth:`copilot.service.CopilotService.question`, each
    under its own name (``None`` = unset; an empty ``logit_bias`` is unset too).

    Args:
        max_new_tokens, top_k, stop_strings: the knobs the request models spell their own way
            (OpenAI's ``max_tokens``, vLLM's ``top_k: -1``, ``stop``), read by the caller.
    """
    return GenerationParams(
        max_new_tokens=max_new_tokens, temperature=body.temperature, top_p=body.top_p, top_k=top_k, seed=body.seed,
        stop_strings=stop_strings, speculation=body.speculation, num_speculative_tokens=body.num_speculative_tokens,
        repetition_penalty=body.repetition_penalty, no_repeat_ngram_size=body.no_repeat_ngram_size,
        min_new_tokens=body.min_new_tokens,
        bad_words_ids=None if body.bad_words_ids is None else tuple(tuple(w) for w in body.bad_words_ids),
        suppress_tokens=None if body.suppress_tokens is None else tuple(body.suppress_tokens),
        logit_bias=body.logit_bias or None, frequency_penalty=body.frequency_penalty,
        presence_penalty=body.presence_penalty)
