"""Rebuilding the dense index from the chunk texts the store keeps (``copilot documents reindex``,
``POST /v1/index/reindex``).

SQLite (or PostgreSQL) holds every stored chunk with its text and metadata, so a dense index that
cannot be read (:attr:`~ingestion.stores.chunk_store.ChunkStore.dense_damage`) loses nothing that
cannot be recomputed: the rebuild empties the dense index (an embedded Chroma's folder is deleted,
damaged files and deleted records' bytes with it), embeds every chunk again and writes it.

Resumable and idempotent: the ``meta`` key :data:`~ingestion.stores.chunk_store.DENSE_REBUILD` says
how far a rebuild got (``resetting``, then ``filling``). A run killed while filling resumes with the
chunks the index does not hold yet; one killed while resetting (or that finds the index damaged
again) resets again. Deletions may run meanwhile; chunks the index holds but the store no longer
does are removed at the end, under the write lock, before the key is cleared, and a deletion's
pending purge then runs (its text may have been written to the new files before it was deleted).
Ingest waits (the run holds the ingest lock).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ingestion.stores.chunk_store import DENSE_REBUILD, ChunkStore
from ingestion.stores.purge import purge, purge_pending

log = logging.getLogger(__name__)

#: Chunks embedded and written per step (one progress report each).
REINDEX_BATCH = 256


@dataclass(frozen=True)
class ReindexReport:
    """What one rebuild did.

    Attributes:
        chunks: chunks the dense index holds at the end (= the store's chunk count).
        embedded: chunks embedded and written by this run.
        removed: chunks the index held but the store no longer does (deleted meanwhile).
        resumed: the run finished an interrupted rebuild instead of starting over.
        seconds: wall time.
    """

    chunks: int
    embedded: int
    removed: int
    resumed: bool
    seconds: float


def reindex(store: ChunkStore, *, batch_size: int = REINDEX_BATCH,
            on_progress: Callable[[int, int], None] | None = None) -> ReindexReport:
    """Rebuild ``store``'s dense index from its stored chunks (see the module docstring).

    Args:
        store: the open store.
        batch_size: chunks embedded and written per step.
        on_progress: called with ``(chunks done, chunks in all)`` after each step.
    Raises:
        StoreLockedError: an ingest run holds the store.
        StoreError: the dense index cannot be emptied or written (e.g. a full disk); run again.
    """
    started = time.perf_counter()
    with store.ingest_lock():
        held: set[str] = set()
        resumed = store.manifest.meta.get(DENSE_REBUILD) == "filling" and store.dense.damage() is None
        if resumed:
            try:
                held = set(store.dense.all_ids())
            except Exception as exc:  # noqa: BLE001 - the half-built index cannot be read: start over
                log.warning("the interrupted rebuild's index cannot be read (%s); starting over", exc)
                resumed = False
        if not resumed:
            _set_state(store, "resetting")
            store.reopen_dense(reset=True)
            _set_state(store, "filling")
        log.info("%s the dense index from the stored chunks", "resuming the rebuild of" if resumed else "rebuilding")
        todo = [cid for cid in store.lexical.chunk_ids() if cid not in held]
        total, done, embedded = len(held) + len(todo), len(held), 0
        for start in range(0, len(todo), batch_size):
            chunks = list(store.lexical.get_chunks(todo[start:start + batch_size]).values())  # deleted ones drop out
            if chunks:
                vectors = store.embedder.embed_array([c.text for c in chunks])
                store.reserve.require_room(chunks, int(vectors.shape[1]))
                with store.write_lock:
                    store.dense.upsert([c.chunk_id for c in chunks], vectors, [c.text for c in chunks],
                                       [c.metadata for c in chunks])
                embedded += len(chunks)
            done += min(batch_size, len(todo) - start)
            if on_progress is not None:
                on_progress(done, total)
        with store.write_lock:
            gone = sorted(set(store.dense.all_ids()) - set(store.lexical.chunk_ids()))
            if gone:
                store.dense.delete(gone)
            _set_state(store, "")
            if purge_pending(store):  # a document deleted meanwhile: its text may be in the new files
                purge(store)
            chunks_now = store.dense.count()
    report = ReindexReport(chunks=chunks_now, embedded=embedded, removed=len(gone), resumed=resumed,
                           seconds=time.perf_counter() - started)
    log.info("dense index rebuilt: %d chunks (%d embedded, %d removed) in %.1f s", report.chunks, report.embedded,
             report.removed, report.seconds)
    return report


def _set_state(store: ChunkStore, state: str) -> None:
    """Record the rebuild's stage (a new generation, so other processes re-read the index) and re-check
    the index (:attr:`ChunkStore.dense_damage` follows)."""
    with store.transaction():
        store.manifest.meta.set(DENSE_REBUILD, state)
    store.reopen_dense()
