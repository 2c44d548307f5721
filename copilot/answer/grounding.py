"""Whether the retrieved sources can answer a question: entities named, sources that match them, "not found".

Operators name things: a host (``se-07``), a ticket (``OPS-107``), an error code
(``SRM_AUTHORIZATION_FAILURE``), a path, a date ("on 12 March", ``2026-01-20``). Incidents
repeat on other hosts and days, so a source about the same error on another host is a
*near-duplicate*, not an answer. This module

- uses the entities a question names and the documents that hold them
  (:mod:`copilot.search.entities`, which also orders candidates so that those holding every named
  entity come first), and
- decides, before any token is generated, whether the shown sources support an answer
  (:func:`assess`): every named entity must appear in some shown source, and the best
  evidence line of a question that names no entity must be close enough to it (cosine of their sentence embeddings
  at least :data:`MIN_SUPPORT`, calibrated on the tuning sets: ``copilot eval answers``
  reports false "not found"s). When they do not, the service answers "not found" with the
  closest entries and never runs the model, so the exactness contract is untouched.

After generation two more checks run: an answer in which the model itself says the sources do
not hold the answer is reported as not found, with the closest entries
(:func:`copilot.answer.shape.abstains`), and so is one whose quoted lines are about a sibling of the
host or ticket the question names (:func:`copilot.answer.support.sibling_subject`). The first two
catch a missing host or day and an off-topic question; only the later ones can catch a question
about a real entry that asks a fact the entry does not record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from copilot.search.entities import DocumentText, Entities, holds, question_entities
from copilot.search.highlights import Embedder, terms

#: The best evidence line's cosine similarity to the question below which the sources do not
#: answer it (all-MiniLM-L6-v2), for a question that names no entity: the middle of the gap on the
#: tuning sets (sample and site2 with their unanswerable questions) between the lowest answerable
#: question (0.402) and the unanswerable ones below it (at most 0.289); the unanswerable questions
#: above it are left to the model's own "not found" (evals/results/README.md).
MIN_SUPPORT = 0.345

@dataclass(frozen=True)
class Grounding:
    """Whether the shown sources support an answer.

    Attributes:
        answerable: ``False`` → the service answers "not found".
        reason: why not (empty when answerable).
        missing: named entities no shown source holds.
        support: the best evidence line's cosine similarity to the question (``None``
            without an embedder or evidence lines).
        entities: the entities the question names.
    """

    answerable: bool
    reason: str = ""
    missing: list[str] = field(default_factory=list)
    support: float | None = None
    entities: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        """JSON-able view (for ``stats.grounding``)."""
        return {"answerable": self.answerable, "reason": self.reason, "missing": self.missing,
                "support": None if self.support is None else round(self.support, 3), "entities": self.entities}


def evidence_support(question: str, highlights: Sequence[str], embedder: Embedder | None) -> float | None:
    """Highest cosine similarity between ``question`` and one of ``highlights`` (``None``
    without an embedder or highlights)."""
    if embedder is None or not highlights:
        return None
    vectors = embedder.embed_array([question, *highlights])
    return float(max(vectors[1:] @ vectors[0]))


def assess(question: str, shown: Sequence[DocumentText], highlights: Sequence[str], embedder: Embedder | None,
           min_support: float = MIN_SUPPORT, problem: Sequence[str] = ()) -> Grounding:
    """Decide whether the shown sources can answer ``question``.

    Not answerable when a named entity (host, ticket, error code, path, setting, day) is held
    by no shown source; or, for a question that names none, when the best evidence line's
    similarity to the question is below ``min_support`` (a question whose named entities the
    sources hold is about those entries, however it is phrased).

    Args:
        question: the operator's question.
        shown: the sources shown with the answer (their documents' text and dates).
        highlights: their evidence lines.
        embedder: sentence embedder for the support score (``None``: entity rule only).
        min_support: the support threshold (0 turns that rule off).
        problem: words of the problem asked about, one of which (Snowball-stemmed, as
            :func:`copilot.search.highlights.terms`) an earlier occurrence must name: a source that holds every named
            entity must hold one of them too, or the sources record the host but not this
            problem on it (an alert's question, :func:`copilot.alerts.question.alert_problem`).
            Empty: no such rule.
    """
    entities = question_entities(question)
    labels = entities.labels()
    missing = [e for e in labels if all(e in holds(d, entities)[1] for d in shown)] if shown else labels
    support = evidence_support(question, highlights, embedder)
    if missing:
        return Grounding(False, f"no retrieved entry mentions {', '.join(missing)}", missing, support, labels)
    if problem and not _names_problem(shown, entities, problem):
        subject = f" about {', '.join(labels)}" if labels else ""
        return Grounding(False, f"no retrieved entry{subject} records this problem ({', '.join(problem)})", [],
                         support, labels)
    if labels:  # every entity it names is in a shown source: the question is about those entries
        return Grounding(True, "", [], support, labels)
    if support is not None and support < min_support:
        return Grounding(False, f"no evidence line is close to the question (similarity {support:.2f} < "
                                f"{min_support:.2f})", [], support, labels)
    return Grounding(True, "", [], support, labels)


def _names_problem(shown: Sequence[DocumentText], entities: Entities, problem: Sequence[str]) -> bool:
    """Whether a shown source that holds every named entity names one of the ``problem`` words (stemmed)."""
    wanted = set(terms(" ".join(problem)))
    return any(not holds(d, entities)[1] and wanted & set(terms(d.text)) for d in shown)


def not_found_answer(grounding: Grounding, titles: Sequence[str]) -> str:
    """The answer text when the sources do not answer: what is missing, then the closest
    entries as ``[n] title`` (cited, so the page and the footer link them)."""
    head = "Not found in the logbooks and tickets"
    if grounding.missing:
        head += f": no entry mentions {', '.join(grounding.missing)}"
    elif grounding.reason.startswith("no retrieved entry") and "records this problem" in grounding.reason:
        head += ": " + grounding.reason.replace("no retrieved entry", "no entry", 1)
    head += "."
    if not titles:
        return head
    closest = "; ".join(f"[{i + 1}] {t}" for i, t in enumerate(titles))
    return f"{head} The closest entries are {closest}."
