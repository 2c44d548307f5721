"""Ingest jobs kept in the store's database, so they outlive a restart and every replica sees them.

Table ``ingest_jobs``: one row per job with the columns the job queue works on (status, the
replica that owns it, its heartbeat) and two JSON documents: ``request`` (what to ingest,
enough to run the job again) and ``state`` (progress, report, error, warnings, timestamps —
what ``GET /v1/ingest/{id}`` shows).

Ownership is a lease: the replica running or queueing a job renews ``heartbeat`` (epoch
seconds) every few seconds; a queued or running job whose lease expired — its replica was
killed — is marked ``interrupted`` by whichever replica looks next. Nothing else interrupts a
job: a replica that starts (even under the name of one that died) never touches a job whose
owner still renews its lease. Any replica may take a queued job to run it (:meth:`JobTable.take`),
and an interrupted, failed or partial job can be claimed for a resume by one replica
(:meth:`JobTable.claim`); both are one atomic ``UPDATE ... RETURNING``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ingestion.stores.database import Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS ingest_jobs (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    owner TEXT NOT NULL,
    heartbeat DOUBLE PRECISION NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    request TEXT NOT NULL,
    state TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ingest_jobs_status ON ingest_jobs(status, heartbeat);
CREATE INDEX IF NOT EXISTS ingest_jobs_created ON ingest_jobs(created);
"""

ACTIVE = ("queued", "running")
RESUMABLE = ("interrupted", "failed", "partial")


@dataclass(frozen=True)
class JobRow:
    """One stored job: ``request`` and ``state`` are the decoded JSON documents."""

    id: str
    status: str
    owner: str
    heartbeat: float
    created: float
    request: dict[str, Any]
    state: dict[str, Any]


def _row(r: tuple[Any, ...]) -> JobRow:  # a database row: the driver types none of its values
    return JobRow(r[0], r[1], r[2], float(r[3]), float(r[4]), json.loads(r[5]), json.loads(r[6]))


_COLS = "id, status, owner, heartbeat, created, request, state"


class JobTable:
    """The ``ingest_jobs`` table (created when missing).

    Args:
        db: the store's database.
        lease_s: seconds without a heartbeat after which an active job counts as interrupted.
    """

    def __init__(self, db: Database, lease_s: float = 30.0) -> None:
        self.db = db
        self.lease_s = lease_s
        db.executescript(SCHEMA)

    def save(self, job_id: str, status: str, owner: str, created: float, request: dict[str, Any],
             state: dict[str, Any]) -> None:
        """Insert or replace a job (its heartbeat is now)."""
        self.db.execute(
            f"INSERT INTO ingest_jobs({_COLS}) VALUES (?,?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET "
            "status = excluded.status, owner = excluded.owner, heartbeat = excluded.heartbeat, "
            "request = excluded.request, state = excluded.state",
            (job_id, status, owner, time.time(), created, json.dumps(request), json.dumps(state, default=str)))

    def get(self, job_id: str) -> JobRow | None:
        """The job, or None."""
        self.expire()
        row = self.db.query_one(f"SELECT {_COLS} FROM ingest_jobs WHERE id = ?", (job_id,))
        return None if row is None else _row(row)

    def page(self, offset: int, limit: int) -> tuple[list[JobRow], int]:
        """Jobs newest first, and how many there are."""
        self.expire()
        total = int(self.db.query("SELECT COUNT(*) FROM ingest_jobs")[0][0])
        rows = self.db.query(f"SELECT {_COLS} FROM ingest_jobs ORDER BY created DESC, id LIMIT ? OFFSET ?",
                             (int(limit), int(offset)))
        return [_row(r) for r in rows], total

    def heartbeat(self, owner: str, job_ids: Iterable[str]) -> None:
        """Renew the lease of these active jobs of ``owner``."""
        now = time.time()
        self.db.executemany("UPDATE ingest_jobs SET heartbeat = ? WHERE id = ? AND owner = ?",
                            [(now, job_id, owner) for job_id in job_ids])

    def expire(self) -> list[str]:
        """Mark active jobs whose lease expired as interrupted; their ids."""
        rows = self.db.query(f"UPDATE ingest_jobs SET status = 'interrupted' WHERE status IN {ACTIVE!r} "
                             "AND heartbeat < ? RETURNING id", (time.time() - self.lease_s,))
        return [r[0] for r in rows]

    def queued(self) -> list[JobRow]:
        """Queued jobs, oldest first (lease-expired ones are interrupted first)."""
        self.expire()
        rows = self.db.query(f"SELECT {_COLS} FROM ingest_jobs WHERE status = 'queued' ORDER BY created, id")
        return [_row(r) for r in rows]

    def owned_queued(self, owner: str) -> set[str]:
        """Ids of the queued jobs ``owner`` still owns (not taken by another replica)."""
        return {r[0] for r in self.db.query("SELECT id FROM ingest_jobs WHERE status = 'queued' AND owner = ?",
                                            (owner,))}

    def take(self, job_id: str, owner: str) -> JobRow | None:
        """Take a queued job to run it now (``running``, owned by ``owner``); None when it is no
        longer queued (another replica took it first)."""
        rows = self.db.query(f"UPDATE ingest_jobs SET status = 'running', owner = ?, heartbeat = ? "
                             f"WHERE id = ? AND status = 'queued' RETURNING {_COLS}", (owner, time.time(), job_id))
        return _row(rows[0]) if rows else None

    def claim(self, job_id: str, owner: str) -> JobRow | None:
        """Take an interrupted, failed or partial job for a resume (queued, owned by ``owner``);
        None when it is not resumable (or another replica claimed it first)."""
        self.expire()
        rows = self.db.query(f"UPDATE ingest_jobs SET status = 'queued', owner = ?, heartbeat = ? "
                             f"WHERE id = ? AND status IN {RESUMABLE!r} RETURNING {_COLS}",
                             (owner, time.time(), job_id))
        return _row(rows[0]) if rows else None

    def forget_finished(self, keep: int) -> None:
        """Delete finished jobs beyond the newest ``keep``."""
        self.db.execute(
            f"DELETE FROM ingest_jobs WHERE status NOT IN {ACTIVE!r} AND id NOT IN "
            f"(SELECT id FROM ingest_jobs WHERE status NOT IN {ACTIVE!r} ORDER BY created DESC LIMIT ?)", (int(keep),))
