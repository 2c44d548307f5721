"""Where an answer's words come from, checked after generation: the source that supports each quote,
a labelled correction when the model cites another, and "not found" when the lines it quotes are
about a sibling of the host or ticket the question names.

A small target model often writes ``[1]`` after words it copied from source [2]; the literal check
(:mod:`copilot.answer.quotes`) knows which source holds each literal. The model's text is never
changed (the exactness contract); the service appends a labelled note instead
(:func:`support_note`), and the answer's citations are reported by support (``Answer.supported``).

Entity rules before generation (:mod:`copilot.answer.grounding`) cannot catch "when does
xrootd-gw01's certificate expire?" when the records name gw01 but only hold gw02's certificate: the
sources hold every entity named. After generation the quoted lines tell: when every evidence line
the answer quotes names a *sibling* of an asked host or ticket (the same name with other digits:
``xrootd-gw02`` for ``xrootd-gw01``, ``OPS-118`` for ``OPS-117``; the same first label: ``htc-ce02``
for ``htc-cm01``; another last letter: ``sw-core-b`` for ``sw-core-a``; a ticket number of the same length
in the record's header: ``Ticket 166702`` for "GGUS 166517") and none names the asked one, the answer
is about another subject and is reported as not found (:func:`sibling_subject`).

A question that asks for a value of a recognisable shape (a serial number, a version, an autonomy) is
also not answered by an answer that holds no value of that shape (:func:`missing_value`): answer-type
checking, as QA systems validate a candidate against the question's expected answer type. Both checks
cost a few regular expressions per answer (no model call). A second target-model pass ("does the
evidence answer the question? Yes/No") was measured as the alternative and does not separate the
answerable from the unanswerable questions (``evals/results/README.md``, issue 43).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from copilot.answer.quotes import Quote, check_literals
from copilot.answer.shape import entry_titles
from copilot.search.entities import question_entities
from copilot.search.literals import token_kind
from copilot.search.sources import Source

SUPPORT_LABEL = "Source check (added by OpsCopilot, not the model's words)"
_DIGITS = re.compile(r"\d+")
_TOKEN = re.compile(r"[\w.-]+")
_WORDS = re.compile(r"[\w.,/:-]+")
#: Consecutive words an answer must share with an evidence line to copy it.
COPIED_WORDS = 4
#: The asked entity kinds that name a subject (a host or a ticket, not an error code or a path).
SUBJECT_KINDS = frozenset({"host", "name", "ticket"})
#: A name whose last label is one letter: ``sw-core-a``, ``UPS-B`` (the A and B sides of a pair).
_LETTERED = re.compile(r"(?<![\w-])[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*-[A-Za-z](?![\w-])")
#: A ticket asked by its number alone: "GGUS 166517", "ticket #166517".
_TICKET_NUMBER = re.compile(r"\b(?:GGUS|ticket)\s*#?\s*(\d{5,8})\b", re.IGNORECASE)
#: Values of a recognisable shape a question may ask for: (what the question says, what the answer must hold, label).
_ASKED_VALUES = (
    (re.compile(r"\bserial\b", re.IGNORECASE),
     re.compile(r"(?<![\w-])(?=[\w-]*\d)[A-Za-z0-9][\w-]{5,}(?![\w-])"), "serial number"),
    (re.compile(r"\b(?:what|which)\s+(?:[\w-]+\s+){0,3}(?:firmware|fw|version)\b|\b(?:firmware|fw) version\b",
                re.IGNORECASE),
     re.compile(r"\b\d+(?:\.\d+)+|\bv\d+\b", re.IGNORECASE), "version"),
    (re.compile(r"\bautonom(?:y|ie)\b", re.IGNORECASE),
     re.compile(r"\b\d+(?:[.,]\d+)?\s?(?:min(?:utes?)?|s|sec(?:onds?)?|h|hours?)\b", re.IGNORECASE), "autonomy"),
)
#: Dates and times, which never count as a serial number.
_DATE_OR_TIME = re.compile(r"\d{4}-\d\d-\d\d(?:[T ][\d:.+]*)?|\b\d{1,2}:\d\d(?::\d\d)?\b")


def supported(quotes: Sequence[Quote]) -> list[int]:
    """The sources that hold the answer's quoted literals, in order of first quote."""
    return list(dict.fromkeys(q.n for q in quotes))


def support_note(quotes: Sequence[Quote]) -> str:
    """The labelled correction for quotes the answer cites from a source that does not hold them:
    ``Source check …: `8589934592` is in [2], not [1].`` (``""`` when every cited quote is where
    its citation says)."""
    wrong = list({(q.literal, q.n, q.cited): q for q in quotes if q.miscited}.values())
    if not wrong:
        return ""
    parts = "; ".join(f"`{q.literal}` is in [{q.n}], not [{q.cited}]" for q in wrong)
    return f"\n\n{SUPPORT_LABEL}: {parts}."


def siblings(a: str, b: str) -> bool:
    """Whether two different names are of one family: the same shape with other digits
    (``xrootd-gw01``, ``xrootd-gw02``; two numbers of the same length), the same first label before a
    ``-`` (``htc-cm01``, ``htc-ce02``), or the same name with another one-letter last label
    (``sw-core-a``, ``sw-core-b``). A ticket or error code is no sibling of a host (``ORA-00257`` of
    ``ora-rac-01``)."""
    if (token_kind(a) == "ticket") != (token_kind(b) == "ticket"):
        return False
    a, b = a.lower(), b.lower()
    if a == b:
        return False
    if _LETTERED.fullmatch(a) and _LETTERED.fullmatch(b):
        return a[:-1] == b[:-1]
    if not (_DIGITS.search(a) and _DIGITS.search(b)):
        return False
    if a.isdigit() or b.isdigit():
        return a.isdigit() and b.isdigit() and len(a) == len(b)
    if _DIGITS.sub("#", a) == _DIGITS.sub("#", b):
        return True
    return "-" in a and "-" in b and a.split("-", 1)[0] == b.split("-", 1)[0]


def asked_subjects(question: str) -> list[str]:
    """The hosts and tickets ``question`` names: entities of :data:`SUBJECT_KINDS` with a digit, names
    with a one-letter last label (``sw-core-a``) and ticket numbers ("GGUS 166517" gives ``166517``)."""
    names = [e for e in question_entities(question).names if token_kind(e) in SUBJECT_KINDS and _DIGITS.search(e)]
    names += [m.group(0) for m in _LETTERED.finditer(question)]
    names += [m.group(1) for m in _TICKET_NUMBER.finditer(question)]
    return list(dict.fromkeys(names))


def missing_value(question: str, answer: str) -> str | None:
    """The label of a value ``question`` asks for that ``answer`` holds none of (``"serial number"``,
    ``"version"``, ``"autonomy"``), else ``None``. Tokens the question itself holds, and dates and
    times, do not count as the value."""
    said = _DATE_OR_TIME.sub(" ", answer)
    asked = question.lower()
    for asks, shape, label in _ASKED_VALUES:
        if asks.search(question) and not any(m.group(0).lower() not in asked for m in shape.finditer(said)):
            return label
    return None


def copies(answer: str, line: str, words: int = COPIED_WORDS) -> bool:
    """Whether ``answer`` copies a run of ``words`` consecutive words of evidence line ``line`` (a value
    with no literal shape, ``Dell SR 1829102277``, is read from the line it was copied from)."""
    tokens = _WORDS.findall(line.lower())
    said = " ".join(_WORDS.findall(answer.lower()))
    return any(" ".join(tokens[i:i + words]) in said for i in range(len(tokens) - words + 1))


def sibling_subject(answer: str, question: str, quotes: Sequence[Quote], sources: Sequence[Source]
                    ) -> tuple[str, str] | None:
    """``(asked, sibling)`` when the answer's quoted evidence lines are about a sibling of a subject
    the question names and never about that subject, else ``None``.

    A subject is a host or ticket the question names (:func:`asked_subjects`); a sibling is another name
    of its family (:func:`siblings`) in a weighed line or its record's header. Only quotes that lie in an
    evidence line are weighed (the line is what the model read), and so are the evidence lines the answer
    copies a run of words from (:func:`copies`); literals the question itself holds are skipped. A line of
    a record whose header names the subject (its own ticket, an entry titled with the host) is about the
    subject.
    """
    asked = asked_subjects(question)
    if not asked:
        return None
    by_n = {s.n: s for s in sources}
    held = [(by_n[q.n].highlights[q.highlight], by_n[q.n].header) for q in quotes
            if q.highlight is not None and q.n in by_n and q.literal.lower() not in question.lower()]
    held += [(line, s.header) for s in sources for line in s.highlights if copies(answer, line)]
    if not held:
        return None
    read = [f"{line} {header}" for line, header in held]
    for subject in asked:  # a line of the subject's own record (its key or title in the header) is about it
        if any(subject.lower() in text.lower() for text in read):
            return None
    for subject in asked:
        for text in read:
            sibling = next((t.strip(".") for t in _TOKEN.findall(text) if siblings(subject, t.strip("."))), None)
            if sibling is not None:
                return subject, sibling
    return None


def after_generation(question: str, text: str, sources: Sequence[Source]) -> tuple[str, bool]:
    """What the service appends to a finished answer that answers, and whether it is then "not found":
    the "not found" note when its quoted lines are about a sibling subject (:func:`sibling_subject`) or
    it holds no value of the shape asked for (:func:`missing_value`), else the correction for miscited
    quotes (:func:`support_note`)."""
    quotes = check_literals(text, sources, question).quotes
    sibling = sibling_subject(text, question, quotes, sources)
    closest = f"The closest entries are {entry_titles(sources)}."
    if sibling is not None:
        asked, other = sibling
        return f"\n\n{SUPPORT_LABEL}: not found for {asked}: the lines quoted are about {other}. {closest}", True
    missing = missing_value(question, text)
    if missing is not None:
        return f"\n\n{SUPPORT_LABEL}: not found: the answer gives no {missing}. {closest}", True
    return support_note(quotes), False
