"""Answer ratings (👍/👎 from the page) kept in the store's database, so every replica sees them.

Table ``answer_feedback``: one row per rating with the columns it is listed by (rating,
creation time) and one JSON document, ``record``: what was asked and answered (question,
earlier turns, answer, sources, quotes, settings, reason) as ``POST /v1/feedback`` took it.
The table lives beside the ingest jobs: in ``DATA_DIR/index.sqlite3`` on one machine, in the
collection's PostgreSQL schema when the store is shared (``database_url``).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from ingestion.stores.database import Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS answer_feedback (
    id TEXT PRIMARY KEY,
    created DOUBLE PRECISION NOT NULL,
    rating TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS answer_feedback_created ON answer_feedback(rating, created);
"""

Rating = Literal["up", "down"]
_COLS = "id, created, rating, record"


@dataclass(frozen=True)
class FeedbackRow:
    """One stored rating.

    Attributes:
        id: ``fb-`` and 16 hex digits.
        created: when it was stored (epoch seconds, UTC).
        rating: ``up`` (👍) or ``down`` (👎).
        record: the decoded JSON document (question, answer, sources, settings, ...).
    """

    id: str
    created: float
    rating: str
    record: dict[str, Any]


def _row(r: tuple[Any, ...]) -> FeedbackRow:  # a database row: the driver types none of its values
    return FeedbackRow(str(r[0]), float(r[1]), str(r[2]), json.loads(r[3]))


class FeedbackTable:
    """The ``answer_feedback`` table (created when missing).

    Args:
        db: the store's database (:class:`~ingestion.stores.database.Database`, SQLite or PostgreSQL).
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        db.executescript(SCHEMA)

    def add(self, rating: Rating, record: dict[str, Any]) -> FeedbackRow:
        """Store one rating; the stored row (with its new id and time)."""
        row = FeedbackRow(f"fb-{uuid.uuid4().hex[:16]}", time.time(), rating, record)
        self.db.execute(f"INSERT INTO answer_feedback({_COLS}) VALUES (?,?,?,?)",
                        (row.id, row.created, row.rating, json.dumps(record, ensure_ascii=False)))
        return row

    def page(self, rating: Rating | None, offset: int, limit: int) -> tuple[list[FeedbackRow], int]:
        """Ratings newest first (only ``rating`` ones unless None), and how many there are."""
        where, params = ("WHERE rating = ?", (rating,)) if rating else ("", ())
        total = int(self.db.query(f"SELECT COUNT(*) FROM answer_feedback {where}", params)[0][0])
        rows = self.db.query(f"SELECT {_COLS} FROM answer_feedback {where} ORDER BY created DESC, id "
                             "LIMIT ? OFFSET ?", (*params, int(limit), int(offset)))
        return [_row(r) for r in rows], total

    def all(self, rating: Rating) -> list[FeedbackRow]:
        """Every ``rating`` rating, oldest first."""
        rows = self.db.query(f"SELECT {_COLS} FROM answer_feedback WHERE rating = ? ORDER BY created, id", (rating,))
        return [_row(r) for r in rows]

    def forget_document(self, doc_id: str) -> int:
        """Delete every rating whose answer showed document ``doc_id`` as a source (its answer
        and quotes may hold the document's text): what deleting the document means. Returns
        how many were deleted."""
        rows = self.db.query(f"SELECT {_COLS} FROM answer_feedback")  # ratings are few: one scan
        gone = [r.id for r in map(_row, rows)
                if any(s.get("doc_id") == doc_id for s in r.record.get("sources") or ())]
        for row_id in gone:
            self.db.execute("DELETE FROM answer_feedback WHERE id = ?", (row_id,))
        return len(gone)

