"""Whether the model's answer answers: a bare citation, an echoed header line, or the model's own
"not in the sources" -- and what the product adds then, labelled as its own.

A small target model often replies ``[1]`` or copies a source's header line (``[jira] OPS-107:
FTS transfers to FNAL failing``) instead of the line that answers. The generated text is never
changed (the exactness contract: it is token for token what greedy decoding gives); after it
the service appends an *addition*, marked as quoted from the source and not the model's words:

- for a bare citation or an echoed header: the best evidence line, the first line of the first
  source that has one (evidence is ranked so that line is the one that answers:
  :mod:`copilot.search.highlights`), verbatim, cited. A bare ``[3]`` says nothing of which line
  answers: on site2 it named the entry's "dr up" line for a "take the drive out" question;
- for an answer in which the model says the sources do not hold the answer: the closest entries,
  cited, and the answer is reported as not found (``Answer.not_found``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from copilot.answer.citations import strip_citations
from copilot.search.sources import Source

_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)
#: The model's own ways of saying the sources do not answer (matched at the answer's start, or as
#: its only sentence), in the words instruction-tuned models use.
_ABSTAIN = re.compile(
    r"^\W*(?:not found\b"
    r"|(?:i\s+)?(?:could|can)\s*not\s+find\b|(?:i\s+)?can't\s+find\b|(?:i\s+)?couldn't\s+find\b"
    r"|(?:the\s+)?(?:provided\s+)?(?:sources|passages|logbooks?|tickets|entries|documents)\s+(?:do|does)\s*n[o']t\s+"
    r"(?:contain|mention|say|include|provide|specify|state|have)\b"
    r"|there\s+is\s+no\s+(?:information|mention|entry|record)\b"
    r"|no\s+(?:information|entry|record|mention)\s+(?:about|on|of|for|in)\b"
    r"|(?:this|that|the answer)\s+is\s+not\s+(?:mentioned|stated|given|specified|in the sources)\b)",
    re.IGNORECASE)
EXTRACT_LABEL = "Extract from the source, quoted as written (the model gave no answer of its own)"
CLOSEST_LABEL = "The model found no answer in the sources. The closest entries are"


def _norm(text: str) -> str:
    """Lower-case words only: citations, punctuation and spacing removed."""
    return " ".join(_NON_WORD.sub(" ", strip_citations(text).lower()).split())


def only_citations(text: str) -> bool:
    """The answer holds nothing but citation markers (``[1]``, ``[1][2].``) and punctuation."""
    return bool(text.strip()) and not _norm(text)


def echoes_header(text: str, sources: Sequence[Source]) -> bool:
    """The answer is (a part of) a shown source's header line or title, and nothing more."""
    words = _norm(text)
    if not words:
        return False
    for source in sources:
        for line in (source.header, str(source.metadata.get("title") or "")):
            header = _norm(line)
            if header and (words in header or header in words and len(words) <= len(header) + 12):
                return True
    return False


def abstains(text: str) -> bool:
    """The model says, in its own words, that the sources do not hold the answer."""
    return bool(_ABSTAIN.match(strip_citations(text)))


def _extract(sources: Sequence[Source]) -> str:
    source = next((s for s in sources if s.highlights), None)
    if source is None:
        return ""
    return f"\n\n{EXTRACT_LABEL}: \"{source.highlights[0]}\" [{source.n}]"


def entry_titles(sources: Sequence[Source]) -> str:
    """``[n] title`` of each source, ``; ``-separated (cited, so the page links them)."""
    return "; ".join(f"[{s.n}] {' '.join(str(s.metadata.get('title') or s.doc_id).split())}" for s in sources)


def _closest(sources: Sequence[Source]) -> str:
    titles = entry_titles(sources)
    return f"\n\n{CLOSEST_LABEL} {titles}." if titles else ""


def addition(text: str, sources: Sequence[Source]) -> tuple[str, bool]:
    """What the service appends to the model's finished answer ``text`` over ``sources`` (as
    shown, numbered as cited), and whether the answer is then "not found".

    Returns:
        ``("", False)`` for an answer that answers; the labelled extract for a bare citation or
        an echoed header; the closest entries and ``True`` for the model's own abstention.
    """
    if not sources:
        return "", False
    if abstains(text):
        return _closest(sources), True
    if not text.strip() or only_citations(text) or echoes_header(text, sources):
        return _extract(sources), False
    return "", False
