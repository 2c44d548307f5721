"""One answer as it streams: the prepared question, its answer events, and the feed that turns
engine events into answer events with the citations checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from copilot.answer.citations import CitationFilter
from copilot.answer.grounding import Grounding
from copilot.answer.prompting import BuiltPrompt
from copilot.answer.question import Question
from copilot.answer.shape import addition
from copilot.answer.support import after_generation
from copilot.search.sources import Source
from decoding import GenerationConfig
from decoding.engine import GenerationResult, StreamEvent


@dataclass
class Prepared:
    """A question ready to decode: the checked question, its prompt and sources, and whether
    the sources can answer it."""

    question: Question
    prompt: BuiltPrompt
    retrieval_ms: float
    grounding: Grounding = field(default_factory=lambda: Grounding(True))

    @property
    def config(self) -> GenerationConfig:
        """The engine's settings for this question."""
        return self.question.config


@dataclass
class AnswerEvent:
    """One streamed piece of an answer: a checked text delta; the last event carries the
    engine's ``result`` (its ``text`` checked too) and the citations removed."""

    delta: str
    result: GenerationResult | None = None
    invalid_citations: list[int] = field(default_factory=list)
    added: str = ""
    model_not_found: bool = False


class AnswerFeed:
    """Turns one answer's engine events into answer events (:class:`AnswerEvent`) as they arrive, with the
    citations checked (:mod:`copilot.answer.citations`): a ``[n]`` naming none of ``n_sources``
    sources is removed from the deltas and the result's text. Push-style, so a scheduler that
    steps many answers in one batch can feed each its own events.

    Args:
        judged: add the service's labelled additions to the finished answer; ``False`` for an answer
            with no budget (``max_new_tokens`` 0: retrieval only, there is no model answer to judge).
    """

    def __init__(self, n_sources: int | None, sources: Sequence[Source] = (), question: str = "",
                 judged: bool = True) -> None:
        self.citations = CitationFilter(n_sources) if n_sources is not None else None
        self.sources = list(sources)  # the question's own: what an addition quotes or lists
        self.question = question
        self.judged = judged

    @classmethod
    def for_prepared(cls, prepared: Prepared) -> "AnswerFeed":
        """The feed for a prepared question: citations checked against its sources (``rag``),
        the text as generated otherwise."""
        if not prepared.question.retrieves:
            return cls(None)
        return cls(len(prepared.prompt.sources), prepared.prompt.turn_sources, prepared.question.text,
                   judged=prepared.config.budget.max_new_tokens > 0)

    def convert(self, event: StreamEvent) -> AnswerEvent:
        """The answer event for an engine event (the last one carries the result, and after the
        model's words the service's labelled addition: :func:`copilot.answer.shape.addition` for an
        answer that does not answer, else :func:`copilot.answer.support.after_generation`)."""
        if self.citations is None:
            return AnswerEvent(event.delta, event.result)
        delta = self.citations.push(event.delta)
        if event.result is None:
            return AnswerEvent(delta)
        delta += self.citations.finish()
        event.result.text = self.citations.text
        if not self.judged:
            return AnswerEvent(delta, event.result, self.citations.invalid)
        added, model_not_found = addition(self.citations.text, self.sources)
        if not added and not model_not_found and self.sources:
            added, model_not_found = after_generation(self.question, self.citations.text, self.sources)
        return AnswerEvent(delta + added, event.result, self.citations.invalid, added, model_not_found)
