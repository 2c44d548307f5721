"""Getting deleted documents' bytes out of the store's files (``DELETE /v1/documents/{id}``,
``copilot documents delete``), and compacting the store.

A deletion removes rows; the files may still hold their bytes. What removes them:

- SQLite (``index.sqlite3``): ``secure_delete`` zeroes freed cells as rows are deleted
  (:class:`~ingestion.stores.database.SqliteDatabase`); FTS5 keeps a deleted chunk's terms in
  older segments until they merge (:meth:`~ingestion.stores.lexical_index.LexicalIndex.scrub`);
  the write-ahead log keeps the old page images until it is checkpointed and truncated
  (:meth:`~ingestion.stores.database.Database.reclaim`).
- Embedded Chroma: :meth:`~ingestion.stores.chroma_store.ChromaStore.purge` (log purged,
  database vacuumed, unused HNSW slots zeroed); a Chroma server's files are its own.
- PostgreSQL and pgvector: ``VACUUM`` (``VACUUM FULL`` when compacting).

A purge that cannot finish (a reader holds the write-ahead log, a Chroma server) leaves the
``purge_pending`` mark in ``meta``; the next purge or compaction runs again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ingestion.errors import StoreError

if TYPE_CHECKING:
    from ingestion.stores.chunk_store import ChunkStore

log = logging.getLogger(__name__)

PURGE_PENDING = "purge_pending"
"""``meta`` key: set while a deletion's bytes may still be in the store's files."""
PURGED_TABLES = ("chunks", "documents", "pending", "files")
"""Tables a deletion removes rows from (PostgreSQL vacuums them)."""


def purge(store: ChunkStore) -> list[str]:
    """Remove the bytes of deleted documents from the store's files (after a deletion).

    Returns:
        Warnings for what could not be removed now (the pending mark stays set then).
    Raises:
        StoreError: a store file could not be rewritten (e.g. locked for 30 s).
    """
    with store.write_lock:
        try:
            store.lexical.scrub()
            warnings = _dense(store, store.dense.purge)
            with store.db.transaction():
                store.manifest.meta.set(PURGE_PENDING, "1" if warnings else "")
            if not store.db.reclaim(PURGED_TABLES):
                warnings.append("the SQLite write-ahead log is held by another reader; retried on the next purge")
                with store.db.transaction():
                    store.manifest.meta.set(PURGE_PENDING, "1")
        except Exception as exc:
            raise StoreError(f"deleted data could not be purged from the store's files: "
                             f"{type(exc).__name__}: {exc}") from exc
    for warning in warnings:
        log.warning("purge: %s", warning)
    return warnings


def _dense(store: ChunkStore, step: Callable[[], list[str]]) -> list[str]:
    """Run the dense index's purge or compaction ``step``, unless the index is damaged: its files are
    then replaced by the rebuild (:mod:`ingestion.reindex`), deleted bytes with them."""
    if store.dense_damage:
        return ["the dense index is damaged; its files, with any deleted record's bytes, are replaced when "
                "`copilot documents reindex` rebuilds it"]
    return step()


def purge_pending(store: ChunkStore) -> bool:
    """True when a deletion's bytes may still be in the store's files (a purge did not finish)."""
    return bool(store.manifest.meta.get(PURGE_PENDING))


def compact(store: ChunkStore) -> list[str]:
    """Rewrite every store file in its most compact form, without deleted bytes (slow on a
    large store; blocks writers while it runs): FTS5 segments merged, the dense index purged
    and compacted, SQLite ``VACUUM`` (PostgreSQL ``VACUUM FULL``).

    Returns:
        Warnings for what could not be compacted (a Chroma server's files).
    Raises:
        StoreError: a store file could not be rewritten.
    """
    with store.write_lock:
        try:
            store.lexical.compact()
            warnings = _dense(store, lambda: store.dense.purge(compact=True))
            with store.db.transaction():
                store.manifest.meta.set(PURGE_PENDING, "1" if warnings else "")
            store.db.compact(PURGED_TABLES)
        except Exception as exc:
            raise StoreError(f"store compaction failed: {type(exc).__name__}: {exc}") from exc
    return warnings
