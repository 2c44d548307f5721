"""Reading stored documents: the use cases behind ``GET /v1/documents`` and
``GET /v1/documents/{doc_id}``, narrowed to what the caller may read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from copilot.access import Access
from ingestion.documents import Chunk
from ingestion.stores.chunk_store import ChunkStore


@dataclass(frozen=True)
class StoredDocument:
    """One stored document: its record (doc_id, source, doc_type, title, key, created_ts,
    content_hash, n_chunks) and its chunks in order."""

    info: dict[str, Any]
    chunks: list[Chunk]


def document_page(store: ChunkStore, offset: int, limit: int, access: Access) -> tuple[list[dict[str, Any]], int]:
    """A page of the documents ``access`` may read (filtered in the store), ordered by source
    then id: their records, and how many there are in all."""
    return store.manifest.page(offset, limit, access.restrict(None))


def readable_document(store: ChunkStore, doc_id: str, access: Access) -> StoredDocument | None:
    """The document ``doc_id`` with its chunks; None when unknown or outside what ``access``
    may read (the caller cannot tell which)."""
    info = store.manifest.info(doc_id)
    if info is None or not access.allows(info):
        return None
    return StoredDocument(info, store.lexical.document_chunks(doc_id))
