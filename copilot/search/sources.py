"""Sources: retrieved chunks grouped into documents, numbered as the prompt cites them.

A source is one document (a logbook entry, shift, post-mortem or ticket) with the chunks
of it that retrieval matched, its best fused score, and its evidence lines
(:mod:`copilot.search.highlights`). ``[n]`` in an answer cites source ``n``; no document appears
twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from copilot.search.highlights import Embedder, score_units, top_units
from copilot.search.record import record_text, record_units
from copilot.search.retrieval import Passage
from ingestion.documents import Chunk


def chunk_header(text: str) -> str:
    """The chunk's first line: the document header (kind, key, title, date, status)."""
    return text.split("\n", 1)[0].strip()


def chunk_body(text: str) -> str:
    """The chunk's text after its header line."""
    parts = text.split("\n", 1)
    return parts[1] if len(parts) > 1 else ""


@dataclass(frozen=True)
class Source:
    """One cited document.

    Attributes:
        n: 1-based citation number (``[n]`` in the answer).
        passages: the document's matched chunks, best first (>= 1).
        highlights: the 1–3 evidence units that best answer the question, best first.
        record: every chunk of the document, in order (empty when not read: the evidence lines
            then come from ``passages`` alone).
    """

    n: int
    passages: tuple[Passage, ...]
    highlights: tuple[str, ...] = field(default_factory=tuple)
    record: tuple[Chunk, ...] = field(default_factory=tuple)

    @property
    def doc_id(self) -> str:
        """The document's id (``source#KEY``)."""
        return self.passages[0].chunk.doc_id

    @property
    def metadata(self) -> dict[str, Any]:
        """The document's metadata (source, title, key, created, doc_type, ...)."""
        return self.passages[0].chunk.metadata

    @property
    def score(self) -> float:
        """The best fused score among its chunks."""
        return max(p.score for p in self.passages)

    @property
    def header(self) -> str:
        """The document header line its chunks start with."""
        return chunk_header(self.passages[0].chunk.text)

    def chunks_in_order(self) -> list[Passage]:
        """The matched chunks in document order."""
        return sorted(self.passages, key=lambda p: p.chunk.index)

    def body(self) -> str:
        """The matched chunks' text (headers removed) in document order, gaps marked ``…``."""
        parts, last = [], None
        for p in self.chunks_in_order():
            if last is not None and p.chunk.index != last + 1:
                parts.append("…")
            parts.append(chunk_body(p.chunk.text).strip())
            last = p.chunk.index
        return "\n".join(parts)

    def record_body(self) -> str:
        """The whole record's text when it was read (:attr:`record`), else the matched chunks' (:meth:`body`)."""
        return record_text(self.record) if self.record else self.body()

    def haystack_chunks(self) -> list[Chunk]:
        """The chunks an answer's literals are looked up in: the whole record when read, else the matched ones."""
        return list(self.record) if self.record else [p.chunk for p in self.passages]


def group_by_document(passages: Sequence[Passage], max_documents: int, max_chunks_per_document: int = 3
                      ) -> list[Source]:
    """Group ranked chunks into at most ``max_documents`` sources, numbered 1..n by their
    best chunk's rank; each keeps up to ``max_chunks_per_document`` of its chunks."""
    groups: dict[str, list[Passage]] = {}
    for p in passages:
        chunks = groups.get(p.chunk.doc_id)
        if chunks is None:
            if len(groups) == max_documents:
                continue
            groups[p.chunk.doc_id] = chunks = []
        if len(chunks) < max_chunks_per_document:
            chunks.append(p)
    return [Source(i + 1, tuple(chunks)) for i, chunks in enumerate(groups.values())]


#: Evidence lines shown for the best source and for each other one: the same 9 lines as 3 × 3, weighted
#: to the source that most often answers, whose answering line in a long record is often its 4th or 5th
#: best (chosen on the sample, site2 and longrec tuning sets: ``copilot eval retrieval``'s evidence rows).
FIRST_SOURCE_LINES = 5
OTHER_SOURCE_LINES = 2


def with_highlights(question: str, sources: Sequence[Source], embedder: Embedder | None) -> list[Source]:
    """``sources`` with their evidence lines for ``question`` (:data:`FIRST_SOURCE_LINES` for the first,
    :data:`OTHER_SOURCE_LINES` for each other), drawn from each whole record when it was read (see
    :mod:`copilot.search.record` and :mod:`copilot.search.highlights`)."""
    units = [record_units(s.record_body(), str(s.metadata.get("title") or "")) for s in sources]
    scored = score_units(question, units, embedder)
    return [replace(s, highlights=tuple(u.text for u in top_units(
        scored, i, FIRST_SOURCE_LINES if i == 0 else OTHER_SOURCE_LINES))) for i, s in enumerate(sources)]
