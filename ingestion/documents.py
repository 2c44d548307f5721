"""Value objects shared by every ingestion stage: documents, chunks, search hits, filters.

A :class:`Document` is one logbook entry, one shift, one post-mortem or one ticket.
Its id is ``f"{source}#{key}"`` where ``source`` is the source path relative to the
ingest root (forward slashes) and ``key`` is the ELOG MID, ticket key, shift name or
record id *exactly as written* (``OPS/12``, ``OPS:12``, ``OPS 12`` and ``ops-12#1`` stay
four distinct documents). A :class:`Chunk` id is ``f"{doc_id}#{i}"``; because ``i`` is
always an integer after the last ``#``, chunk ids never collide across documents.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Union

MetadataValue = Union[str, int, float, bool, list[str], None]
Metadata = dict[str, MetadataValue]



def make_doc_id(source: str, key: str) -> str:
    """Build the stable document id ``f"{source}#{key}"`` (both kept exactly as given).

    Raises:
        ValueError: if ``source`` or ``key`` is empty.
    """
    if not source:
        raise ValueError("document source must not be empty")
    if key is None or str(key) == "":
        raise ValueError(f"document key must not be empty (source {source!r})")
    return f"{source}#{key}"


def make_chunk_id(doc_id: str, index: int) -> str:
    """Build the chunk id ``f"{doc_id}#{index}"`` (``index`` counts from 0)."""
    return f"{doc_id}#{int(index)}"


def _canonical(value: Any) -> Any:
    """Make metadata JSON-canonical (tuples -> lists) for hashing."""
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def content_hash(text: str, metadata: Metadata) -> str:
    """SHA-256 (hex, 64 chars) of a document's text and metadata, independent of key order."""
    payload = json.dumps(
        {"text": text, "metadata": _canonical(metadata)},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Document:
    """One citable unit (entry, shift, ticket, post-mortem) as loaded from a source file.

    Attributes:
        doc_id: ``f"{source}#{key}"``, stable across runs.
        text: the entry as a reader would see it (title line, key fields, body, comments).
        metadata: flat dict. Always present: ``source``, ``doc_type``, ``key``. Usually:
            ``title``, ``author``, ``created_ts`` (int, epoch seconds, UTC), ``created``
            (ISO 8601), ``updated_ts``/``updated``, ``status``, ``labels`` (list[str]),
            ``site``, ``mid`` (ELOG), ``ticket_key`` (tickets), ``in_reply_to`` (ELOG).
            Values may be None (unknown); stores drop those.
    """

    doc_id: str
    text: str
    metadata: Metadata = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        """SHA-256 hex digest of ``text`` and ``metadata`` (see :func:`content_hash`)."""
        return content_hash(self.text, self.metadata)

    @property
    def source(self) -> str:
        """The source path (relative, forward slashes) this document came from."""
        return str(self.metadata.get("source") or self.doc_id.split("#", 1)[0])

    @property
    def key(self) -> str:
        """The entry key as written (MID, ticket key, shift name, record id)."""
        return str(self.metadata.get("key") or self.doc_id.split("#", 1)[-1])


@dataclass(frozen=True)
class Chunk:
    """A piece of a document small enough for the embedding model.

    Attributes:
        chunk_id: ``f"{doc_id}#{i}"``.
        doc_id: id of the parent :class:`Document`.
        text: starts with the document header line (type/key, title, date) so the chunk
            is retrievable and citable on its own; then a slice of the document text.
        metadata: the document's metadata plus ``doc_id``, ``chunk_index`` and ``n_chunks``.
    """

    chunk_id: str
    doc_id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def index(self) -> int:
        """Position of the chunk within its document (0-based)."""
        return int(self.metadata.get("chunk_index", self.chunk_id.rsplit("#", 1)[-1]))


@dataclass(frozen=True)
class ScoredChunk:
    """A search hit.

    ``score`` is higher-is-better: cosine similarity in [-1, 1] for dense search;
    ``-bm25`` (SQLite FTS5's bm25() negated, so >= 0 in practice) for lexical search.
    Scores of the two kinds are not comparable; fuse by rank (e.g. RRF).
    """

    chunk: Chunk
    score: float


@dataclass(frozen=True)
class SearchFilter:
    """Restricts a search; every field is optional and the set fields are AND-ed.

    Attributes:
        doc_types: keep only these document types (empty = all).
        source: exact source path as stored (relative, forward slashes).
        ticket_key: the entry key as written: ticket key, ELOG MID, shift name or record id.
        since_ts: epoch seconds, inclusive lower bound on ``created_ts``.
        until_ts: epoch seconds, inclusive upper bound on ``created_ts``.
        source_folders: keep only sources equal to or under one of these folders (relative,
            forward slashes, no trailing ``/``; matched on path-segment boundaries, so
            ``logbooks`` holds ``logbooks/ops.elog`` but not ``logbooks-old/ops.elog``);
            empty = all.
        match_none: match no chunk at all (an access scope and the user's filter that do not
            overlap: "empty" there means nothing, not everything).
    Documents without ``created_ts`` never match a time bound.
    """

    doc_types: tuple[str, ...] = ()
    source: str | None = None
    ticket_key: str | None = None
    since_ts: int | None = None
    until_ts: int | None = None
    source_folders: tuple[str, ...] = ()
    match_none: bool = False

    def is_empty(self) -> bool:
        """True when no field restricts anything."""
        return self == SearchFilter()


def source_in_folders(source: str, folders: tuple[str, ...]) -> bool:
    """Whether ``source`` (a relative path) equals or lies under one of ``folders`` (whole
    path segments: ``logbooks`` holds ``logbooks/a.elog``, not ``logbooks-old/a.elog``)."""
    return any(source == f or source.startswith(f + "/") for f in folders)
