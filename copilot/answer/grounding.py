"""Whether the retrieved sources can answer a question: entities named, sources that match them, "not found".

Operators name things: a host (``se-07``), a ticket (``OPS-107``), an error code
(``SRM_AUTHORIZATION_FAILURE``), a path, a date ("on 12 March", ``2026-01-20``). Incidents
repeat on other hosts and days, so a source about the same error on another host is a
*near-duplicate*, not an answer. This module

- extracts the entities a question names (:func:`question_entities`),
- orders candidate documents so that those holding every named entity come first
  (:func:`entity_order`, used by :meth:`copilot.service.CopilotService.search`), and
- decides, before any token is generated, whether the shown sources support an answer
  (:func:`assess`): every named entity must appear in some shown source, and the best
  evidence line of a question that names no entity must be close enough to it (cosine of their sentence embeddings
  at least :data:`MIN_SUPPORT`, calibrated on the tuning sets: ``copilot eval answers``
  reports false "not found"s). When they do not, the service answers "not found" with the
  closest entries and never runs the model, so the exactness contract is untouched.

After generation a third check runs: an answer in which the model itself says the sources do
not hold the answer is reported as not found, with the closest entries
(:func:`copilot.answer.shape.abstains`). The first two catch a missing host or day and an
off-topic question; only the third can catch a question about a real entry that asks a fact
the entry does not record.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from copilot.answer.quotes import token_kind, trim_token
from copilot.search.highlights import Embedder

#: Entity kinds a question names that a source must hold (dates are matched on their own).
ENTITY_KINDS = frozenset({"ticket", "error", "host", "name", "path", "setting"})
#: The best evidence line's cosine similarity to the question below which the sources do not
#: answer it (all-MiniLM-L6-v2), for a question that names no entity: the middle of the gap on the
#: tuning sets (sample and site2 with their unanswerable questions) between the lowest answerable
#: question (0.402) and the unanswerable ones below it (at most 0.289); the unanswerable questions
#: above it are left to the model's own "not found" (evals/results/README.md).
MIN_SUPPORT = 0.345

_MONTH = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|" \
         r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_DAY_MONTH = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?(?:\s+of)?\s+{_MONTH}\b(?:\s+(\d{{4}}))?", re.IGNORECASE)
_MONTH_DAY = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d\d)-(\d\d)\b")
_ISO_DAY = re.compile(r"(\d{4})-(\d\d)-(\d\d)")  # the start of an ISO date or time
_DOTTED_DATE = re.compile(r"(?<![\d.])(\d{1,2})\.(\d{1,2})\.(\d{4})?(?![\d.]*\d)")
#: ``16/03`` or ``16/03/2026``: day first, as European sites write it.
_SLASH_DATE = re.compile(r"(?<![\w/.])(\d{1,2})/(\d{1,2})(?:/(\d{4}))?(?![\w/]|\.\d)")
_BRACKET_CODE = re.compile(r"^\[\d{3,5}\][.,;:!?]*$")
#: Month names, lower case (English, whatever the locale: the logbooks are read as written).
MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
               "november", "december")
_MONTHS = {m[:3]: i + 1 for i, m in enumerate(MONTH_NAMES)}


@dataclass(frozen=True)
class DateRef:
    """A calendar day a question names (``year`` ``None`` when not given)."""

    month: int
    day: int
    year: int | None = None
    text: str = ""

    def matches(self, iso: str) -> bool:
        """Whether the ISO date or time ``iso`` (``2026-03-12...``) falls on this day."""
        m = _ISO_DAY.match(iso or "")
        if not m:
            return False
        y, mo, d = (int(g) for g in m.groups())
        return (mo, d) == (self.month, self.day) and self.year in (None, y)


@dataclass(frozen=True)
class Entities:
    """What a question names: literal entities (as written) and days."""

    names: tuple[str, ...] = ()
    dates: tuple[DateRef, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.names or self.dates)

    def labels(self) -> list[str]:
        """Every entity as written in the question."""
        return [*self.names, *(d.text for d in self.dates)]


def question_entities(question: str) -> Entities:
    """The entities ``question`` names: tokens of the kinds in :data:`ENTITY_KINDS`
    (:func:`copilot.answer.quotes.token_kind`) and days (``2026-03-12``, ``12 March``, ``March 2nd``,
    ``12.03.``, ``12/03``: day first)."""
    names = []
    for raw in question.split():
        word, _ = trim_token(raw, 0)
        if _BRACKET_CODE.match(raw):  # an error number as logs print it: [3021]
            names.append(raw.rstrip(".,;:!?"))
        elif word and token_kind(word) in ENTITY_KINDS and not _DOTTED_DATE.fullmatch(word + ".") \
                and not _SLASH_DATE.fullmatch(word):
            names.append(word)
    dates = []
    for m in _ISO_DATE.finditer(question):
        dates.append(DateRef(int(m.group(2)), int(m.group(3)), int(m.group(1)), m.group(0)))
    for m in _DAY_MONTH.finditer(question):
        dates.append(DateRef(_MONTHS[m.group(2)[:3].lower()], int(m.group(1)),
                             int(m.group(3)) if m.group(3) else None, m.group(0)))
    for m in _DOTTED_DATE.finditer(question):
        dates.append(DateRef(int(m.group(2)), int(m.group(1)), int(m.group(3)) if m.group(3) else None, m.group(0)))
    for m in _SLASH_DATE.finditer(question):
        dates.append(DateRef(int(m.group(2)), int(m.group(1)), int(m.group(3)) if m.group(3) else None, m.group(0)))
    for m in _MONTH_DAY.finditer(question):
        dates.append(DateRef(_MONTHS[m.group(1)[:3].lower()], int(m.group(2)),
                             int(m.group(3)) if m.group(3) else None, m.group(0)))
    valid = [d for d in dates if 1 <= d.month <= 12 and 1 <= d.day <= 31]
    return Entities(tuple(dict.fromkeys(names)), tuple(dict.fromkeys(valid)))


def _day_strings(date: DateRef) -> list[str]:
    """How a document's text may write the day, lower-case: ISO (with or without the year),
    compact, ``12.03.``, ``12/03``, ``12 march``, ``march 12``, ``12 mar``."""
    md = f"{date.month:02d}-{date.day:02d}"
    month = MONTH_NAMES[date.month - 1]
    out = [f"{date.year}-{md}", f"{date.year}{date.month:02d}{date.day:02d}"] if date.year else [f"-{md}"]
    out += [f"{date.day:02d}.{date.month:02d}.", f"{date.day}.{date.month}.", f"{date.day:02d}/{date.month:02d}",
            f"{date.day}/{date.month}", f"{date.day} {month}", f"{month} {date.day}", f"{date.day} {month[:3]} ",
            f"{month[:3]} {date.day} "]
    return out


def _squeeze(text: str) -> str:
    """Lower-case, without ``-``, ``_`` and ``.``: ``LTO-9`` and ``lto9`` compare equal."""
    return re.sub(r"[-_.]", "", text.lower())


@dataclass(frozen=True)
class DocumentText:
    """A candidate document as the entity check sees it: its text and its dates (ISO)."""

    doc_id: str
    text: str
    dates: tuple[str, ...] = ()


def holds(doc: DocumentText, entities: Entities) -> tuple[list[str], list[str]]:
    """The entities ``doc`` holds and those it lacks (labels as in the question).

    A name matches case-insensitively anywhere in the text, ignoring ``-``, ``_`` and ``.``;
    a day matches the document's dates (its ``created``) or a spelling of that day in the
    text (:func:`_day_strings`).
    """
    lowered = doc.text.lower()
    squeezed = _squeeze(doc.text)
    have: list[str] = []
    lack: list[str] = []
    for name in entities.names:
        (have if _squeeze(name) in squeezed else lack).append(name)
    for date in entities.dates:
        hit = any(date.matches(d) for d in doc.dates) or any(s in lowered for s in _day_strings(date))
        (have if hit else lack).append(date.text)
    return have, lack


def entity_order(docs: Sequence[DocumentText], entities: Entities) -> list[int]:
    """Indexes of ``docs`` (given in retrieval order) re-ordered: most named entities held
    first, retrieval order within ties (a stable sort). Without entities: unchanged."""
    if not entities:
        return list(range(len(docs)))
    held = [len(holds(d, entities)[0]) for d in docs]
    return sorted(range(len(docs)), key=lambda i: -held[i])


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
           min_support: float = MIN_SUPPORT) -> Grounding:
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
    """
    entities = question_entities(question)
    labels = entities.labels()
    missing = [e for e in labels if all(e in holds(d, entities)[1] for d in shown)] if shown else labels
    support = evidence_support(question, highlights, embedder)
    if missing:
        return Grounding(False, f"no retrieved entry mentions {', '.join(missing)}", missing, support, labels)
    if labels:  # every entity it names is in a shown source: the question is about those entries
        return Grounding(True, "", [], support, labels)
    if support is not None and support < min_support:
        return Grounding(False, f"no evidence line is close to the question (similarity {support:.2f} < "
                                f"{min_support:.2f})", [], support, labels)
    return Grounding(True, "", [], support, labels)


def not_found_answer(grounding: Grounding, titles: Sequence[str]) -> str:
    """The answer text when the sources do not answer: what is missing, then the closest
    entries as ``[n] title`` (cited, so the page and the footer link them)."""
    head = "Not found in the logbooks and tickets"
    if grounding.missing:
        head += f": no entry mentions {', '.join(grounding.missing)}"
    head += "."
    if not titles:
        return head
    closest = "; ".join(f"[{i + 1}] {t}" for i, t in enumerate(titles))
    return f"{head} The closest entries are {closest}."
