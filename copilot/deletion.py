"""Deleting a document: the one use case behind ``DELETE /v1/documents/{id}`` and
``copilot documents delete``."""

from __future__ import annotations

from pathlib import Path

from copilot.feedback.ratings import FeedbackTable
from decoding.drafters.ngram import AnswerHistory
from ingestion import deletion
from ingestion.stores.chunk_store import ChunkStore


def delete_document(store: ChunkStore, ratings: FeedbackTable, doc_id: str, *, uploads_dir: Path | None,
                    history: AnswerHistory | None = None) -> bool:
    """Delete a document and what earlier answers kept of it; False if it was not stored.

    Earlier answers may quote it: the ratings of answers that showed it go first (the store's
    purge then clears their bytes too), and the engine's answer ``history`` (None: no engine) is
    dropped. Then :func:`ingestion.deletion.delete_document` deletes it from the store, with the
    upload copy it came from (under ``uploads_dir``).

    Raises:
        StoreError: a store write failed (the document may still be stored: retry).
    """
    ratings.forget_document(doc_id)
    if history is not None:
        history.clear()
    return deletion.delete_document(store, doc_id, uploads_dir=uploads_dir)
