"""The manifest: per-document content hashes, per-file fingerprints and the write-intent log.

Tables (same database as the lexical index, SQLite or PostgreSQL, so one transaction covers both):

- ``documents``: doc_id, source, source_abs (absolute path at ingest, for ``--prune``),
  doc_type, title, key, created_ts, content_hash, index_sig (model + chunking settings),
  n_chunks, chroma_extent (upper bound of chunk indices that may exist in Chroma).
- ``files``: source_abs -> sha256 of the bytes and settings signature of the last
  complete ingest of that file (lets an unchanged file be skipped without parsing).
- ``pending``: documents whose Chroma records are being changed. A row is committed
  before the Chroma write and removed in the transaction that records the result, so
  after a crash the affected documents are known (see ``ChunkStore.recover``).
- ``meta``: key/value settings (schema version, embedding model) and the store's generation
  (a new value, and the writing process, on every committed change; see
  :meth:`ingestion.stores.chunk_store.ChunkStore.refresh`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingestion.documents import SearchFilter
from ingestion.stores.database import Database
from ingestion.stores.lexical_index import filter_sql, folder_sql

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    source_abs TEXT,
    doc_type TEXT,
    title TEXT,
    key TEXT,
    created_ts BIGINT,
    content_hash TEXT NOT NULL,
    index_sig TEXT NOT NULL,
    n_chunks INTEGER NOT NULL,
    chroma_extent INTEGER NOT NULL,
    indexed_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS documents_source ON documents(source);
CREATE INDEX IF NOT EXISTS documents_source_abs ON documents(source_abs);
CREATE TABLE IF NOT EXISTS files (
    source_abs TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    settings_sig TEXT NOT NULL,
    n_documents INTEGER NOT NULL,
    n_chunks INTEGER NOT NULL,
    format TEXT
);
CREATE TABLE IF NOT EXISTS pending (
    doc_id TEXT PRIMARY KEY,
    op TEXT NOT NULL,
    extent INTEGER NOT NULL,
    source TEXT,
    source_abs TEXT
);
"""


@dataclass(frozen=True)
class DocumentRecord:
    """One ``documents`` row."""

    doc_id: str
    source: str
    source_abs: str | None
    doc_type: str | None
    title: str | None
    key: str | None
    created_ts: int | None
    content_hash: str
    index_sig: str
    n_chunks: int
    chroma_extent: int


@dataclass(frozen=True)
class FileRecord:
    """One ``files`` row: fingerprint of a completely ingested file."""

    source_abs: str
    source: str
    sha256: str
    settings_sig: str
    n_documents: int
    n_chunks: int
    format: str | None = None


_DOC_COLS = ("doc_id, source, source_abs, doc_type, title, key, created_ts, content_hash, index_sig, n_chunks, "
             "chroma_extent")
_DOC_UPDATE = ", ".join(f"{c} = excluded.{c}" for c in _DOC_COLS.split(", ")[1:])


class Manifest:
    """Accessors for the manifest tables (writes join the caller's transaction; no commits here).

    The ``documents`` table is read and written by its methods; the other tables by its attributes
    :attr:`meta` (:class:`MetaTable`), :attr:`files` (:class:`FileTable`) and :attr:`intents`
    (:class:`IntentLog`).
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        db.executescript(SCHEMA)
        self.meta = MetaTable(db)
        self.files = FileTable(db)
        self.intents = IntentLog(db)

    def get(self, doc_ids: Sequence[str]) -> dict[str, DocumentRecord]:
        """Records of these documents (missing ones absent)."""
        out: dict[str, DocumentRecord] = {}
        ids = list(doc_ids)
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            rows = self.db.query(
                f"SELECT {_DOC_COLS} FROM documents WHERE doc_id IN ({','.join('?' * len(part))})", part)
            out.update((r[0], DocumentRecord(*r)) for r in rows)
        return out

    def for_source(self, source: str, source_abs: str | None) -> list[DocumentRecord]:
        """Documents recorded for this relative source or this absolute path."""
        rows = self.db.query(
            f"SELECT {_DOC_COLS} FROM documents WHERE source = ? OR (source_abs IS NOT NULL AND source_abs = ?)",
            (source, source_abs))
        return [DocumentRecord(*r) for r in rows]

    def prunable(self, under: Path | None = None) -> list[str]:
        """Ids of documents whose source file (absolute path recorded at ingest) no longer exists.

        Args:
            under: only documents whose recorded file lies under this folder (None: all).
        """
        rows = [(r[0], r[1]) for r in self.db.query(
            "SELECT doc_id, source_abs FROM documents WHERE source_abs IS NOT NULL")]
        if under is not None:
            folder = Path(os.path.abspath(under))
            rows = [(doc_id, path) for doc_id, path in rows if Path(path).is_relative_to(folder)]
        return [doc_id for doc_id, path in rows if not os.path.exists(path)]

    def info(self, doc_id: str) -> dict[str, Any] | None:
        """The record of a document as a dict (doc_id, source, doc_type, title, key, created_ts,
        content_hash, n_chunks), or None if unknown."""
        rec = self.get([doc_id]).get(doc_id)
        if rec is None:
            return None
        return {"doc_id": rec.doc_id, "source": rec.source, "doc_type": rec.doc_type, "title": rec.title,
                "key": rec.key, "created_ts": rec.created_ts, "content_hash": rec.content_hash,
                "n_chunks": rec.n_chunks}

    def upsert(self, records: Iterable[DocumentRecord]) -> None:
        """Insert or replace document records."""
        now = time.time()
        self.db.executemany(
            f"INSERT INTO documents({_DOC_COLS}, indexed_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) "
            f"ON CONFLICT (doc_id) DO UPDATE SET {_DOC_UPDATE}, indexed_at = excluded.indexed_at",
            [(*(getattr(r, f) for f in DocumentRecord.__dataclass_fields__), now) for r in records],
        )

    def delete(self, doc_ids: Iterable[str]) -> None:
        """Delete document records."""
        self.db.executemany("DELETE FROM documents WHERE doc_id = ?", [(d,) for d in doc_ids])

    def relocate(self, moves: Iterable[tuple[str, str]]) -> None:
        """Record a new absolute source path for documents: ``(doc_id, source_abs)`` pairs."""
        self.db.executemany("UPDATE documents SET source_abs = ? WHERE doc_id = ?",
                              [(source_abs, doc_id) for doc_id, source_abs in moves])

    def detach_file(self, source_abs: str) -> int:
        """Forget that documents came from the file ``source_abs`` (its stored copy is being
        removed): they stay stored, are no longer pruned for the file being gone, and a new
        ingest of a file with their source name replaces them. Returns how many there were."""
        n = int(self.db.query("SELECT COUNT(*) FROM documents WHERE source_abs = ?", (source_abs,))[0][0])
        self.db.execute("UPDATE documents SET source_abs = NULL WHERE source_abs = ?", (source_abs,))
        self.files.forget(sources_abs=[source_abs])
        return n

    def mark_stale(self, doc_id: str, extent: int) -> None:
        """Force the document to be rewritten on its next ingest; remember Chroma may hold ``extent`` chunks."""
        self.db.execute(
            "UPDATE documents SET content_hash = '', "
            "chroma_extent = CASE WHEN chroma_extent > ? THEN chroma_extent ELSE ? END WHERE doc_id = ?",
            (extent, extent, doc_id))

    def page(self, offset: int = 0, limit: int = 50,
             flt: SearchFilter | None = None) -> tuple[list[dict[str, Any]], int]:
        """A page of the documents that pass ``flt`` (None: all) ordered by source then doc_id
        (doc_id, source, title, doc_type, n_chunks, content_hash, key, created_ts), and how many
        pass it. A negative offset or limit counts as 0."""
        offset, limit = max(0, offset), max(0, limit)
        where, params = filter_sql(flt)
        total = int(self.db.query(f"SELECT COUNT(*) FROM documents c WHERE TRUE{where}", params)[0][0])
        rows = self.db.query(
            "SELECT doc_id, source, title, doc_type, n_chunks, content_hash, key, created_ts FROM documents c "
            f"WHERE TRUE{where} ORDER BY source, doc_id LIMIT ? OFFSET ?", [*params, int(limit), int(offset)])
        names = ("doc_id", "source", "title", "doc_type", "n_chunks", "content_hash", "key", "created_ts")
        return [dict(zip(names, r)) for r in rows], total

    def sources_under(self, folders: Sequence[str]) -> list[str]:
        """The distinct stored sources equal to or under one of ``folders`` (whole path segments)."""
        clause, params = folder_sql(folders)
        return [r[0] for r in self.db.query(f"SELECT DISTINCT source FROM documents c WHERE {clause}", params)]

    def count(self) -> int:
        """Number of documents."""
        return int(self.db.query("SELECT COUNT(*) FROM documents")[0][0])



class MetaTable:
    """The ``meta`` table: key/value settings and the store's generation."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, key: str) -> str | None:
        """Value stored under ``key``, or None."""
        row = self.db.query_one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if row is None else str(row[0])

    def set(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``."""
        self.db.execute("INSERT INTO meta(key, value) VALUES (?, ?) "
                        "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))


class FileTable:
    """The ``files`` table: fingerprints of the last complete ingest of each file."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, source_abs: str) -> FileRecord | None:
        """Fingerprint of the last complete ingest of ``source_abs``."""
        row = self.db.query_one(
            "SELECT source_abs, source, sha256, settings_sig, n_documents, n_chunks, format FROM files "
            "WHERE source_abs = ?", (source_abs,))
        return None if row is None else FileRecord(*row)

    def put(self, records: Iterable[FileRecord]) -> None:
        """Insert or replace file fingerprints."""
        self.db.executemany(
            "INSERT INTO files(source_abs, source, sha256, settings_sig, n_documents, n_chunks, format) "
            "VALUES (?,?,?,?,?,?,?) ON CONFLICT (source_abs) DO UPDATE SET source = excluded.source, "
            "sha256 = excluded.sha256, settings_sig = excluded.settings_sig, n_documents = excluded.n_documents, "
            "n_chunks = excluded.n_chunks, format = excluded.format",
            [(r.source_abs, r.source, r.sha256, r.settings_sig, r.n_documents, r.n_chunks, r.format) for r in records],
        )

    def forget(self, sources: Iterable[str] = (), sources_abs: Iterable[str] = ()) -> None:
        """Drop fingerprints so those files are parsed again on the next run."""
        self.db.executemany("DELETE FROM files WHERE source = ?", [(s,) for s in sources])
        self.db.executemany("DELETE FROM files WHERE source_abs = ?", [(s,) for s in sources_abs])

    def paths(self) -> list[str]:
        """Absolute paths of every fingerprinted file."""
        return [r[0] for r in self.db.query("SELECT source_abs FROM files")]



class IntentLog:
    """The ``pending`` table: the write-intent log (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, rows: Iterable[tuple[str, str, int, str | None, str | None]]) -> None:
        """Record intents ``(doc_id, op 'write'|'delete', extent, source, source_abs)``."""
        self.db.executemany(
            "INSERT INTO pending(doc_id, op, extent, source, source_abs) VALUES (?,?,?,?,?) ON CONFLICT (doc_id) "
            "DO UPDATE SET op = excluded.op, extent = excluded.extent, source = excluded.source, "
            "source_abs = excluded.source_abs", list(rows))

    def clear(self, doc_ids: Iterable[str]) -> None:
        """Remove intents once their outcome is committed."""
        self.db.executemany("DELETE FROM pending WHERE doc_id = ?", [(d,) for d in doc_ids])

    def unresolved(self) -> list[tuple[str, str, int, str | None, str | None]]:
        """Every unresolved intent."""
        return [(str(r[0]), str(r[1]), int(r[2]), r[3], r[4]) for r in self.db.query(
            "SELECT doc_id, op, extent, source, source_abs FROM pending ORDER BY doc_id")]
