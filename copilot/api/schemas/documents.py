"""``/v1/documents``: listing, reading and deleting stored documents."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, Field

from copilot.documents import StoredDocument


class DocumentOut(BaseModel):
    """A stored document (one logbook entry, shift, post-mortem or ticket)."""

    doc_id: str = Field(description="source path + '#' + entry key, e.g. tickets/jira_export.json#OPS-101")
    source: str
    doc_type: str | None = None
    title: str | None = None
    key: str | None = Field(None, description="ELOG MID, ticket key, shift name or record id")
    created: datetime | None = None
    n_chunks: int

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "DocumentOut":
        ts = row.get("created_ts")
        return cls(doc_id=row["doc_id"], source=row["source"], doc_type=row.get("doc_type"), title=row.get("title"),
                   key=row.get("key"), created=datetime.fromtimestamp(ts, timezone.utc) if ts is not None else None,
                   n_chunks=int(row.get("n_chunks") or 0))


class DocumentPage(BaseModel):
    """``GET /v1/documents``: one page, ordered by source then id."""

    total: int
    offset: int
    limit: int
    documents: list[DocumentOut]


class ChunkOut(BaseModel):
    """One chunk of a stored document, as indexed."""

    chunk_id: str
    text: str


class DocumentDetail(DocumentOut):
    """``GET /v1/documents/{doc_id}``: the document with its chunks."""

    chunks: list[ChunkOut]

    @classmethod
    def from_document(cls, document: StoredDocument) -> "DocumentDetail":
        """The API view of a stored document."""
        return cls(**DocumentOut.from_row(document.info).model_dump(),
                   chunks=[ChunkOut(chunk_id=c.chunk_id, text=c.text) for c in document.chunks])


class DeleteResponse(BaseModel):
    """What ``DELETE /v1/documents/{doc_id}`` removed."""

    deleted: str = Field(description="the deleted document id")
    chunks: int = Field(description="chunks removed")
