"""Dense vectors in a Chroma collection (embedded PersistentClient or a ``chroma run`` server).

Embeddings are computed by us (the collection has no embedding function) and stored
with cosine distance; scores returned are cosine similarities (``1 - distance``).
Every write is split into batches no larger than the client's ``get_max_batch_size()``.
Metadata is sanitised for Chroma: None and empty lists dropped, lists kept as lists of
strings (filterable with ``$contains``), other non-scalars as JSON strings.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from ingestion.documents import SearchFilter
from ingestion.errors import StoreError
from ingestion.stores.dense import DenseHit

log = logging.getLogger(__name__)


_INT64 = 2**63


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


def build_where(flt: SearchFilter | None) -> dict[str, Any] | None:
    """Translate a :class:`SearchFilter` into a Chroma ``where`` clause (None = no filter)."""
    if flt is None:
        return None
    conditions: list[dict[str, Any]] = []
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
    return chromadb.PersistentClient(path=str(path), settings=settings)


class ChromaStore:
    """One Chroma collection holding chunk vectors, texts and sanitised metadata.

    Args:
        path: folder for the embedded PersistentClient (ignored when ``url`` is given).
        url: Chroma server URL, e.g. ``http://127.0.0.1:8123``.
        collection: collection name (3-512 chars of ``[a-zA-Z0-9._-]``).
        embedding_model: recorded in the collection metadata; opening a collection built
            with another model raises StoreError.
    Raises:
        StoreError: the server is unreachable or the collection belongs to another model.
    """

    def __init__(self, path: Path | None, url: str | None, collection: str, embedding_model: str) -> None:
        self.url = url
        self.path = path
        self.collection_name = collection
        self.embedding_model = embedding_model
        if url:
            parse_url(url)  # ValueError for a malformed URL, before any connection attempt
        self._max_batch: int | None = None
        self._open()

    def _open(self) -> None:
        try:
            self.client = make_client(self.path, self.url)
            self.collection = self.client.get_or_create_collection(
                self.collection_name, embedding_function=None,
                configuration={"hnsw": {"space": "cosine"}},
                metadata={"embedding_model": self.embedding_model},
            )
        except Exception as exc:  # chromadb raises assorted connection/validation errors
            where = self.url or str(self.path)
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
        log.info("re-opening the embedded Chroma at %s: another process changed it", self.path)
        self.client.close()
        self._open()

    @property
    def max_batch_size(self) -> int:
        """Largest number of records one add/upsert/delete call may carry (from the client)."""
        if self._max_batch is None:
            self._max_batch = int(self.client.get_max_batch_size())
        return self._max_batch

    def upsert(self, ids: Sequence[str], embeddings: np.ndarray, texts: Sequence[str],
               metadatas: Sequence[dict[str, Any]]) -> None:
        """Insert or replace records, in batches of at most :attr:`max_batch_size`."""
        size = self.max_batch_size
        for part in _batches(len(ids), size):
            self.collection.upsert(
                ids=list(ids[part]), embeddings=embeddings[part], documents=list(texts[part]),
                metadatas=[sanitize_metadata(m) for m in metadatas[part]],
            )

    def delete(self, ids: Sequence[str]) -> None:
        """Delete records by id (missing ids are ignored), in batches."""
        ids = list(ids)
        for part in _batches(len(ids), self.max_batch_size):
            self.collection.delete(ids=ids[part])

    def query(self, embedding: Sequence[float] | np.ndarray, k: int, flt: SearchFilter | None = None) -> list[DenseHit]:
        """The ``k`` nearest chunks by cosine similarity, best first."""
        if k <= 0:
            return []
        result = self.collection.query(
            query_embeddings=np.asarray([embedding], dtype=np.float32), n_results=int(k),
            where=build_where(flt), include=["distances", "documents", "metadatas"],
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
            got = self.collection.get(include=[], limit=size, offset=offset)
            out.extend(got["ids"])
            if len(got["ids"]) < size:
                return out
            offset += size

    def count(self) -> int:
        """Number of records in the collection."""
        return int(self.collection.count())

    def heartbeat(self) -> None:
        """Raise if the Chroma client or server does not answer."""
        self.client.heartbeat()
