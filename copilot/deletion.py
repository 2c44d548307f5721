"""Deleting a document: the one use case behind ``DELETE /v1/documents/{id}`` and
``copilot documents delete``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from copilot.access import FULL_ACCESS, Access
from copilot.alerts.table import AlertTable
from copilot.feedback.ratings import FeedbackTable
from decoding.drafters.ngram import AnswerHistory
from ingestion import deletion
from ingestion.stores.chunk_store import ChunkStore


def delete_document(store: ChunkStore, ratings: FeedbackTable, doc_id: str, access: Access = FULL_ACCESS, *,
                    uploads_dir: Path | None, history: AnswerHistory | None = None) -> dict[str, Any] | None:
    """Delete a document ``access`` may read, and what earlier answers kept of it.

    Earlier answers may quote it: the ratings and the alerts' past-incident answers that showed it
    go first (the store's purge then clears their bytes too), and the engine's answer ``history`` (None: no engine) is
    dropped. Then :func:`ingestion.deletion.delete_document` deletes it from the store, with the
    upload copy it came from (under ``uploads_dir``).

    Returns:
        The deleted document's record as it was stored (``doc_id``, ``n_chunks``, ...), or
        ``None`` when no such document is stored or ``access`` may not read it (the caller
        cannot tell which); nothing is changed then.
    Raises:
        StoreError: a store write failed (the document may still be stored: retry).
    """
    info = store.manifest.info(doc_id)
    if info is None or not access.allows(info):
        return None
    ratings.forget_document(doc_id)
    AlertTable(store.db).forget_document(doc_id)
    if history is not None:
        history.clear()
    return info if deletion.delete_document(store, doc_id, uploads_dir=uploads_dir) else None
