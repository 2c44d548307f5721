"""The sources an answer or a search shows, and the trust fields every answer carries: its quotes,
unverified literals, "not found" and destructive commands."""

from __future__ import annotations

from typing import Any, Collection
from urllib.parse import quote

from pydantic import BaseModel, Field

from copilot.answer.assembly import Answer
from copilot.search.destructive import find_destructive
from copilot.search.sources import Source


class ChunkMatch(BaseModel):
    """A chunk of a source that retrieval matched."""

    chunk_id: str
    score: float = Field(description="fused retrieval score (weighted RRF sum, ~0.1-0.3; key matches ~10)")


class DestructiveOut(BaseModel):
    """A destructive command (:mod:`copilot.search.destructive`) in an evidence line or in the answer:
    shown marked; check it before running anything like it."""

    command: str = Field(description="the command as written")
    reason: str = Field(description="why it is destructive")
    rule: str = Field(description="the rule that matched (rm-recursive-root, mkfs, drop-database, ...)")
    start: int = Field(description="character offset in the evidence line, or in the answer")
    end: int
    highlight: int | None = Field(None, description="in sources[].destructive: index of the evidence line")


def destructive_marks(highlights: Collection[str]) -> list[DestructiveOut]:
    """The destructive commands of each evidence line, with the line's index."""
    return [DestructiveOut(**m.to_dict(), highlight=i) for i, line in enumerate(highlights)
            for m in find_destructive(line)]


class SourceOut(BaseModel):
    """A source document: ``[n]`` in the answer refers to ``n`` here; no document appears twice."""

    n: int
    doc_id: str
    source: str
    title: str
    key: str | None = Field(None, description="ELOG MID or ticket key")
    doc_type: str | None = None
    created: str | None = Field(None, description="when the entry was written (ISO 8601), if known")
    url: str = Field(description="the document with its chunks (GET, relative to this server)")
    highlights: list[str] = Field(description="the 1-3 lines of the document that best answer the question, best "
                                  "first")
    destructive: list[DestructiveOut] = Field(default_factory=list, description="destructive commands in the "
                                              "evidence lines (rm -rf /, mkfs, dd of=/dev/..., DROP TABLE, ...)")
    snippet: str = Field(description="the start of the best matching chunk")
    score: float = Field(description="its best chunk's fused retrieval score")
    cited: bool = Field(False, description="the answer cites it")
    supports: bool = Field(False, description="it holds a literal the answer quotes (the citation by support)")
    chunks: list[ChunkMatch] = Field(description="the document's matched chunks, best first")

    @classmethod
    def from_source(cls, s: Source, cited: Collection[int] = (), supported: Collection[int] = ()) -> "SourceOut":
        """The API view of a prompt source."""
        meta = s.metadata
        key = meta.get("ticket_key") or meta.get("mid")
        created = meta.get("created")
        return cls(n=s.n, doc_id=s.doc_id, source=str(meta.get("source", "")), title=str(meta.get("title") or ""),
                   key=None if key is None else str(key), doc_type=meta.get("doc_type"),
                   created=None if created is None else str(created),
                   url=f"/v1/documents/{quote(s.doc_id, safe='')}", highlights=list(s.highlights),
                   destructive=destructive_marks(s.highlights),
                   snippet=s.passages[0].snippet(), score=round(s.score, 6), cited=s.n in cited,
                   supports=s.n in supported,
                   chunks=[ChunkMatch(chunk_id=p.chunk.chunk_id, score=round(p.score, 6)) for p in s.passages])


class QuoteOut(BaseModel):
    """A literal of the answer found verbatim (whitespace-normalised) in a shown source."""

    literal: str = Field(description="the literal as the answer writes it")
    kind: str = Field(description="code | command | path | setting | error | host | name | ticket | date | value")
    answer_start: int = Field(description="character offset of the literal in the answer")
    answer_end: int
    n: int = Field(description="the source that holds it ([n])")
    doc_id: str
    chunk_id: str
    start: int = Field(description="character offset in that chunk's text (GET the document's chunks)")
    end: int
    highlight: int | None = Field(None, description="index of the source's evidence line that holds it")
    cited: int | None = Field(None, description="the source the answer cites for it (the first [k] after it on its "
                              "line); when it differs from n, the answer's text says so in a labelled source check")


class UnverifiedOut(BaseModel):
    """A literal of the answer found in no shown source: check it before running it."""

    literal: str
    kind: str
    answer_start: int
    answer_end: int
    in_question: bool = Field(False, description="the question names it (the sources do not)")


def trust_fields(answer: Answer) -> dict[str, Any]:
    """An answer's ``quotes``, ``unverified``, ``not_found`` and ``destructive`` (its destructive
    commands, :mod:`copilot.search.destructive`) as every response carries them (JSON values)."""
    return {"quotes": [q.to_dict() for q in answer.quotes], "unverified": [u.to_dict() for u in answer.unverified],
            "not_found": answer.not_found, "destructive": [m.to_dict() for m in find_destructive(answer.text)]}


def sources_out(answer: Answer) -> list[SourceOut]:
    """The API view of an answer's sources, each marked when the answer cites it."""
    return [SourceOut.from_source(s, answer.cited, answer.supported) for s in answer.sources]
