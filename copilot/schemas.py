"""Pydantic models for every request and response of the web API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from copilot.retrieval import Passage
from ingestion.documents import SearchFilter


class Filters(BaseModel):
    """Metadata filters; all optional and AND-ed."""

    model_config = ConfigDict(extra="forbid")

    doc_types: list[Literal["elog", "shiftlog", "postmortem", "jira", "csv_ticket", "jsonl", "text"]] = []
    source: str | None = Field(None, description="exact source path as stored, e.g. logbooks/operations.elog")
    ticket_key: str | None = Field(None, description="ticket key or ELOG MID exactly as written")
    since: datetime | None = Field(None, description="created at or after (ISO 8601)")
    until: datetime | None = Field(None, description="created at or before (ISO 8601)")

    def to_search_filter(self) -> SearchFilter:
        return SearchFilter(tuple(self.doc_types), self.source, self.ticket_key,
                            int(self.since.timestamp()) if self.since else None,
                            int(self.until.timestamp()) if self.until else None)


class HistoryMessage(BaseModel):
    role: Literal["user", "assistant"]
    content: str = Field(max_length=20_000)


class AskRequest(BaseModel):
    """``POST /v1/ask``."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, description="the operator's question")
    top_k: int | None = Field(None, ge=1, le=100, description="passages to retrieve (default from settings)")
    max_new_tokens: int | None = Field(None, ge=0, description="answer budget in tokens (capped by settings)")
    stream: bool = Field(False, description="Server-Sent Events: deltas, then one final event")
    filters: Filters | None = None
    history: list[HistoryMessage] = Field(default_factory=list, max_length=50)
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0 = greedy (exact)")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None


class SourceOut(BaseModel):
    """A cited passage: ``[n]`` in the answer refers to ``n`` here."""

    n: int
    chunk_id: str
    doc_id: str
    source: str
    title: str
    key: str | None = Field(None, description="ELOG MID or ticket key")
    snippet: str
    score: float

    @classmethod
    def from_passage(cls, p: Passage) -> "SourceOut":
        meta = p.chunk.metadata
        key = meta.get("ticket_key") or meta.get("mid")
        return cls(n=p.n, chunk_id=p.chunk.chunk_id, doc_id=p.chunk.doc_id, source=p.source, title=p.title,
                   key=None if key is None else str(key), snippet=p.snippet(), score=round(p.score, 6))


class AskResponse(BaseModel):
    answer: str
    sources: list[SourceOut]
    stats: dict[str, Any]


class ErrorResponse(BaseModel):
    detail: str


class HealthResponse(BaseModel):
    status: Literal["ok"]


class ReadyResponse(BaseModel):
    status: Literal["ready", "not ready"]
    model_loaded: bool
    store_reachable: bool
    chunks: int | None = None
    detail: str | None = None
