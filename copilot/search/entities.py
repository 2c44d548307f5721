"""What a question names: hosts, tickets, error codes, paths, settings and days, and which documents hold them.

Operators name things: a host (``se-07``), a ticket (``OPS-107``), an error code
(``SRM_AUTHORIZATION_FAILURE``), a path, a date ("on 12 March", ``2026-01-20``). Incidents repeat on
other hosts and days, so a document about the same error on another host is a *near-duplicate*, not
an answer. This module extracts the entities a question names (:func:`question_entities`: tokens of
the literal kinds of :mod:`copilot.search.literals`, and days), tells which a document holds
(:func:`holds`) and orders candidates so that those holding every named entity come first
(:func:`entity_order`, used by :class:`copilot.search.searcher.Searcher`); "not found" before
generation (:mod:`copilot.answer.grounding`) and follow-ups (:mod:`copilot.answer.followup`) use them too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from copilot.search.literals import token_kind, trim_token

#: Entity kinds a question names that a source must hold (dates are matched on their own).
ENTITY_KINDS = frozenset({"ticket", "error", "host", "name", "path", "setting"})
#: Chat shorthand that has the shape of a name (a letter, then a digit) but names nothing: "b4" is
#: "before" in "the cmd used b4 swapping the disk", not a host to find in the sources.
CHAT_SHORTHAND = frozenset({"b4", "l8r", "gr8", "w8", "any1", "some1", "no1", "ne1", "every1"})
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
    (:func:`copilot.answer.quotes.token_kind`) but not :data:`CHAT_SHORTHAND`, and days (``2026-03-12``,
    ``12 March``, ``March 2nd``, ``12.03.``, ``12/03``: day first)."""
    names = []
    for raw in question.split():
        word, _ = trim_token(raw, 0)
        if _BRACKET_CODE.match(raw):  # an error number as logs print it: [3021]
            names.append(raw.rstrip(".,;:!?"))
        elif word and token_kind(word) in ENTITY_KINDS and not _DOTTED_DATE.fullmatch(word + ".") \
                and not _SLASH_DATE.fullmatch(word) and word.lower() not in CHAT_SHORTHAND:
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


def mentions(text: str, name: str) -> bool:
    """Whether ``text`` names ``name``, case-insensitively, ignoring ``-``, ``_`` and ``.`` (``osd.17`` in
    ``NAME osd.17``, ``xrd-gw02`` in ``xrd_gw02``)."""
    return _squeeze(name) in _squeeze(text)


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
