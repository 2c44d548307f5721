"""ChunkStore: a dense index + a lexical index + the manifest, kept in step.

Two deployments, chosen by settings (:func:`open_store`):

- **embedded** (the default, one machine): under ``data_dir``, ``chroma/`` (embedded Chroma),
  ``index.sqlite3`` (chunks, FTS5 index, manifest, ingest jobs; WAL mode) and ``ingest.lock``;
  a Chroma server (``chroma_url``) may hold the dense index instead;
- **shared** (several replicas, several machines): ``database_url`` names a PostgreSQL server
  that holds the lexical index, the manifest and the ingest jobs in a schema named after the
  collection, and the dense index too (pgvector) unless ``chroma_url`` names a Chroma server.

Write protocol for a batch of documents (:meth:`ChunkStore.apply`):

1. embed the new chunks (no store touched yet);
2. commit intent rows (``pending``) naming the documents about to change;
3. upsert their chunks into Chroma and delete the chunk ids they no longer have;
4. in one SQLite transaction: replace their chunk rows (FTS follows by trigger), their
   manifest records, the file fingerprints, and delete the intent rows.

A kill between 2 and 4 leaves intent rows; :meth:`ChunkStore.recover` (run at the start of
every ingest that finds no other run live, :func:`ingestion.pipeline.ingest_run`) marks those documents
stale (or finishes their deletion) so the next run rewrites them; nothing already stored is
dropped. Re-running therefore converges to the state of one clean run.

A dense index whose files cannot be read (a disk that filled while Chroma persisted, a file cut
short or deleted) is detected at open and when a dense operation fails (:meth:`ChunkStore.refresh`):
the store then keeps serving what needs only SQLite (lexical search, listing, reading, deleting),
refuses to ingest, and says in one line which file is damaged and that ``copilot documents reindex``
(:mod:`ingestion.reindex`) rebuilds the index from the chunk texts SQLite keeps.

Every committed change also writes a new *generation* (and the writing process) into the
manifest's ``meta`` table. Readers call :meth:`ChunkStore.refresh` before a dense search:
when another process changed the store, the dense index is read anew (embedded Chroma
caches its vector index in memory and otherwise serves a stale, inconsistent view).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from ingestion.chunking import CHUNKER_VERSION, Chunker
from ingestion.documents import Chunk, Document, ScoredChunk, SearchFilter, make_chunk_id
from ingestion.embedding import Embedder
from ingestion.errors import StoreError
from ingestion.stores.chroma_store import ChromaStore
from ingestion.stores.database import Database, PostgresDatabase, open_database
from ingestion.stores.dense import DenseIndex
from ingestion.stores.ingest_lock import IngestLock
from ingestion.stores.lexical_index import lexical_index
from ingestion.stores.manifest import DocumentRecord, Manifest
from ingestion.stores.space_reserve import DEFAULT_RESERVE_BYTES, SpaceReserve, disk_full
from ingestion.write_batch import ApplyResult, DocumentWrite, WriteBatch

__all__ = ["ApplyResult", "ChunkStore", "DocumentWrite", "StoreSettings", "WriteBatch", "open_store"]

log = logging.getLogger(__name__)

SCHEMA_VERSION = "1"
#: An error of the dense index that says its files cannot be read (Chroma's words).
_DENSE_READ = re.compile(r"hnsw segment reader|deserializing pickle|Error loading hnsw|Error finding id", re.IGNORECASE)
DENSE_REBUILD = "dense_rebuild"
"""``meta`` key: ``resetting`` or ``filling`` while :mod:`ingestion.reindex` rebuilds the dense index."""
PROCESS_ID = uuid.uuid4().hex
"""Names this process as the writer of a store generation (pids repeat across machines)."""


class ChunkStore:
    """A dense index + a lexical index + per-document content hashes, kept in step.

    Reads go to the parts it exposes: :attr:`dense` (:class:`~ingestion.stores.dense.DenseIndex`),
    :attr:`lexical` (chunks by id or document, counts, BM25), :attr:`manifest` (document records,
    pages of them, with its ``meta``, ``files`` and ``intents`` tables), :attr:`db` and
    :attr:`reserve`. Writes go through :meth:`apply`, or hold :attr:`write_lock` and write in a
    :meth:`transaction` (deletion, :mod:`ingestion.deletion`; purge, :mod:`ingestion.stores.purge`).

    Args:
        data_dir: folder for the embedded indexes and the lock file (created); with a
            ``database_url`` it holds only what is per replica (the model cache, uploads).
        chroma_url: Chroma server URL (``http://host:port``) for the dense index; None = embedded
            PersistentClient in ``data_dir/chroma``, or pgvector when ``database_url`` is set.
        database_url: PostgreSQL URL (``postgresql://user:pw@host:5432/db``) for the shared
            store; None = SQLite in ``data_dir``.
        collection: Chroma collection name, and the PostgreSQL schema (lower-cased, ``[a-z0-9_]``).
        embedder: the embedding model wrapper (default: embedded all-MiniLM-L6-v2, loaded lazily).
        max_chunk_tokens: chunk ceiling in tokens incl. special tokens (default and maximum:
            the model's max sequence length).
        reserve_bytes: the space reserve kept in ``data_dir`` for reading and deleting on a full
            disk (:mod:`ingestion.stores.space_reserve`; 0: none; none for a PostgreSQL store).
    Raises:
        StoreError: a server is unreachable, or the store was built with another embedding model.
    """

    def __init__(self, data_dir: Path, *, chroma_url: str | None = None, database_url: str | None = None,
                 collection: str = "opscopilot", embedder: Embedder | None = None,
                 max_chunk_tokens: int | None = None, reserve_bytes: int = DEFAULT_RESERVE_BYTES) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.reserve = SpaceReserve(self.data_dir, reserve_bytes if database_url is None else 0)
        self.embedder = embedder or Embedder()
        self.collection_name = collection
        self._max_chunk_tokens = max_chunk_tokens
        self._chunker: Chunker | None = None
        self.write_lock = threading.RLock()
        """Held by one writer at a time: apply, recover, a deletion (:mod:`ingestion.deletion`), a purge."""
        self._dense_lock = threading.RLock()  # dense queries vs re-opening the dense index
        self.db: Database = open_database(self.data_dir, database_url, collection)
        self.lexical = lexical_index(self.db)
        self.manifest = Manifest(self.db)
        model = self.embedder.model_name
        recorded = self.manifest.meta.get("embedding_model")
        if recorded is None:
            with self.db.transaction():
                recorded = self.manifest.meta.get("embedding_model") or model
                self.manifest.meta.set("embedding_model", recorded)
                self.manifest.meta.set("schema_version", SCHEMA_VERSION)
        if recorded != model:
            raise StoreError(f"{self.db.location} was built with embedding model {recorded!r}, not {model!r}; "
                             "use another data dir or collection")
        self.dense: DenseIndex
        if isinstance(self.db, PostgresDatabase) and not chroma_url:
            from ingestion.stores.pgvector_store import PgVectorStore

            self.dense = PgVectorStore(self.db)
        else:
            self.dense = ChromaStore(None if chroma_url else self.data_dir / "chroma", chroma_url, collection, model,
                                     folder_sources=self.manifest.sources_under)
        self.parallel_ingest = not (isinstance(self.dense, ChromaStore) and self.dense.url is None)
        """True when several ingest runs may write at once: the dense index is pgvector or a Chroma
        server. Embedded Chroma keeps each process's HNSW index in memory and persists it over
        another writer's, so there runs take turns."""
        raw = f"{model}|{max_chunk_tokens or 'auto'}|{CHUNKER_VERSION}"
        self.index_signature = hashlib.sha256(raw.encode()).hexdigest()[:16]
        """Hash of everything besides content that shapes stored chunks (model, chunk settings);
        from settings only, so checking for unchanged documents never loads the model."""
        self._seen_generation = self.manifest.meta.get("generation")
        self.dense_damage: str | None = None
        """Why dense search is off (a damaged or half-rebuilt dense index), or None; checked at open,
        on :meth:`reopen_dense` and when a dense operation fails."""
        self._dense_failure: str | None = None  # a dense query failed again after re-reading the index
        self._check_dense()
        self.reserve.ensure()

    # -- plumbing -------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """A write transaction that also records a new generation written by this process."""
        with self.write_lock, self.db.transaction():
            yield
            generation = uuid.uuid4().hex
            self.manifest.meta.set("generation", generation)
            self.manifest.meta.set("writer", PROCESS_ID)
            self._seen_generation = generation

    def ingest_lock(self, *, exclusive: bool = True) -> contextlib.AbstractContextManager[IngestLock]:
        """Hold the ingest run lock (:mod:`ingestion.stores.ingest_lock`): a ``flock`` on
        ``data_dir/ingest.lock`` (embedded) or a PostgreSQL advisory lock (shared); released by the
        OS or the server if the process dies. ``exclusive=False`` shares it with other runs where
        :attr:`parallel_ingest` allows (the holder then calls :meth:`IngestLock.share`).

        Raises:
            StoreLockedError: another run holds it exclusively (or at all, when this one must be
                alone); ``holder`` has what the latest holder recorded (pid, host, started) and the
                message names them.
        """
        return self.db.ingest_lock(shared=not exclusive and self.parallel_ingest)

    def refresh(self) -> bool:
        """Notice changes committed by another process and read the dense index anew; True if so.

        Costs one indexed read of ``meta``. Called before every dense search.
        """
        generation = self.manifest.meta.get("generation")
        if generation == self._seen_generation:
            return False
        self._seen_generation = generation
        if self.manifest.meta.get("writer") == PROCESS_ID:
            return False
        self.reopen_dense()
        return True

    def reopen_dense(self, reset: bool = False) -> None:
        """Re-open the dense index (``reset``: emptied first, for a rebuild: :mod:`ingestion.reindex`),
        with no write or dense query of this process in flight, and check it again."""
        with self.write_lock, self._dense_lock:
            if reset:
                self.dense.reset()
            else:
                self.dense.reopen()
            self._dense_failure = None
            self._check_dense()

    def _check_dense(self) -> str | None:
        """Whether the dense index can serve: sets and returns :attr:`dense_damage`, one line that
        names the damaged file (or an unfinished rebuild) and the command that repairs it; None
        when it can. Logged once per new finding. Costs a ``meta`` read, a chunk count when the
        dense index was just created, and a few ``stat`` calls."""
        damage = self.dense.damage() or self._dense_failure
        rebuilding = self.manifest.meta.get(DENSE_REBUILD)
        stored = self.lexical.count() if damage is None and self.dense.fresh and not rebuilding else 0
        if stored:
            damage = f"it holds no chunk while the store holds {stored} (its files were deleted or replaced)"
        if damage is not None:
            problem: str | None = (f"the dense index is damaged: {damage}; run `copilot documents reindex` (or POST "
                                   "/v1/index/reindex) to rebuild it from the stored chunks (lexical search, "
                                   "listing, reading and deleting documents keep working meanwhile)")
        elif rebuilding:
            problem = ("the dense index is being rebuilt, or its rebuild was interrupted: `copilot documents "
                       "reindex` finishes it (lexical search, listing, reading and deleting documents work meanwhile)")
        else:
            problem = None
        if problem is not None and problem != self.dense_damage:
            log.log(logging.ERROR if damage else logging.WARNING, "%s", problem)
        self.dense_damage = problem
        return problem

    def close(self) -> None:
        """Close the dense index's client and the database connections (the store is unusable afterwards)."""
        with self.write_lock, self._dense_lock:
            self.dense.close()
            self.db.close()

    def _chunk_ceiling(self) -> int:
        """Effective chunk ceiling in tokens (loads the model to read its max sequence length)."""
        limit = self.embedder.max_seq_length
        if self._max_chunk_tokens is None:
            return limit
        if self._max_chunk_tokens > limit:
            log.warning("max_chunk_tokens=%d exceeds the model's max sequence length %d; using %d",
                        self._max_chunk_tokens, limit, limit)
            return limit
        return self._max_chunk_tokens

    @property
    def chunker(self) -> Chunker:
        """The :class:`Chunker` for this store's model and token ceiling (created on first use)."""
        if self._chunker is None:
            self._chunker = Chunker(self.embedder.tokenizer, self._chunk_ceiling())
        return self._chunker

    # -- writing ----------------------------------------------------------------------------
    def apply(self, batch: WriteBatch) -> ApplyResult:
        """Write a batch (see the module docstring for the crash-safe protocol).

        Raises:
            StoreError: the dense index or the database failed; intent rows keep the batch recoverable.
        """
        chunks = [c for w in batch.writes for c in w.chunks]
        if batch.writes and self.dense_damage:
            raise StoreError(f"cannot ingest: {self.dense_damage}")
        started = time.perf_counter()
        embeddings = self.embedder.embed_array([c.text for c in chunks]) if chunks else None
        embed_s = time.perf_counter() - started
        if embeddings is not None:
            self.reserve.require_room(chunks, int(embeddings.shape[1]))
        with self.write_lock:
            write_ids = [w.document.doc_id for w in batch.writes]
            old = self.manifest.get(write_ids + list(batch.deletes))
            deletes = [d for d in dict.fromkeys(batch.deletes) if d in old and d not in set(write_ids)]
            intents: list[tuple[str, str, int, str | None, str | None]] = []
            stale: list[str] = []
            for w in batch.writes:
                doc_id = w.document.doc_id
                prev = old[doc_id].chroma_extent if doc_id in old else 0
                intents.append((doc_id, "write", max(prev, len(w.chunks)), w.document.source, w.source_abs))
                stale.extend(make_chunk_id(doc_id, i) for i in range(len(w.chunks), prev))
            for doc_id in deletes:
                rec = old[doc_id]
                intents.append((doc_id, "delete", rec.chroma_extent, rec.source, rec.source_abs))
                stale.extend(make_chunk_id(doc_id, i) for i in range(rec.chroma_extent))
            try:
                if intents:
                    with self.transaction():
                        self.manifest.intents.add(intents)
                if embeddings is not None:  # there are chunks
                    self.dense.upsert([c.chunk_id for c in chunks], embeddings, [c.text for c in chunks],
                                       [c.metadata for c in chunks])
                if stale and not self.dense_damage:  # a damaged index is rebuilt from SQLite without them
                    self.dense.delete(stale)
                with self.transaction():
                    self.lexical.delete_documents(write_ids + deletes)
                    self.lexical.insert_chunks(chunks)
                    self.manifest.upsert(self._record(w) for w in batch.writes)
                    self.manifest.delete(deletes)
                    self.manifest.relocate(batch.relocate)
                    self.manifest.files.forget(sources_abs=batch.forget_files)
                    self.manifest.files.put(batch.files)
                    self.manifest.intents.clear(i[0] for i in intents)
            except StoreError:
                raise
            except Exception as exc:
                if self._check_dense():
                    raise StoreError(f"store write failed: {self.dense_damage}") from exc
                if _DENSE_READ.search(str(exc)):
                    raise StoreError(f"store write failed: the dense index cannot be read ({type(exc).__name__}: "
                                     f"{exc}); `copilot documents reindex` rebuilds it from the stored chunks") from exc
                full = "" if disk_full(exc) or not self.reserve.low() else \
                    f" (the disk under {self.data_dir} is full: {self.reserve.free()} bytes free)"
                raise StoreError(f"store write failed: {type(exc).__name__}: {exc}{full}") from exc
        return ApplyResult(len(batch.writes), len(chunks), len(deletes), embed_s)

    def _record(self, w: DocumentWrite) -> DocumentRecord:
        meta = w.document.metadata
        created = meta.get("created_ts")
        return DocumentRecord(
            doc_id=w.document.doc_id, source=w.document.source, source_abs=w.source_abs,
            doc_type=str(meta.get("doc_type")) if meta.get("doc_type") else None,
            title=str(meta.get("title")) if meta.get("title") is not None else None,
            key=str(meta.get("key")) if meta.get("key") is not None else None,
            created_ts=created if isinstance(created, int) and not isinstance(created, bool) else None,
            content_hash=w.document.content_hash, index_sig=self.index_signature,
            n_chunks=len(w.chunks), chroma_extent=len(w.chunks),
        )

    def upsert_documents(self, docs: Sequence[Document], source_abs: str | None = None) -> ApplyResult:
        """Chunk, embed and write ``docs`` (unchanged ones skipped). For programmatic use and tests."""
        states = self.manifest.get([d.doc_id for d in docs])
        sig = self.index_signature
        writes = [DocumentWrite(d, self.chunker.chunk(d), source_abs) for d in docs
                  if d.doc_id not in states or states[d.doc_id].content_hash != d.content_hash
                  or states[d.doc_id].index_sig != sig]
        return self.apply(WriteBatch(writes=writes))

    def recover(self) -> list[str]:
        """Resolve intent rows left by a killed run; returns the affected doc ids.

        Interrupted writes: an existing document is marked stale (its content hash cleared, so
        the next ingest of its source rewrites it); a new one has its partial Chroma records
        deleted. Interrupted deletions are completed, unless they never began (every chunk still
        in the dense index: the batch failed before, e.g. on a full disk): then the document is
        kept. File fingerprints of affected sources are dropped so those files are parsed again.
        """
        with self.write_lock:
            pending = self.manifest.intents.unresolved()
            if not pending:
                return []
            log.warning("recovering %d document(s) from an interrupted ingest", len(pending))
            existing = self.manifest.get([p[0] for p in pending])
            kept = {p[0] for p in pending if p[1] == "delete" and self._untouched(existing.get(p[0]))}
            to_purge = [make_chunk_id(doc_id, i) for doc_id, op, extent, _, _ in pending if doc_id not in kept
                        and (op == "delete" or doc_id not in existing) for i in range(extent)]
            if to_purge and not self.dense_damage:
                self.dense.delete(to_purge)
            with self.transaction():
                for doc_id, op, extent, source, source_abs in pending:
                    if op == "delete" and doc_id not in kept:
                        self.lexical.delete_documents([doc_id])
                        self.manifest.delete([doc_id])
                    elif op != "delete" and doc_id in existing:
                        self.manifest.mark_stale(doc_id, extent)
                    self.manifest.files.forget(sources=[source] if source else [],
                                               sources_abs=[source_abs] if source_abs else [])
                self.manifest.intents.clear(p[0] for p in pending)
            return [p[0] for p in pending]

    def _untouched(self, rec: DocumentRecord | None) -> bool:
        """Whether a stored document's chunks are all still in the dense index (no deletion began)."""
        ids = [make_chunk_id(rec.doc_id, i) for i in range(rec.n_chunks)] if rec is not None else []
        if self.dense_damage:  # cannot tell: keep the document (deleting it again is the user's choice)
            return bool(ids)
        return bool(ids) and len(self.dense.get_embeddings(ids)) == len(ids)

    # -- reading ----------------------------------------------------------------------------
    def dense_search(self, query: str, k: int, flt: SearchFilter | None = None) -> list[ScoredChunk]:
        """Top ``k`` chunks by cosine similarity of the query embedding (score in [-1, 1], higher is better);
        none while :attr:`dense_damage` is set (search is then lexical only)."""
        if k <= 0 or not query.strip():
            return []
        self.refresh()
        if self.dense_damage:
            return []
        vector = self.embedder.embed_array([query])[0]
        try:
            with self._dense_lock:
                hits = self.dense.query(vector, k, flt)
        except Exception as exc:  # e.g. embedded Chroma's "Error finding id" on a view another process changed
            if self._check_dense():
                return []
            log.warning("dense search failed (%s: %s); reading the dense index anew and retrying once",
                        type(exc).__name__, exc)
            self.reopen_dense()
            if self.dense_damage:
                return []
            try:
                with self._dense_lock:
                    hits = self.dense.query(vector, k, flt)
            except Exception as again:  # undetected damage (e.g. a pickle cut after a "."): off until rebuilt
                self._dense_failure = f"a search failed again after re-reading it ({type(again).__name__}: {again})"
                self._check_dense()
                return []
        canonical = self.lexical.get_chunks([h.chunk_id for h in hits])
        out: list[ScoredChunk] = []
        for hit in hits:
            chunk = canonical.get(hit.chunk_id)
            if chunk is None:  # written to Chroma but not yet committed to SQLite
                chunk = Chunk(hit.chunk_id, str(hit.metadata.get("doc_id", hit.chunk_id.rsplit("#", 1)[0])),
                              hit.text, hit.metadata)
            out.append(ScoredChunk(chunk, hit.score))
        return out

    def lexical_search(self, query: str, k: int, flt: SearchFilter | None = None) -> list[ScoredChunk]:
        """Top ``k`` chunks by BM25 (score = ``-bm25``, higher is better); any user text is accepted."""
        return [ScoredChunk(c, s) for c, s in self.lexical.search(query, k, flt)]

    def ping(self) -> None:
        """Raise StoreError if SQLite or Chroma does not answer (for readiness probes)."""
        try:
            self.db.ping()
            if not self.dense_damage:  # a damaged index is reported as such (``dense_damage``), not as down
                self.dense.heartbeat()
        except Exception as exc:
            raise StoreError(f"store unreachable: {type(exc).__name__}: {exc}") from exc


class StoreSettings(Protocol):
    """What :func:`open_store` reads from a settings object (e.g. :class:`copilot.config.Settings`)."""

    data_dir: Path
    chroma_url: str | None
    database_url: str | None
    collection: str
    embedding_model: str | None


def open_store(settings: StoreSettings, *, embedder: Embedder | None = None,
               max_chunk_tokens: int | None = None) -> "ChunkStore":
    """Open the chunk store the settings describe: the one place a store is built from settings.

    Used by ``copilot ingest`` (and ``python -m ingestion``, which runs it), the other CLI
    commands, and the service behind the web API.

    Args:
        settings: any object with ``data_dir``, ``chroma_url``, ``database_url``, ``collection``
            and ``embedding_model`` attributes.
        embedder: an already-built embedder (default: one for ``settings.embedding_model``,
            loaded lazily on first use).
        max_chunk_tokens: chunk ceiling in tokens (default: the model's maximum).
    Raises:
        StoreError: Chroma unreachable, the store was built with another embedding model, or the
            data dir is unusable (read-only, not a folder, no space even with the space reserve
            released: the OS's or SQLite's reason).
    """
    if embedder is None:
        from ingestion import embedding  # looked up at call time, so a substituted Embedder class is honoured

        embedder = embedding.Embedder(settings.embedding_model)

    def build() -> ChunkStore:
        return ChunkStore(Path(settings.data_dir), chroma_url=settings.chroma_url or None,
                          database_url=settings.database_url or None, collection=settings.collection,
                          embedder=embedder, max_chunk_tokens=max_chunk_tokens)

    try:
        try:
            return build()
        except Exception as exc:  # a full disk: open again with the space reserve released
            if settings.database_url or not (disk_full(exc) and SpaceReserve(Path(settings.data_dir)).release()):
                raise
            return build()
    except (OSError, sqlite3.Error) as exc:
        folder = os.fspath(settings.data_dir)
        reason = ("it is not a folder" if os.path.exists(folder) and not os.path.isdir(folder)
                  else getattr(exc, "strerror", None) or str(exc))
        raise StoreError(f"cannot open the store in data dir {settings.data_dir}: {reason} "
                         "(it must be a writable folder: set COPILOT_DATA_DIR)") from exc
