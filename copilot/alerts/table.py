"""Past-incident answers to alerts, kept in the store's database so every replica sees them.

Table ``alert_answers``: one row per alert, keyed by Alertmanager's fingerprint, with the columns
it is looked up and listed by (when it started, its state, when the notification arrived, the
key that sent it) and one JSON document, ``record``: the alert's labels and annotations, the
question asked, and the answer or the error. The table is bounded: past ``keep`` rows the oldest
are deleted. It lives beside the feedback ratings (``DATA_DIR/index.sqlite3``, or the shared
store's PostgreSQL schema).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from ingestion.stores.database import Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS alert_answers (
    fingerprint TEXT PRIMARY KEY,
    starts_at TEXT NOT NULL,
    state TEXT NOT NULL,
    received DOUBLE PRECISION NOT NULL,
    submitted_by TEXT,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alert_answers_received ON alert_answers(received);
"""

State = Literal["answering", "answered", "failed"]
_COLS = "fingerprint, starts_at, state, received, submitted_by, record"


@dataclass(frozen=True)
class AlertRow:
    """One kept alert.

    Attributes:
        fingerprint: Alertmanager's id of the alert.
        starts_at: when it started firing (ISO 8601, as Alertmanager sent it): a new value is a
            new occurrence of the alert.
        state: ``answering``, ``answered`` or ``failed``.
        received: when the notification that started the answer arrived (epoch seconds, UTC).
        submitted_by: the name of the key that sent it (None without keys).
        record: labels, annotations, status, question, answer or error (decoded JSON).
    """

    fingerprint: str
    starts_at: str
    state: str
    received: float
    submitted_by: str | None
    record: dict[str, Any]


def _row(r: tuple[Any, ...]) -> AlertRow:  # a database row: the driver types none of its values
    return AlertRow(str(r[0]), str(r[1]), str(r[2]), float(r[3]), None if r[4] is None else str(r[4]),
                    json.loads(r[5]))


class AlertTable:
    """The ``alert_answers`` table (created when missing).

    Args:
        db: the store's database (SQLite or PostgreSQL).
        keep: the most alerts kept (the oldest received are deleted past it).
        stale_s: an answer still ``answering`` after this many seconds was lost (its replica
            stopped): the next notification of the alert answers it again.
    """

    def __init__(self, db: Database, keep: int = 1000, stale_s: float = 900.0) -> None:
        self.db = db
        self.keep = keep
        self.stale_s = stale_s
        db.executescript(SCHEMA)

    def get(self, fingerprint: str) -> AlertRow | None:
        """The kept alert with this fingerprint, if any."""
        row = self.db.query_one(f"SELECT {_COLS} FROM alert_answers WHERE fingerprint = ?", (fingerprint,))
        return None if row is None else _row(row)

    def claim(self, fingerprint: str, starts_at: str, submitted_by: str | None, record: dict[str, Any]) -> bool:
        """Start answering an occurrence of an alert, unless it is answered or being answered already.

        A row of the same fingerprint and ``starts_at`` that is answered, or being answered for
        less than :attr:`stale_s`, is kept (a repeat notification); a failed or lost one, or an
        earlier occurrence, is replaced. Atomic across replicas (one transaction).

        Returns:
            True when the caller is to answer it.
        """
        with self.db.transaction():
            old = self.get(fingerprint)
            lost = old is not None and old.state == "answering" and time.time() - old.received > self.stale_s
            if old is not None and old.starts_at == starts_at and old.state != "failed" and not lost:
                return False
            self.db.execute("DELETE FROM alert_answers WHERE fingerprint = ?", (fingerprint,))
            self.db.execute(f"INSERT INTO alert_answers({_COLS}) VALUES (?,?,?,?,?,?)",
                            (fingerprint, starts_at, "answering", time.time(), submitted_by,
                             json.dumps(record, ensure_ascii=False)))
            self._trim()
        return True

    def finish(self, fingerprint: str, state: State, **fields: Any) -> None:
        """Set a kept alert's state and add ``fields`` to its record (``answer``, ``error``, ...)."""
        with self.db.transaction():
            old = self.get(fingerprint)
            if old is None:  # trimmed or replaced meanwhile
                return
            record = {**old.record, **fields}
            self.db.execute("UPDATE alert_answers SET state = ?, record = ? WHERE fingerprint = ?",
                            (state, json.dumps(record, ensure_ascii=False), fingerprint))

    def resolve(self, fingerprint: str, ends_at: str | None) -> bool:
        """Mark a kept alert resolved (its answer stays); False when none is kept."""
        with self.db.transaction():
            old = self.get(fingerprint)
            if old is None:
                return False
            record = {**old.record, "status": "resolved", "ends_at": ends_at}
            self.db.execute("UPDATE alert_answers SET record = ? WHERE fingerprint = ?",
                            (json.dumps(record, ensure_ascii=False), fingerprint))
        return True

    def page(self, offset: int, limit: int, submitted_by: str | None = None,
             everyone: bool = True) -> tuple[list[AlertRow], int]:
        """Kept alerts newest first, and how many there are: all of them when ``everyone``, else
        only those ``submitted_by`` sent."""
        where, params = ("", ()) if everyone else ("WHERE submitted_by = ?", (submitted_by,))
        total = int(self.db.query(f"SELECT COUNT(*) FROM alert_answers {where}", params)[0][0])
        rows = self.db.query(f"SELECT {_COLS} FROM alert_answers {where} ORDER BY received DESC, fingerprint "
                             "LIMIT ? OFFSET ?", (*params, int(limit), int(offset)))
        return [_row(r) for r in rows], total

    def forget_document(self, doc_id: str) -> int:
        """Delete the kept answers that showed ``doc_id`` as a source (a deleted document's text
        must not stay in them); how many were deleted."""
        rows = self.db.query(f"SELECT {_COLS} FROM alert_answers")
        gone = [r.fingerprint for r in map(_row, rows)
                if any(s.get("doc_id") == doc_id for s in (r.record.get("answer") or {}).get("sources", []))]
        self.db.executemany("DELETE FROM alert_answers WHERE fingerprint = ?", [(f,) for f in gone])
        return len(gone)

    def _trim(self) -> None:
        """Delete the oldest rows past :attr:`keep`."""
        self.db.execute("DELETE FROM alert_answers WHERE received <= (SELECT received FROM alert_answers "
                        "ORDER BY received DESC LIMIT 1 OFFSET ?)", (self.keep,))
