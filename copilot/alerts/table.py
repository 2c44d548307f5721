"""Past-incident answers to alerts, kept in the store's database so every replica sees them.

Table ``alert_answers``: one row per alert and read scope, keyed by the scope of the key that sent
it (:attr:`copilot.access.Access.partition`: keys that may read the same documents share their
alerts, and no alert answered for one scope is seen, replaced or resolved from another) and
Alertmanager's fingerprint, with the columns it is looked up and listed by (when it started, its
state, when the notification arrived, the key that sent it, the claim of the answer under way) and
one JSON document, ``record``: the alert's labels and annotations, the question asked, and the
answer or the error. The table is bounded: past ``keep`` rows the oldest
are deleted. It lives beside the feedback ratings (``DATA_DIR/index.sqlite3``, or the shared
store's PostgreSQL schema).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from ingestion.stores.database import Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS alert_answers (
    scope TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    starts_at TEXT NOT NULL,
    state TEXT NOT NULL,
    received DOUBLE PRECISION NOT NULL,
    submitted_by TEXT,
    claim TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (scope, fingerprint)
);
CREATE INDEX IF NOT EXISTS alert_answers_received ON alert_answers(scope, received);
"""

State = Literal["answering", "answered", "failed"]
_COLS = "scope, fingerprint, starts_at, state, received, submitted_by, claim, record"


@dataclass(frozen=True)
class AlertRow:
    """One kept alert.

    Attributes:
        scope: the read scope of the key that sent it (``""``: everything).
        fingerprint: Alertmanager's id of the alert.
        starts_at: when it started firing (ISO 8601, as Alertmanager sent it): a new value is a
            new occurrence of the alert.
        state: ``answering``, ``answered`` or ``failed``.
        received: when the notification that started the answer arrived (epoch seconds, UTC).
        submitted_by: the name of the key that sent it (None without keys).
        claim: the id of the answer that may finish it (a later claim voids an earlier one's).
        record: labels, annotations, status, question, answer or error (decoded JSON).
    """

    scope: str
    fingerprint: str
    starts_at: str
    state: str
    received: float
    submitted_by: str | None
    claim: str
    record: dict[str, Any]


def _row(r: tuple[Any, ...]) -> AlertRow:  # a database row: the driver types none of its values
    return AlertRow(str(r[0]), str(r[1]), str(r[2]), str(r[3]), float(r[4]), None if r[5] is None else str(r[5]),
                    str(r[6]), json.loads(r[7]))


class AlertTable:
    """The ``alert_answers`` table (created when missing).

    Args:
        db: the store's database (SQLite or PostgreSQL).
        keep: the most alerts kept per scope (the oldest received are deleted past it).
        stale_s: an answer still ``answering`` after this many seconds was lost (its replica
            stopped): the next notification of the alert answers it again.
    """

    def __init__(self, db: Database, keep: int = 1000, stale_s: float = 900.0) -> None:
        self.db = db
        self.keep = keep
        self.stale_s = stale_s
        db.executescript(SCHEMA)

    def get(self, scope: str, fingerprint: str) -> AlertRow | None:
        """The kept alert of ``scope`` with this fingerprint, if any."""
        row = self.db.query_one(f"SELECT {_COLS} FROM alert_answers WHERE scope = ? AND fingerprint = ?",
                                (scope, fingerprint))
        return None if row is None else _row(row)

    def find(self, fingerprint: str, scope: str | None = None) -> AlertRow | None:
        """The kept alert with this fingerprint in ``scope``, or in any scope (None; its own,
        ``""``, first, then the newest)."""
        if scope is not None:
            return self.get(scope, fingerprint)
        rows = self.db.query(f"SELECT {_COLS} FROM alert_answers WHERE fingerprint = ? ORDER BY scope <> '', "
                             "received DESC LIMIT 1", (fingerprint,))
        return _row(rows[0]) if rows else None

    def claim(self, scope: str, fingerprint: str, starts_at: str, submitted_by: str | None,
              record: dict[str, Any]) -> str | None:
        """Start answering an occurrence of an alert, unless it is answered or being answered already.

        A row of the same scope, fingerprint and ``starts_at`` that is answered, or being answered
        for less than :attr:`stale_s`, is kept (a repeat notification); a failed or lost one, or an
        earlier occurrence, is replaced, and the answer that was under way for it can no longer
        finish it. Atomic across replicas (one transaction).

        Returns:
            The claim id the answer finishes the row with, or None when the caller is not to answer it.
        """
        with self.db.transaction():
            old = self.get(scope, fingerprint)
            lost = old is not None and old.state == "answering" and time.time() - old.received > self.stale_s
            if old is not None and old.starts_at == starts_at and old.state != "failed" and not lost:
                return None
            claim = uuid.uuid4().hex
            self.db.execute("DELETE FROM alert_answers WHERE scope = ? AND fingerprint = ?", (scope, fingerprint))
            self.db.execute(f"INSERT INTO alert_answers({_COLS}) VALUES (?,?,?,?,?,?,?,?)",
                            (scope, fingerprint, starts_at, "answering", time.time(), submitted_by, claim,
                             json.dumps(record, ensure_ascii=False)))
            self._trim(scope)
        return claim

    def finish(self, scope: str, fingerprint: str, claim: str, state: State, **fields: Any) -> bool:
        """Set a kept alert's state and add ``fields`` to its record (``answer``, ``error``, ...),
        if ``claim`` still holds it; False when the row is gone or claimed again since."""
        with self.db.transaction():
            old = self.get(scope, fingerprint)
            if old is None or old.claim != claim:  # trimmed, or a later notification claimed it
                return False
            record = {**old.record, **fields}
            self.db.execute("UPDATE alert_answers SET state = ?, record = ? WHERE scope = ? AND fingerprint = ?",
                            (state, json.dumps(record, ensure_ascii=False), scope, fingerprint))
        return True

    def resolve(self, scope: str, fingerprint: str, ends_at: str | None) -> bool:
        """Mark a kept alert of ``scope`` resolved (its answer stays); False when none is kept."""
        with self.db.transaction():
            old = self.get(scope, fingerprint)
            if old is None:
                return False
            record = {**old.record, "status": "resolved", "ends_at": ends_at}
            self.db.execute("UPDATE alert_answers SET record = ? WHERE scope = ? AND fingerprint = ?",
                            (json.dumps(record, ensure_ascii=False), scope, fingerprint))
        return True

    def page(self, offset: int, limit: int, scope: str | None = None) -> tuple[list[AlertRow], int]:
        """Kept alerts newest first, and how many there are: those of ``scope``, or all (None)."""
        where, params = ("", ()) if scope is None else ("WHERE scope = ?", (scope,))
        total = int(self.db.query(f"SELECT COUNT(*) FROM alert_answers {where}", params)[0][0])
        rows = self.db.query(f"SELECT {_COLS} FROM alert_answers {where} ORDER BY received DESC, fingerprint "
                             "LIMIT ? OFFSET ?", (*params, int(limit), int(offset)))
        return [_row(r) for r in rows], total

    def forget_document(self, doc_id: str) -> int:
        """Delete the kept answers that showed ``doc_id`` as a source (a deleted document's text
        must not stay in them); how many were deleted."""
        rows = self.db.query(f"SELECT {_COLS} FROM alert_answers")
        gone = [(r.scope, r.fingerprint) for r in map(_row, rows)
                if any(s.get("doc_id") == doc_id for s in (r.record.get("answer") or {}).get("sources", []))]
        self.db.executemany("DELETE FROM alert_answers WHERE scope = ? AND fingerprint = ?", gone)
        return len(gone)

    def _trim(self, scope: str) -> None:
        """Delete ``scope``'s oldest rows past :attr:`keep` (each scope keeps its own)."""
        self.db.execute("DELETE FROM alert_answers WHERE scope = ? AND received <= (SELECT received FROM "
                        "alert_answers WHERE scope = ? ORDER BY received DESC LIMIT 1 OFFSET ?)",
                        (scope, scope, self.keep))
