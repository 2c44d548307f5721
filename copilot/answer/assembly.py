"""A finished answer (:class:`Answer`, the one shape from the engine to the routes) and the
assembler that folds a prepared question's answer events into it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from copilot.answer.citations import cited_numbers
from copilot.answer.events import AnswerEvent, Prepared
from copilot.answer.quotes import Quote, Unverified, check_literals
from copilot.answer.support import SUPPORT_LABEL, supported
from copilot.search.sources import Source
from decoding.engine import GenerationResult


@dataclass
class Answer:
    """A finished (or stopped) answer: ``text`` cites ``sources`` as [n].

    Attributes:
        stats: the engine's statistics plus ``retrieval_ms`` (retrieval and prompt building),
            ``finish_reason``, ``invalid_citations``, ``grounding``, ``literals``; ``no_context:
            true`` when nothing was retrieved; ``queue_ms`` (wait for the batch) on the server.
        finish_reason: ``eos | stop | length | repetition | cancelled`` from the engine; ``stop``
            for a fixed answer (:meth:`copilot.service.CopilotService.fixed_answer`).
        cited: source numbers cited in ``text`` (every one names a source).
        supported: the sources that hold the answer's quoted literals, in order of first quote (the
            citations by support: :mod:`copilot.answer.support`).
        invalid_citations: numbers the model cited that name no source (removed from ``text``).
        quotes / unverified: the answer's literals found in a shown source / in none
            (:mod:`copilot.answer.quotes`).
        not_found: the sources do not answer: decided before generation (:mod:`copilot.answer.grounding`)
            or said by the model itself.
        added: what the service appended to the model's words, labelled in ``text`` as its own
            (:mod:`copilot.answer.shape`: an extract for a bare citation or an echoed header,
            the closest entries when the model said the sources do not answer); ``""`` for none.
        prompt_tokens / completion_tokens: token counts (OpenAI's ``usage``).
    """

    text: str
    sources: list[Source]
    stats: dict[str, Any] = field(default_factory=dict)
    finish_reason: str = "stop"
    cited: list[int] = field(default_factory=list)
    invalid_citations: list[int] = field(default_factory=list)
    quotes: list[Quote] = field(default_factory=list)
    unverified: list[Unverified] = field(default_factory=list)
    not_found: bool = False
    added: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    supported: list[int] = field(default_factory=list)

    @property
    def model_text(self) -> str:
        """The answer as the model generated it (citations checked), without the service's addition."""
        return self.text[: len(self.text) - len(self.added)] if self.added else self.text


@dataclass
class AnswerAssembler:
    """Folds the :class:`~copilot.answer.events.AnswerEvent` stream of one prepared question
    into its :class:`Answer`: the one place that does, for the API, the CLI and the evals.

    Attributes:
        text: the answer text so far (deltas add up to the final text).
        result: the engine's result once the last event arrived (``None`` until then, and
            for good when the stream was stopped early).
    """

    prepared: Prepared
    text: str = ""
    result: GenerationResult | None = None
    invalid_citations: list[int] = field(default_factory=list)
    added: str = ""
    model_not_found: bool = False

    def add(self, event: AnswerEvent) -> str:
        """Take one event; returns its text delta."""
        self.text += event.delta
        if event.result is not None:
            self.result = event.result
            self.invalid_citations = event.invalid_citations
            self.added, self.model_not_found = event.added, event.model_not_found
        return event.delta

    def answer(self, stopped_reason: str = "cancelled") -> Answer:
        """The answer so far. Its ``stats``: the engine's statistics plus ``retrieval_ms``,
        ``finish_reason``, ``invalid_citations`` and ``no_context: true`` when nothing was
        retrieved; ``finish_reason`` is ``stopped_reason`` when the stream ended before its
        result (a client that left, an interrupted job), and ``completion_tokens`` is then 0."""
        prompt = self.prepared.prompt
        if self.result is not None:
            stats, reason = self.result.stats.to_dict(), self.result.finish_reason
        else:
            stats, reason = {"prompt_tokens": len(prompt.input_ids)}, stopped_reason
        stats["retrieval_ms"] = round(self.prepared.retrieval_ms, 2)
        stats["finish_reason"] = reason
        prompt_tokens = len(prompt.input_ids)
        completion_tokens = len(self.result.token_ids) if self.result is not None else 0
        if not self.prepared.question.retrieves:  # the messages as sent: nothing to cite or check against
            return Answer(self.text, [], stats, reason, prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens)
        if not prompt.turn_sources:
            stats["no_context"] = True
        grounding = self.prepared.grounding
        checked = check_literals(self.text, prompt.sources, self.prepared.question.text)
        stats["invalid_citations"] = self.invalid_citations
        stats["grounding"] = grounding.to_dict()
        stats["literals"] = {"quoted": len(checked.quotes), "unverified": len(checked.unverified)}
        if self.added:
            checked_support = self.added.lstrip().startswith(SUPPORT_LABEL)
            stats["added"] = ("subject_not_found" if self.model_not_found else "source_check") if checked_support \
                else "closest_entries" if self.model_not_found else "extract"
        return Answer(self.text, prompt.sources, stats, reason, cited_numbers(self.text), self.invalid_citations,
                      checked.quotes, checked.unverified, not grounding.answerable or self.model_not_found,
                      self.added, prompt_tokens, completion_tokens, supported(checked.quotes))
