"""The ingest run lock and the per-source locks of parallel ingest runs.

A run holds the store's *run lock* for its whole length:

- **exclusive** for a run that must be alone: a ``--prune`` run (store-wide deletions), and
  every run on a store whose dense index is embedded Chroma (each process keeps its own
  in-memory HNSW index and persists it over the other's, so two writers lose vectors);
- **shared** otherwise (PostgreSQL + pgvector, or a Chroma server): several runs, from any
  replica, work at once. A shared run first tries the lock exclusively without waiting: when
  it gets it no other run is live, so intent rows left in the store belong to a crashed run
  and it may recover them (:attr:`IngestLock.alone`) before :meth:`IngestLock.share`.

While a shared run settles and writes one source file it holds that file's *source locks*
(one on its source name, whose documents' ids derive from it, and one on its absolute path),
so two runs given the same file take turns instead of racing on its documents.

Backends: ``flock`` on ``data_dir/ingest.lock`` and ``data_dir/locks/<sha1>.lock`` (SQLite);
session advisory locks on one connection of the run's own (PostgreSQL). The OS or the server
releases them all when the holding process dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ingestion.errors import StoreLockedError

#: How long a shared run waits for the shared lock while another run holds it exclusively (a
#: starting run recovering, or converting its lock); after that the holder is named and it gives up.
SHARE_WAIT_S = 3.0


def locked_error(location: str, holder: dict[str, Any], describe: Callable[[dict[str, Any]], str]) -> StoreLockedError:
    """The error a run that cannot have the lock raises, naming the holder."""
    return StoreLockedError(f"another ingest is running on {location} ({describe(holder)}); "
                            "retry when it has finished", holder)


class IngestLock:
    """A held run lock (see the module docstring); made by :meth:`Database.ingest_lock`.

    Attributes:
        exclusive: the run lock is held exclusively now.
        alone: no other run was live when this one started (its intent rows may be recovered).
    """

    def __init__(self, exclusive: bool) -> None:
        self.exclusive = exclusive
        self.alone = exclusive
        self._sources: list[str] = []

    def share(self) -> None:
        """Turn an exclusive hold into a shared one, so other shared runs may start (no-op when shared
        already, and for a run that asked for exclusivity: :meth:`Database.ingest_lock`'s ``shared``)."""

    def hold_sources(self, keys: Iterable[str], before_wait: Callable[[], None]) -> None:
        """Hold the source locks of ``keys`` (taken in sorted order). When one is busy,
        ``before_wait`` is called first (it must release every source lock this run holds, so two
        runs never wait on each other) and then the run waits for them. No-op while exclusive."""
        if self.exclusive:
            return
        wanted = sorted(set(keys) - set(self._sources))
        if all(self._try_source(k) for k in wanted):
            self._sources.extend(wanted)
            return
        for key in wanted:
            self._release_source(key)  # the ones the attempt above got
        before_wait()
        for key in sorted(set(keys) - set(self._sources)):
            self._wait_source(key)
            self._sources.append(key)

    def release_sources(self, keep: Iterable[str] = ()) -> None:
        """Release the source locks held, but those of ``keep``."""
        kept = set(keep)
        for key in [k for k in self._sources if k not in kept]:
            self._release_source(key)
            self._sources.remove(key)

    def _try_source(self, key: str) -> bool:
        raise NotImplementedError

    def _wait_source(self, key: str) -> None:
        raise NotImplementedError

    def _release_source(self, key: str) -> None:
        raise NotImplementedError


def source_digest(key: str) -> str:
    """A fixed-length file-name-safe name for a source lock key."""
    return hashlib.sha1(key.encode("utf-8", "surrogateescape")).hexdigest()


class FlockIngestLock(IngestLock):
    """The run lock as a ``flock`` on an open ``ingest.lock`` (which records a holder as JSON);
    source locks as ``flock`` on files under ``locks_dir``."""

    def __init__(self, handle: Any, exclusive: bool, locks_dir: Path) -> None:
        super().__init__(exclusive)
        self.handle = handle
        self.locks_dir = locks_dir
        self._files: dict[str, Any] = {}

    def share(self) -> None:
        if not self.exclusive:
            return
        # flock converts EX -> SH by unlocking first: a prune run may slip in and then be waited for
        fcntl.flock(self.handle.fileno(), fcntl.LOCK_SH)
        self.exclusive = False

    def _open(self, key: str) -> Any:
        self.locks_dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.locks_dir / f"{source_digest(key)}.lock", "a+")
        self._files[key] = handle
        return handle

    def _try_source(self, key: str) -> bool:
        handle = self._open(key)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _wait_source(self, key: str) -> None:
        fcntl.flock(self._open(key).fileno(), fcntl.LOCK_EX)

    def _release_source(self, key: str) -> None:
        handle = self._files.pop(key, None)
        if handle is not None:
            handle.close()  # closing the last descriptor releases the flock

    def close(self) -> None:
        """Release every source lock (the run lock is the caller's)."""
        self.release_sources()


def take_flock(handle: Any, shared: bool) -> tuple[bool, bool]:
    """Take a ``flock`` on ``handle`` without waiting long: ``(got it, exclusively)``.

    Exclusive first; with ``shared``, when that is busy, the shared lock, retried for up to
    :data:`SHARE_WAIT_S` while an exclusive holder has it.
    """
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True, True
    except BlockingIOError:
        if not shared:
            return False, False
    deadline = time.monotonic() + SHARE_WAIT_S
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            return True, False
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False, False
            time.sleep(0.05)


def write_holder(handle: Any, holder: dict[str, Any]) -> None:
    """Record ``holder`` (pid, host, started) in the lock file, replacing what it held."""
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(holder))
    handle.flush()


class AdvisoryIngestLock(IngestLock):
    """The run lock and source locks as PostgreSQL session advisory locks on ``conn`` (autocommit).

    Args:
        conn: the run's own connection (the locks die with it).
        run_key: the run lock's key text (hashed with ``hashtext``).
    """

    def __init__(self, conn: Any, run_key: str, exclusive: bool) -> None:
        super().__init__(exclusive)
        self.conn = conn
        self.run_key = run_key

    def share(self) -> None:
        if not self.exclusive:
            return
        # atomic: the session takes the shared lock beside its exclusive one, then drops the exclusive
        self.conn.execute("SELECT pg_advisory_lock_shared(hashtext(%s))", (self.run_key,))
        self.conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (self.run_key,))
        self.exclusive = False

    def _source_key(self, key: str) -> str:
        return f"{self.run_key}:source:{source_digest(key)}"

    def _try_source(self, key: str) -> bool:
        row = self.conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (self._source_key(key),)).fetchone()
        return bool(row[0])

    def _wait_source(self, key: str) -> None:
        self.conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (self._source_key(key),))

    def _release_source(self, key: str) -> None:
        with contextlib.suppress(Exception):
            self.conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (self._source_key(key),))
