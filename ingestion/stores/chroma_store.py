"""Dense vectors in a Chroma collection (embedded PersistentClient or a ``chroma run`` server).

Embeddings are computed by us (the collection has no embedding function) and stored
with cosine distance; scores returned are cosine similarities (``1 - distance``).
Every write is split into batches no larger than the client's ``get_max_batch_size()``.
Metadata is sanitised for Chroma: None and empty lists dropped, lists kept as lists of
strings (filterable with ``$contains``), other non-scalars as JSON strings.

One client per store, shared by every thread and never replaced while in use: reads and writes
of records hold the shared side of a readers-writer lock, and only replacing the client (re-reading
another process's writes, a purge) holds the exclusive side. A purge closes the client before it
rewrites ``chroma.sqlite3`` with Python's own SQLite: two SQLite libraries with one file open in one
process share its POSIX locks, and closing either drops the other's (sqlite.org, "How To Corrupt An
SQLite Database File", §2.2.1).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import shutil
import sqlite3
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
from readerwriterlock import rwlock

from ingestion.documents import SearchFilter
from ingestion.errors import StoreError
from ingestion.stores.dense import DenseHit
from ingestion.stores.hnsw_files import index_damage, persisted_segments, zero_unused_hnsw_slots

log = logging.getLogger(__name__)


_INT64 = 2**63
#: Words of a failed open that mean the embedded files are damaged (not a lock, a server, a setting).
_DAMAGED = re.compile(r"malformed|not a database|disk image|hnsw|pickle|no such table|corrupt", re.IGNORECASE)


def _safe_key(key: object) -> str:
    """Chroma rejects empty keys and keys starting with ``#``/``$``, and drops ``chroma:`` ones."""
    text = str(key)
    if not text or text[0] in "#$" or text.startswith("chroma:"):
        return "x_" + text
    return text


def sanitize_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """Chroma-safe copy of ``metadata``.

    None, empty lists and non-finite floats are dropped; lists become lists of strings;
    dicts become JSON strings; integers outside int64 become strings; reserved keys
    (empty, ``#...``, ``$...``, ``chroma:...``) get an ``x_`` prefix.
    """
    clean: dict[str, Any] = {}
    for raw_key, value in metadata.items():
        key = _safe_key(raw_key)
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and not -_INT64 <= value < _INT64:
            clean[key] = str(value)
        elif isinstance(value, (bool, int, float, str)):
            clean[key] = value
        elif isinstance(value, (list, tuple, set)):
            items = [v if isinstance(v, str) else json.dumps(v, default=str) for v in value if v is not None]
            if items:
                clean[key] = items
        else:
            clean[key] = json.dumps(value, sort_keys=True, default=str)
    return clean


def build_where(flt: SearchFilter | None, folder_sources: Sequence[str] = ()) -> dict[str, Any] | None:
    """Translate a :class:`SearchFilter` into a Chroma ``where`` clause (None = no filter).

    Chroma's metadata operators (1.5: ``$eq $ne $gt $gte $lt $lte $in $nin``, and
    ``$contains`` on list values) have no string prefix test, so a ``source_folders``
    restriction is given as ``folder_sources``, the stored sources under those folders, and
    becomes ``{"source": {"$in": folder_sources}}``.

    Raises:
        ValueError: ``match_none`` (no ``where`` matches nothing: the caller answers with no hits),
            or ``source_folders`` without ``folder_sources`` (never widen a restriction).
    """
    if flt is None:
        return None
    if flt.match_none:
        raise ValueError("a match_none filter has no Chroma where clause: answer with no hits")
    conditions: list[dict[str, Any]] = []
    if flt.source_folders:
        if not folder_sources:
            raise ValueError("source_folders needs the stored sources under them (folder_sources)")
        conditions.append({"source": {"$in": list(folder_sources)}})
    if flt.doc_types:
        conditions.append({"doc_type": {"$in": list(flt.doc_types)}})
    if flt.source is not None:
        conditions.append({"source": {"$eq": flt.source}})
    if flt.ticket_key is not None:
        conditions.append({"key": {"$eq": flt.ticket_key}})
    if flt.since_ts is not None:
        conditions.append({"created_ts": {"$gte": int(flt.since_ts)}})
    if flt.until_ts is not None:
        conditions.append({"created_ts": {"$lte": int(flt.until_ts)}})
    if not conditions:
        return None
    return conditions[0] if len(conditions) == 1 else {"$and": conditions}


def _batches(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def parse_url(url: str) -> tuple[str, int, bool]:
    """``(host, port, ssl)`` from ``http[s]://host[:port]`` (port defaults: 8000 for http, 443 for https).

    Raises:
        ValueError: no host in the URL.
    """
    parsed = urlparse(url if "://" in url else f"http://{url}")
    if not parsed.hostname or parsed.scheme not in ("http", "https"):
        raise ValueError(f"malformed Chroma URL {url!r}; expected http://host:port")
    ssl = parsed.scheme == "https"
    return parsed.hostname, parsed.port or (443 if ssl else 8000), ssl


def make_client(path: Path | None = None, url: str | None = None) -> Any:
    """A Chroma client: ``HttpClient`` for ``url`` (``http[s]://host:port``), else ``PersistentClient(path)``.

    Raises:
        ValueError: neither given, or a malformed URL.
    """
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    if url:
        host, port, ssl = parse_url(url)
        return chromadb.HttpClient(host=host, port=port, ssl=ssl, settings=settings)
    if path is None:
        raise ValueError("a Chroma path or URL is required")
    path.mkdir(parents=True, exist_ok=True)
    try:
        return chromadb.PersistentClient(path=str(path), settings=settings)
    except Exception:
        forget_failed_client(path)
        raise


def _system_alive(path: Path) -> bool:
    """Whether a Chroma system of this process still has ``path`` open (another client of the folder)."""
    from chromadb.api.shared_system_client import SharedSystemClient

    return str(path) in SharedSystemClient._identifier_to_system


def forget_failed_client(path: Path) -> None:
    """Drop the embedded Chroma system cached for ``path`` after its start failed.

    chromadb caches one ``System`` per persist directory *before* starting it, and a start that
    raises (a full disk, an unreadable file) leaves the half-built one in the cache: every later
    client of the folder in this process reuses it and fails with "'RustBindingsAPI' object has no
    attribute 'bindings'". A system that failed to start serves no client, so dropping it is safe.
    """
    from chromadb.api.shared_system_client import SharedSystemClient

    SharedSystemClient._identifier_to_system.pop(str(path), None)


class ChromaStore:
    """One Chroma collection holding chunk vectors, texts and sanitised metadata.

    Args:
        path: folder for the embedded PersistentClient (ignored when ``url`` is given).
        url: Chroma server URL, e.g. ``http://127.0.0.1:8123``.
        collection: collection name (3-512 chars of ``[a-zA-Z0-9._-]``).
        embedding_model: recorded in the collection metadata; opening a collection built
            with another model raises StoreError.
        folder_sources: ``folders -> stored sources under them`` (the manifest's), for queries
            restricted to source folders (see :func:`build_where`); ``None``: such a query raises.
    Raises:
        StoreError: the server is unreachable or the collection belongs to another model.
    """

    def __init__(self, path: Path | None, url: str | None, collection: str, embedding_model: str,
                 folder_sources: Callable[[Sequence[str]], list[str]] | None = None) -> None:
        self.url = url
        self.folder_sources = folder_sources
        self.path = path
        self.collection_name = collection
        self.embedding_model = embedding_model
        if url:
            parse_url(url)  # ValueError for a malformed URL, before any connection attempt
        self.max_batch_size = 0
        """Largest number of records one add/upsert/delete call may carry (the client's, read at open)."""
        self._lock = rwlock.RWLockWrite()  # shared: using the client; exclusive: replacing it
        self._segments: dict[str, int] = {}  # vector segment id -> log position persisted (embedded)
        self.fresh = False
        """The embedded index was created by the latest open (its folder held no database before)."""
        self._open_error: str | None = None  # why an embedded Chroma with damaged files did not open
        self.client: Any = None
        self._open()

    def _open(self) -> None:
        """Open the client and the collection. An embedded Chroma whose files are damaged (SQLite's
        "malformed", Chroma's "Error ... hnsw", a pickle it cannot read) is left closed, with the
        reason in :meth:`damage`, so the store can serve what needs no dense index and a rebuild can
        replace the folder.

        Raises:
            StoreError: the server is unreachable, another failure, or another embedding model.
        """
        self.client, self._open_error = None, None
        if self.path is not None and not self.url:
            self.fresh = not (self.path / "chroma.sqlite3").exists()
            if not _system_alive(self.path):
                self._segments = persisted_segments(self.path / "chroma.sqlite3")  # before Chroma opens the file
        try:
            self.client = make_client(self.path, self.url)
            self.collection = self.client.get_or_create_collection(
                self.collection_name, embedding_function=None,
                configuration={"hnsw": {"space": "cosine"}},
                metadata={"embedding_model": self.embedding_model},
            )
            self.max_batch_size = int(self.client.get_max_batch_size())
        except Exception as exc:  # chromadb raises assorted connection/validation errors
            where = self.url or str(self.path)
            if not self.url and _DAMAGED.search(str(exc)):
                self._close_client()
                self._open_error = f"{where}/chroma.sqlite3 cannot be opened: {exc}"
                return
            raise StoreError(f"cannot open Chroma collection {self.collection_name!r} at {where}: {exc}") from exc
        recorded = (self.collection.metadata or {}).get("embedding_model")
        if recorded and recorded != self.embedding_model:
            raise StoreError(f"Chroma collection {self.collection_name!r} holds embeddings of {recorded!r}, not "
                             f"{self.embedding_model!r}; use another collection or data dir")

    def reopen(self) -> None:
        """Read the collection anew. Embedded Chroma keeps its vector index in memory, so writes by
        another process (a ``copilot ingest`` beside ``copilot serve``) stay invisible to this one —
        and a filtered query then fails with "Error finding id" — until the client is closed and
        opened again; a server client needs nothing.

        Raises:
            StoreError: the collection cannot be opened again.
        """
        if self.url:
            return
        log.info("re-reading the embedded Chroma at %s", self.path)
        with self._lock.gen_wlock():
            self._reopen_client()

    def damage(self) -> str | None:
        """Why the embedded index's files cannot be read, in one line naming the file
        (:mod:`ingestion.stores.hnsw_files`, or its database did not open); None when they can, and
        for a Chroma server."""
        if self.url or self.path is None:
            return None
        return self._open_error or index_damage(self.path, self._segments)

    def reset(self) -> None:
        """Drop every record and start an empty collection: an embedded Chroma's folder is
        deleted (damaged files and the bytes of deleted records with it); on a server the
        collection is deleted and created again.

        Raises:
            StoreError: the new collection cannot be created.
        """
        with self._lock.gen_wlock():
            if self.url:
                with contextlib.suppress(Exception):  # absent, or unreadable: either way it goes
                    self.client.delete_collection(self.collection_name)
                self._close_client()
            else:
                assert self.path is not None
                self._close_client()
                forget_failed_client(self.path)
                shutil.rmtree(self.path, ignore_errors=True)
            self._open()

    def upsert(self, ids: Sequence[str], embeddings: np.ndarray, texts: Sequence[str],
               metadatas: Sequence[dict[str, Any]]) -> None:
        """Insert or replace records, in batches of at most ``max_batch_size``."""
        size = self.max_batch_size
        for part in _batches(len(ids), size):
            with self._lock.gen_rlock():
                self.collection.upsert(
                    ids=list(ids[part]), embeddings=embeddings[part], documents=list(texts[part]),
                    metadatas=[sanitize_metadata(m) for m in metadatas[part]],
                )
        self.fresh = False

    def delete(self, ids: Sequence[str]) -> None:
        """Delete records by id (missing ids are ignored), in batches.

        Each stored record is first overwritten with a blank one (the unit vector e0, empty
        text): Chroma's HNSW index only marks a deleted element, so its vector would stay in
        the segment's ``data_level0.bin``; an update overwrites it in place.
        """
        ids = list(ids)
        for part in _batches(len(ids), self.max_batch_size):
            with self._lock.gen_rlock():
                got = self.collection.get(ids=ids[part], include=["embeddings"])
                if got["ids"]:
                    blank = np.zeros((len(got["ids"]), len(got["embeddings"][0])), dtype=np.float32)
                    blank[:, 0] = 1.0
                    self.collection.upsert(ids=list(got["ids"]), embeddings=blank, documents=[""] * len(got["ids"]))
                self.collection.delete(ids=ids[part])

    def purge(self, compact: bool = False) -> list[str]:
        """Remove deleted records' bytes from the embedded Chroma's files (see :func:`purge_embedded`;
        its ``VACUUM`` compacts the database either way, so ``compact`` changes nothing).

        Returns:
            Warnings for what could not be purged: everything, for a Chroma server (its files
            are the server's; its operator runs ``chroma vacuum`` there).
        """
        if self.url:
            return [f"the Chroma server at {self.url} keeps deleted records' bytes in its own files until its "
                    "log is purged and its database vacuumed (`chroma vacuum --path ...` on the server)"]
        assert self.path is not None
        with self._lock.gen_wlock():
            with self._sync_threshold(1):
                self.collection.count()  # replays the log into the HNSW writer, which persists; Chroma purges the log
            collection_id = str(self.collection.id)
            self._close_client()  # no SQLite of Chroma's has the file open while ours rewrites it
            try:
                left = purge_embedded(self.path / "chroma.sqlite3", collection_id)
                for header in self.path.glob("*/header.bin"):
                    zero_unused_hnsw_slots(header.parent)
            finally:
                self._open()
        if left:
            return [f"Chroma's log still holds {left} record(s) of collection {self.collection_name!r} "
                    "(another client of this Chroma in this process keeps its HNSW unsaved)"]
        return []

    @contextlib.contextmanager
    def _sync_threshold(self, value: int) -> Iterator[None]:
        """Run with the collection's HNSW ``sync_threshold`` at ``value`` (restored after); the caller
        holds the lock's exclusive side.

        Chroma persists its HNSW index, and records how far the log is applied, only every
        ``sync_threshold`` records (1000 by default); it purges the log (``embeddings_queue``,
        which holds every written record with its text) only up to that point. Chroma reads
        the setting when it opens the collection's segments, hence the re-opening.
        """
        with warnings.catch_warnings():  # chromadb warns about our collection's embedding_function=None
            warnings.simplefilter("ignore", DeprecationWarning)
            hnsw = (self.collection.configuration or {}).get("hnsw") or {}
        old = int(hnsw.get("sync_threshold") or 1000)
        self.collection.modify(configuration={"hnsw": {"sync_threshold": value}})
        self._reopen_client()
        try:
            yield
        finally:
            self.collection.modify(configuration={"hnsw": {"sync_threshold": old}})
            self._reopen_client()

    def close(self) -> None:
        """Close the client: an embedded Chroma left open keeps its segments (and its unsaved
        HNSW index) cached in this process, which later clients of the same folder share."""
        with self._lock.gen_wlock():
            self._close_client()

    def _close_client(self) -> None:
        if self.client is not None:
            self.client.close()
        self.client = None

    def _reopen_client(self) -> None:
        """Replace the client (the caller holds the lock's exclusive side)."""
        self._close_client()
        self._open()

    def query(self, embedding: Sequence[float] | np.ndarray, k: int, flt: SearchFilter | None = None) -> list[DenseHit]:
        """The ``k`` nearest chunks by cosine similarity that pass ``flt``, best first (none for a
        ``match_none`` filter, or folders that hold no stored source).

        Raises:
            ValueError: a ``source_folders`` filter on a store built without ``folder_sources``.
        """
        if k <= 0 or flt is not None and flt.match_none:
            return []
        sources: list[str] = []
        if flt is not None and flt.source_folders:
            if self.folder_sources is None:
                raise ValueError("this Chroma store cannot filter by source folder: no folder_sources given")
            sources = self.folder_sources(flt.source_folders)  # per query: the stored sources change
            if not sources:
                return []
        with self._lock.gen_rlock():
            result = self.collection.query(
                query_embeddings=np.asarray([embedding], dtype=np.float32), n_results=int(k),
                where=build_where(flt, sources), include=["distances", "documents", "metadatas"],
            )
        ids = result["ids"][0] if result["ids"] else []
        distances = (result.get("distances") or [[]])[0]
        docs = (result.get("documents") or [[]])[0]
        metas = (result.get("metadatas") or [[]])[0]
        return [DenseHit(i, 1.0 - float(d), t or "", dict(m or {})) for i, d, t, m in zip(ids, distances, docs, metas)]

    def get_embeddings(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors by id (missing ids absent from the result)."""
        out: dict[str, np.ndarray] = {}
        ids = list(ids)
        for part in _batches(len(ids), self.max_batch_size):
            with self._lock.gen_rlock():
                got = self.collection.get(ids=ids[part], include=["embeddings"])
            for cid, emb in zip(got["ids"], got["embeddings"]):
                out[cid] = np.asarray(emb, dtype=np.float32)
        return out

    def all_ids(self) -> list[str]:
        """Every id in the collection (paged; for checks and tests)."""
        out: list[str] = []
        offset = 0
        size = self.max_batch_size
        while True:
            with self._lock.gen_rlock():
                got = self.collection.get(include=[], limit=size, offset=offset)
            out.extend(got["ids"])
            if len(got["ids"]) < size:
                return out
            offset += size

    def count(self) -> int:
        """Number of records in the collection."""
        with self._lock.gen_rlock():
            return int(self.collection.count())

    def heartbeat(self) -> None:
        """Raise if the Chroma client or server does not answer."""
        with self._lock.gen_rlock():
            self.client.heartbeat()


def purge_embedded(sqlite_path: Path, collection_id: str, timeout_s: float = 30.0) -> int:
    """Rewrite an embedded Chroma's ``chroma.sqlite3`` without the bytes of deleted records.

    Chroma deletes rows (``embeddings``, ``embedding_metadata`` with the document text,
    its full-text table ``embedding_fulltext_search``) through its own SQLite, which does not
    overwrite freed cells, and FTS5 keeps a deleted row's trigrams in older segments until
    they are merged. So, on a connection of ours: FTS5 ``optimize`` (merges the segments,
    dropping deleted entries; ``secure_delete`` zeroes what it frees), then ``VACUUM``
    (copies live rows into a new file). Chroma's own ``chroma vacuum`` command runs the same
    ``VACUUM`` after purging its log. Both are SQLite maintenance statements: what Chroma
    reads does not change. Cost: one pass over the file (about 1 s for 80 MB).

    Returns:
        How many records of collection ``collection_id`` Chroma's log still holds besides
        its newest one (which its purge always keeps): 0 when the log was purged.
    Raises:
        sqlite3.OperationalError: the file stayed locked for ``timeout_s`` seconds.
    """
    conn = sqlite3.connect(sqlite_path, timeout=timeout_s, isolation_level=None)
    try:
        conn.execute("PRAGMA secure_delete=ON")
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'embedding_fulltext_search'").fetchone():
            conn.execute("INSERT INTO embedding_fulltext_search(embedding_fulltext_search) VALUES ('optimize')")
        conn.execute("VACUUM")
        row = conn.execute("SELECT COUNT(*) - 1 FROM embeddings_queue WHERE topic LIKE ?",
                           (f"%/{collection_id}",)).fetchone()
        return max(0, int(row[0]))
    finally:
        conn.close()
