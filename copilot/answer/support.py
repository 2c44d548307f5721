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
``xrootd-gw02`` for ``xrootd-gw01``, ``OPS-118`` for ``OPS-117``; or the same first label: ``htc-ce02``
for ``htc-cm01``) and none names the asked one, the answer is about another subject and is reported as
not found (:func:`sibling_subject`). The check
costs one literal lookup per answer (no model call).
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
    """Whether two different names with digits are of one family: the same shape with other digits
    (``xrootd-gw01``, ``xrootd-gw02``), or the same first label before a ``-`` (``htc-cm01``, ``htc-ce02``)."""
    a, b = a.lower(), b.lower()
    if a == b or not (_DIGITS.search(a) and _DIGITS.search(b)):
        return False
    if _DIGITS.sub("#", a) == _DIGITS.sub("#", b):
        return True
    return "-" in a and "-" in b and a.split("-", 1)[0] == b.split("-", 1)[0]


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

    A subject is a host, name or ticket the question names with a digit in it; a sibling is another name
    of its family (:func:`siblings`). Only quotes that lie in an evidence line are weighed (the line is what the
    model read), and so are the evidence lines the answer copies a run of words from (:func:`copies`);
    literals the question itself holds are skipped. A line of a record whose header names
    the subject (its own ticket, an entry titled with the host) is about the subject.
    """
    asked = [e for e in question_entities(question).names if token_kind(e) in SUBJECT_KINDS and _DIGITS.search(e)]
    if not asked:
        return None
    by_n = {s.n: s for s in sources}
    held = [(by_n[q.n].highlights[q.highlight], by_n[q.n].header) for q in quotes
            if q.highlight is not None and q.n in by_n and q.literal.lower() not in question.lower()]
    held += [(line, s.header) for s in sources for line in s.highlights if copies(answer, line)]
    if not held:
        return None
    lines = [line for line, _ in held]
    for subject in asked:  # a line of the subject's own record (its key or title in the header) is about it
        if any(subject.lower() in f"{line} {header}".lower() for line, header in held):
            return None
    for subject in asked:
        for line in lines:
            sibling = next((t.strip(".") for t in _TOKEN.findall(line) if siblings(subject, t.strip("."))), None)
            if sibling is not None:
                return subject, sibling
    return None


def after_generation(question: str, text: str, sources: Sequence[Source]) -> tuple[str, bool]:
    """What the service appends to a finished answer that answers, and whether it is then "not found":
    the "not found" note when its quoted lines are about a sibling subject (:func:`sibling_subject`),
    else the correction for miscited quotes (:func:`support_note`)."""
    quotes = check_literals(text, sources, question).quotes
    sibling = sibling_subject(text, question, quotes, sources)
    if sibling is not None:
        asked, other = sibling
        return (f"\n\n{SUPPORT_LABEL}: not found for {asked}: the lines quoted are about {other}. "
                f"The closest entries are {entry_titles(sources)}."), True
    return support_note(quotes), False
