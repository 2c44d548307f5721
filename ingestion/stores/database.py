"""The relational side of the store — SQLite (embedded, one machine) or PostgreSQL (shared).

The lexical index, the manifest and the ingest jobs are plain SQL tables. They reach the
database only through :class:`Database`, which has two implementations:

- :class:`SqliteDatabase`: ``DATA_DIR/index.sqlite3`` in WAL mode (one connection per
  process, serialised by a lock); the ingest lock is a ``flock`` on ``DATA_DIR/ingest.lock``
  (exclusive, or shared by parallel runs: :mod:`ingestion.stores.ingest_lock`).
- :class:`PostgresDatabase`: a ``psycopg`` connection pool on ``COPILOT_DATABASE_URL``; every
  table lives in a schema named after the collection, so several stores can share one
  server; the ingest lock is a session-level advisory lock (``pg_try_advisory_lock``, or
  ``pg_try_advisory_lock_shared`` for parallel runs), released by the server when the holder's
  connection dies.

SQL is written once, in the qmark style (``?``) and in the subset both dialects share
(``INSERT ... ON CONFLICT ... DO UPDATE``, ``CASE``); :class:`PostgresDatabase` rewrites
``?`` to psycopg's ``%s``. Only the full-text index differs (see
:mod:`ingestion.stores.lexical_index`), chosen by :attr:`Database.dialect`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import re
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from ingestion.errors import StoreError
from ingestion.stores.ingest_lock import (
    SHARE_WAIT_S,
    AdvisoryIngestLock,
    FlockIngestLock,
    IngestLock,
    locked_error,
    take_flock,
    write_holder,
)

log = logging.getLogger(__name__)

Row = tuple[Any, ...]


def lock_holder() -> dict[str, Any]:
    """What an ingest-lock holder records about itself: pid, host name, start time (ISO 8601, UTC)."""
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def describe_holder(holder: dict[str, Any]) -> str:
    """``pid 4242 on host ops-01 since 2026-01-20T06:04:00+00:00`` (what is known of it)."""
    parts = []
    if holder.get("pid"):
        parts.append(f"pid {holder['pid']}")
    if holder.get("host"):
        parts.append(f"on host {holder['host']}")
    if holder.get("started"):
        parts.append(f"since {holder['started']}")
    return " ".join(parts) if parts else "holder unknown"


class Database:
    """What the store's tables need of a database: queries, statements, transactions, a lock.

    Statements outside :meth:`transaction` commit at once. Implementations are safe to use
    from several threads.
    """

    dialect: Literal["sqlite", "postgresql"]
    #: where the data lives, for messages (a path, or the URL without its password)
    location: str

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Every row ``sql`` returns."""
        raise NotImplementedError

    def query_one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        """The first row ``sql`` returns, or None."""
        rows = self.query(sql, params)
        return rows[0] if rows else None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one statement."""
        raise NotImplementedError

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement per parameter row."""
        raise NotImplementedError

    def executescript(self, script: str) -> None:
        """Run several ``;``-separated statements without parameters (schema creation)."""
        raise NotImplementedError

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """A write transaction: committed on exit, rolled back on an exception; re-entrant."""
        raise NotImplementedError

    def ingest_lock(self, *, shared: bool = False) -> contextlib.AbstractContextManager[IngestLock]:
        """Hold the store's ingest run lock (:mod:`ingestion.stores.ingest_lock`), released by the OS or
        the server if the process dies.

        Args:
            shared: let other shared runs work at once (the lock is exclusive first when no run is
                live, so that :attr:`IngestLock.alone` may recover; call :meth:`IngestLock.share`).
        Raises:
            StoreLockedError: another run holds it exclusively (or, for an exclusive request, at all);
                its ``holder`` (pid, host, started) is named.
        """
        raise NotImplementedError

    def ping(self) -> None:
        """Raise if the database does not answer."""
        self.query("SELECT 1")

    def reclaim(self, tables: Sequence[str]) -> bool:
        """After deletions: get the deleted rows' bytes out of the database's files, cheaply.

        Args:
            tables: the tables rows were deleted from (PostgreSQL vacuums these).
        Returns:
            True when done; False when it could not finish now (e.g. a reader holds the SQLite
            write-ahead log), so a later call should run again.
        """
        return True

    def compact(self, tables: Sequence[str]) -> None:
        """Rewrite the database's files without free space (slow; blocks writers): SQLite
        ``VACUUM``, PostgreSQL ``VACUUM FULL`` of ``tables``."""

    def close(self) -> None:
        """Release connections (the database is unusable afterwards)."""


class SqliteDatabase(Database):
    """``data_dir/index.sqlite3`` (WAL), one connection shared by the process's threads.

    Args:
        data_dir: folder of the database file and the ``ingest.lock`` file (created).
    """

    dialect = "sqlite"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.location = str(self.data_dir)
        self._lock = threading.RLock()
        self._depth = 0
        self._conn = sqlite3.connect(self.data_dir / "index.sqlite3", isolation_level=None,
                                     check_same_thread=False, timeout=30.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        # freed cells and pages are overwritten with zeros: a deleted row's text leaves the file
        self._conn.execute("PRAGMA secure_delete=ON")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self._lock:
            return [tuple(r) for r in self._conn.execute(sql, tuple(params)).fetchall()]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self._lock:
            self._conn.execute(sql, tuple(params))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self._lock:
            self._conn.executemany(sql, [tuple(r) for r in rows])

    def executescript(self, script: str) -> None:
        with self._lock:
            self._conn.executescript(script)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            self._conn.execute("BEGIN IMMEDIATE")
            self._depth = 1
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                self._conn.execute("COMMIT")
            finally:
                self._depth = 0

    @contextlib.contextmanager
    def ingest_lock(self, *, shared: bool = False) -> Iterator[IngestLock]:
        """A ``flock`` on ``data_dir/ingest.lock``, which holds the latest holder's pid, host and start
        (JSON); source locks under ``data_dir/locks``."""
        with open(self.data_dir / "ingest.lock", "a+") as handle:
            got, exclusive = take_flock(handle, shared)
            if not got:
                raise locked_error(self.location, _read_json(handle), describe_holder)
            lock = FlockIngestLock(handle, exclusive, self.data_dir / "locks")
            try:
                write_holder(handle, lock_holder())
                yield lock
            finally:
                lock.close()
                with contextlib.suppress(OSError, BlockingIOError):  # the last run out clears the record
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    handle.seek(0)
                    handle.truncate()
                    handle.flush()
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def reclaim(self, tables: Sequence[str]) -> bool:
        """Checkpoint the write-ahead log and truncate it to zero bytes: it still holds the page
        images from before the deletion (``secure_delete`` has already zeroed the freed cells in
        the new ones). False when another connection's read kept the checkpoint from finishing
        (after the 30 s busy timeout)."""
        with self._lock:
            busy, _, _ = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            log.warning("%s: the write-ahead log is in use by another reader; deleted pages stay in "
                        "index.sqlite3-wal until the next delete or `copilot store compact`", self.location)
        return not busy

    def compact(self, tables: Sequence[str]) -> None:
        """``VACUUM`` (the file shrinks to its live pages), then truncate the write-ahead log."""
        with self._lock:
            self._conn.execute("VACUUM")
        self.reclaim(tables)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _read_json(handle: Any) -> dict[str, Any]:
    """The JSON object in an open lock file (``{}`` when unreadable or empty)."""
    try:
        handle.seek(0)
        data = json.loads(handle.read() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


_SCHEMA_NAME_RE = re.compile(r"[^a-z0-9_]")


def schema_name(collection: str) -> str:
    """The PostgreSQL schema for a collection name: lower case, ``[a-z0-9_]`` (``ops-site.2`` → ``ops_site_2``)."""
    name = _SCHEMA_NAME_RE.sub("_", collection.lower())
    return name if name and not name[0].isdigit() else f"c_{name}"


def mask_url(url: str) -> str:
    """A database URL without its password (``postgresql://ops:***@db/ops``)."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", url)


_DDL_LOCK = "SELECT pg_advisory_xact_lock(hashtext('opscopilot-ddl'))"


class PostgresDatabase(Database):
    """A PostgreSQL schema reached through a ``psycopg_pool.ConnectionPool``.

    Args:
        url: a libpq connection string or URL (``postgresql://user:pw@host:5432/db``).
        schema: the schema every table lives in (created; see :func:`schema_name`).
        pool_size: most connections this process opens (readers run in parallel; a
            transaction holds one connection until it ends).
    Raises:
        StoreError: the server is unreachable or refuses the login.
    """

    dialect = "postgresql"

    def __init__(self, url: str, schema: str, *, pool_size: int = 4) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        self.url = url
        self.schema = schema
        self.location = f"{mask_url(url)} (schema {schema})"
        self._local = threading.local()

        def configure(conn: Any) -> None:
            conn.execute(f'SET search_path TO "{schema}", public')

        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn, conn.transaction():
                conn.execute(_DDL_LOCK)
                conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            self.pool = ConnectionPool(url, min_size=1, max_size=pool_size, open=True, configure=configure,
                                       kwargs={"autocommit": True, "connect_timeout": 10},
                                       check=ConnectionPool.check_connection, name=f"opscopilot-{schema}")
            self.pool.wait(timeout=30)
        except Exception as exc:  # psycopg.OperationalError, pool.PoolTimeout
            raise StoreError(f"cannot open PostgreSQL at {mask_url(url)}: {exc}") from exc

    @staticmethod
    def _sql(sql: str) -> str:
        """qmark → psycopg's format style: a literal ``%`` is doubled, each ``?`` becomes ``%s``
        (our SQL has no ``?`` but placeholders; values always travel as parameters)."""
        return sql.replace("%", "%%").replace("?", "%s")

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        conn = getattr(self._local, "conn", None)
        if conn is not None:  # inside this thread's transaction
            yield conn
            return
        with self.pool.connection() as conn:
            yield conn

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self._connection() as conn:
            return [tuple(r) for r in conn.execute(self._sql(sql), tuple(params)).fetchall()]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self._connection() as conn:
            conn.execute(self._sql(sql), tuple(params))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = [tuple(r) for r in rows]
        if not rows:
            return
        with self._connection() as conn, conn.cursor() as cur:
            cur.executemany(self._sql(sql), rows)

    def executescript(self, script: str) -> None:
        """Run DDL under a transaction-scoped advisory lock: ``CREATE ... IF NOT EXISTS`` is not safe
        against another replica creating the same object at the same moment."""
        with self.transaction(), self._connection() as conn:
            conn.execute(_DDL_LOCK)
            conn.execute(script)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        if getattr(self._local, "conn", None) is not None:
            yield
            return
        with self.pool.connection() as conn, conn.transaction():
            self._local.conn = conn
            try:
                yield
            finally:
                self._local.conn = None

    @contextlib.contextmanager
    def ingest_lock(self, *, shared: bool = False) -> Iterator[IngestLock]:
        """Session advisory locks on a connection of their own; the latest holder is recorded in ``ingest_lock``."""
        import psycopg

        key = f"opscopilot-ingest:{self.schema}"
        self.executescript("CREATE TABLE IF NOT EXISTS ingest_lock (id INTEGER PRIMARY KEY, holder TEXT NOT NULL)")
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        try:
            exclusive = bool((conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone() or [0])[0])
            if not exclusive and not (shared and self._wait_shared(conn, key)):
                row = self.query_one("SELECT holder FROM ingest_lock WHERE id = 1")
                raise locked_error(self.location, _parse_json(row[0]) if row else {}, describe_holder)
            self.execute("INSERT INTO ingest_lock(id, holder) VALUES (1, ?) "
                         "ON CONFLICT (id) DO UPDATE SET holder = excluded.holder", (json.dumps(lock_holder()),))
            try:
                yield AdvisoryIngestLock(conn, key, exclusive)
            finally:
                with contextlib.suppress(Exception):
                    conn.execute("SELECT pg_advisory_unlock_all()")
                    if (conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone() or [0])[0]:
                        self.execute("DELETE FROM ingest_lock WHERE id = 1")  # the last run out clears it
                    conn.execute("SELECT pg_advisory_unlock_all()")
        finally:
            conn.close()

    @staticmethod
    def _wait_shared(conn: Any, key: str) -> bool:
        """Take the shared run lock, retried for up to ``SHARE_WAIT_S`` while it is held exclusively."""
        deadline = time.monotonic() + SHARE_WAIT_S
        while not conn.execute("SELECT pg_try_advisory_lock_shared(hashtext(%s))", (key,)).fetchone()[0]:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _vacuum(self, tables: Sequence[str], full: bool) -> None:
        """``VACUUM [FULL]`` of those of ``tables`` that exist (outside any transaction)."""
        existing = [t for t in tables if self.query("SELECT to_regclass(?)", (t,))[0][0] is not None]
        if not existing:
            return
        with self.pool.connection() as conn:
            conn.execute(f"VACUUM {'FULL ' if full else ''}{', '.join(existing)}")

    def reclaim(self, tables: Sequence[str]) -> bool:
        """Plain ``VACUUM`` of ``tables``: dead rows and their index entries are removed and their
        space marked free (PostgreSQL does not zero it; ``compact`` rewrites the files)."""
        self._vacuum(tables, full=False)
        return True

    def compact(self, tables: Sequence[str]) -> None:
        """``VACUUM FULL`` of ``tables``: each is rewritten into new files and the old ones removed
        (takes an exclusive lock on each table while it runs)."""
        self._vacuum(tables, full=True)

    def close(self) -> None:
        self.pool.close()


def _parse_json(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def open_database(data_dir: Path, url: str | None, collection: str) -> Database:
    """The store's database: PostgreSQL at ``url`` (schema from ``collection``), else SQLite in ``data_dir``.

    Raises:
        StoreError: the PostgreSQL server is unreachable, or ``url`` is not a PostgreSQL URL.
    """
    if not url:
        return SqliteDatabase(data_dir)
    if not re.match(r"^postgres(ql)?://", url):
        raise StoreError(f"unsupported database URL {mask_url(url)!r}: expected postgresql://user:password@host:port/db")
    return PostgresDatabase(url, schema_name(collection))
