"""Deleting one document from the store: its chunks from both indexes, its manifest record, the
upload copy it came from, and then its bytes from the store's files (:func:`~ingestion.stores.purge.purge`).

The store's side of ``DELETE /v1/documents/{id}`` and ``copilot documents delete``; both reach it
through :func:`copilot.deletion.delete_document`, which first forgets what the copilot kept of it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ingestion.errors import StoreError
from ingestion.stores.chunk_store import ChunkStore
from ingestion.stores.purge import PURGE_PENDING, purge
from ingestion.stores.space_reserve import disk_full
from ingestion.uploads import remove_upload_copy, upload_copy
from ingestion.write_batch import WriteBatch

log = logging.getLogger(__name__)


def delete_document(store: ChunkStore, doc_id: str, *, uploads_dir: Path | None = None) -> bool:
    """Delete a document from both indexes and the manifest, and its bytes from the store's files;
    False if it was not stored.

    A stored upload copy it came from (a file under ``uploads_dir``) holds its text and is
    removed; the file's other documents stay stored, detached from it. A file elsewhere is
    the operator's: left alone, its fingerprint dropped, so re-ingesting it re-adds the document.

    On a disk with less room than the space reserve, the reserve is released first; a deletion
    that still fails on a full disk is tried once more with the dense index re-opened. A purge
    that then finds no room leaves its pending mark (the deletion stands; the next purge, or
    ``copilot documents compact``, removes the bytes).

    Raises:
        StoreError: a store write failed (the document may still be stored: retry).
    """
    if store.reserve.low():  # make room first: a library that failed a write may not recover
        store.reserve.release()
    try:
        return _delete(store, doc_id, uploads_dir)
    except Exception as exc:
        if not ((disk_full(exc) or store.reserve.low()) and store.reserve.release()):
            raise
        store.reopen_dense()
        return _delete(store, doc_id, uploads_dir)


def _delete(store: ChunkStore, doc_id: str, uploads_dir: Path | None) -> bool:
    with store.write_lock:
        rec = store.manifest.get([doc_id]).get(doc_id)
        if rec is None:
            return False
        copy = upload_copy(uploads_dir, rec.source_abs) if uploads_dir and rec.source_abs else None
        with store.db.transaction():
            store.manifest.meta.set(PURGE_PENDING, "1")
            if copy is not None:
                detached = store.manifest.detach_file(str(copy))
                log.info("deleting %s: removing its upload copy %s (%d other document(s) stay, detached)",
                         doc_id, copy.name, detached - 1)
        if copy is not None:
            try:
                remove_upload_copy(copy)
            except OSError as exc:
                raise StoreError(f"cannot remove the stored upload {copy.name!r} of {doc_id!r}: "
                                 f"{exc.strerror or exc}; the document is still stored") from exc
        store.apply(WriteBatch(deletes=[doc_id], forget_files=[rec.source_abs] if rec.source_abs else []))
        with store.transaction():
            store.manifest.files.forget(sources=[rec.source])
        try:
            purge(store)
        except StoreError as exc:
            if not disk_full(exc):
                raise
            log.warning("deleted %s; the disk is too full to purge its bytes from the store's files now "
                        "(retried on the next purge, or run `copilot documents compact`)", doc_id)
        return True
