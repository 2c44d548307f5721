"""Dense vectors in PostgreSQL with pgvector: the shared store's dense index.

Table ``dense_chunks`` (in the store's schema): chunk id, ``vector(dim)`` embedding, text,
the filter columns (doc_type, source, key, created_ts) and the metadata as JSON. The table
and its HNSW index (``vector_cosine_ops``; Malkov & Yashunin, "Efficient and robust
approximate nearest neighbor search using Hierarchical Navigable Small World graphs", 2018)
are created on the first write, when the dimension is known. Scores are cosine similarities
(``1 - (embedding <=> query)``).

A filtered query is answered exactly (the index scan is switched off for it): pgvector
applies ``WHERE`` after the HNSW search, which can return fewer than ``k`` rows of a small
filtered set, while the filter columns' own indexes keep the exact scan cheap.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ingestion.documents import SearchFilter
from ingestion.errors import StoreError
from ingestion.stores.database import PostgresDatabase
from ingestion.stores.dense import DenseHit
from ingestion.stores.lexical_index import filter_sql

log = logging.getLogger(__name__)

TABLE = "dense_chunks"
EF_SEARCH_MIN = 64
"""``hnsw.ef_search`` floor (pgvector's default is 40); raised to 2k for larger ``k``."""


def _vector_literal(vector: np.ndarray | Sequence[float]) -> str:
    """pgvector's text form ``[0.1,0.2,...]`` (cast with ``::vector`` in SQL)."""
    return "[" + ",".join(repr(float(x)) for x in np.asarray(vector, dtype=np.float32).ravel()) + "]"


class PgVectorStore:
    """Chunk vectors, texts and metadata in one pgvector table of the store's PostgreSQL schema.

    Args:
        db: the store's PostgreSQL database (the ``vector`` extension is created if missing;
            that needs a role allowed to create it, or an administrator who did). Which
            embedding model the vectors come from is checked by the store's manifest.
    Raises:
        StoreError: the ``vector`` extension is not available on the server.
    """

    max_batch_size = 1000

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        try:
            db.executescript("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
        except Exception as exc:
            raise StoreError(f"PostgreSQL at {db.location} has no pgvector extension ({exc}); install pgvector "
                             "there, or keep the dense index in a Chroma server (COPILOT_CHROMA_URL)") from exc
        self._dim = self._table_dim()
        self.fresh = self._dim is None

    def _table_dim(self) -> int | None:
        row = self.db.query_one(
            "SELECT a.atttypmod FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = ? AND c.relname = ? AND a.attname = 'embedding'", (self.db.schema, TABLE))
        return None if row is None else int(row[0])

    def _create(self, dim: int) -> None:
        self.db.executescript(
            f"CREATE TABLE IF NOT EXISTS {TABLE} (chunk_id TEXT PRIMARY KEY, embedding vector({dim}) NOT NULL, "
            "text TEXT NOT NULL, metadata_json TEXT NOT NULL, doc_id TEXT, doc_type TEXT, source TEXT, key TEXT, "
            "created_ts BIGINT);"
            f"CREATE INDEX IF NOT EXISTS {TABLE}_hnsw ON {TABLE} USING hnsw (embedding vector_cosine_ops);"
            f"CREATE INDEX IF NOT EXISTS {TABLE}_doc_type ON {TABLE}(doc_type);"
            f"CREATE INDEX IF NOT EXISTS {TABLE}_key ON {TABLE}(key);"
            f"CREATE INDEX IF NOT EXISTS {TABLE}_source ON {TABLE}(source);")
        self._dim = dim

    def upsert(self, ids: Sequence[str], embeddings: np.ndarray, texts: Sequence[str],
               metadatas: Sequence[dict[str, Any]]) -> None:
        """Insert or replace records (``embeddings``: float32, shape (len(ids), dim)).

        Raises:
            StoreError: the vectors' dimension differs from the table's.
        """
        if not len(ids):
            return
        dim = int(embeddings.shape[1])
        if self._dim is None:
            self._create(dim)
            self.fresh = False
        elif dim != self._dim:
            raise StoreError(f"embedding dimension {dim} differs from the pgvector table's {self._dim}")
        rows = []
        for cid, vec, text, meta in zip(ids, embeddings, texts, metadatas):
            created = meta.get("created_ts")
            rows.append((cid, _vector_literal(vec), text, json.dumps(meta, ensure_ascii=False, default=str),
                         meta.get("doc_id"), meta.get("doc_type"), meta.get("source"), meta.get("key"),
                         created if isinstance(created, int) and not isinstance(created, bool) else None))
        self.db.executemany(
            f"INSERT INTO {TABLE}(chunk_id, embedding, text, metadata_json, doc_id, doc_type, source, key, created_ts) "
            "VALUES (?, ?::vector, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (chunk_id) DO UPDATE SET "
            "embedding = excluded.embedding, text = excluded.text, metadata_json = excluded.metadata_json, "
            "doc_id = excluded.doc_id, doc_type = excluded.doc_type, source = excluded.source, key = excluded.key, "
            "created_ts = excluded.created_ts", rows)

    def delete(self, ids: Sequence[str]) -> None:
        """Delete records by id (missing ids are ignored)."""
        if self._dim is None or not ids:
            return
        self.db.executemany(f"DELETE FROM {TABLE} WHERE chunk_id = ?", [(i,) for i in ids])

    def query(self, embedding: Sequence[float] | np.ndarray, k: int, flt: SearchFilter | None = None) -> list[DenseHit]:
        """The ``k`` nearest chunks by cosine similarity that pass ``flt`` (exact when filtered, HNSW
        otherwise), best first; source folders are matched in SQL (:func:`filter_sql`)."""
        if k <= 0 or flt is not None and flt.match_none or self._refresh_dim() is None:
            return []
        where, params = filter_sql(flt)
        with self.db.transaction():
            if where:
                self.db.execute("SET LOCAL enable_indexscan = off")
            else:
                self.db.execute(f"SET LOCAL hnsw.ef_search = {max(EF_SEARCH_MIN, 2 * int(k))}")
            rows = self.db.query(
                f"SELECT chunk_id, 1 - (embedding <=> ?::vector), text, metadata_json FROM {TABLE} c "
                f"WHERE TRUE{where} ORDER BY embedding <=> ?::vector, chunk_id LIMIT ?",
                [_vector_literal(embedding), *params, _vector_literal(embedding), int(k)])
        return [DenseHit(r[0], float(r[1]), r[2], json.loads(r[3])) for r in rows]

    def _refresh_dim(self) -> int | None:
        """The table's dimension; looked up again while unknown (another replica may have created it)."""
        if self._dim is None:
            self._dim = self._table_dim()
        return self._dim

    def get_embeddings(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors by id (missing ids absent)."""
        if self._refresh_dim() is None:
            return {}
        out: dict[str, np.ndarray] = {}
        ids = list(ids)
        for start in range(0, len(ids), self.max_batch_size):
            part = ids[start:start + self.max_batch_size]
            rows = self.db.query(f"SELECT chunk_id, embedding::text FROM {TABLE} "
                                 f"WHERE chunk_id IN ({','.join('?' * len(part))})", part)
            out.update((r[0], np.asarray(json.loads(r[1]), dtype=np.float32)) for r in rows)
        return out

    def all_ids(self) -> list[str]:
        """Every stored chunk id."""
        if self._refresh_dim() is None:
            return []
        return [r[0] for r in self.db.query(f"SELECT chunk_id FROM {TABLE} ORDER BY chunk_id")]

    def count(self) -> int:
        """Number of stored vectors."""
        if self._refresh_dim() is None:
            return 0
        return int(self.db.query(f"SELECT COUNT(*) FROM {TABLE}")[0][0])

    def heartbeat(self) -> None:
        """Raise if PostgreSQL does not answer."""
        self.db.ping()

    def reopen(self) -> None:
        """Nothing to drop: every query reads the server's current state."""
        self.fresh = self._refresh_dim() is None

    def close(self) -> None:
        """Nothing of its own: the table is read through the store's database, closed with it."""

    def damage(self) -> str | None:
        """None: PostgreSQL checks its own files."""
        return None

    def reset(self) -> None:
        """Drop the table (created again by the next upsert)."""
        self.db.executescript(f"DROP TABLE IF EXISTS {TABLE}")
        self._dim = None

    def purge(self, compact: bool = False) -> list[str]:
        """After deletions: plain ``VACUUM`` of the table (dead rows and their HNSW and filter
        index entries removed; PostgreSQL leaves the freed space unzeroed until reused, and its
        WAL keeps the rows for as long as the server retains WAL); ``compact``: ``VACUUM FULL``
        (rewritten into new files, the old ones removed). No warnings."""
        if compact:
            self.db.compact([TABLE])
        else:
            self.db.reclaim([TABLE])
        return []

