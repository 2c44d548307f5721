"""What the store needs of a dense (vector) index: Chroma or pgvector behind one interface."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ingestion.documents import SearchFilter


@dataclass(frozen=True)
class DenseHit:
    """One nearest-neighbour result: id, cosine similarity, stored chunk text and metadata."""

    chunk_id: str
    score: float
    text: str
    metadata: dict[str, Any]


class DenseIndex(Protocol):
    """Chunk vectors with their text and filterable metadata (implemented by
    :class:`ingestion.stores.chroma_store.ChromaStore` and
    :class:`ingestion.stores.pgvector_store.PgVectorStore`)."""

    max_batch_size: int
    """Most records one write sends to the index."""
    fresh: bool
    """The latest open found no index and created an empty one, and nothing was written to it since."""

    def upsert(self, ids: Sequence[str], embeddings: np.ndarray, texts: Sequence[str],
               metadatas: Sequence[dict[str, Any]]) -> None:
        """Insert or replace records; ``embeddings`` is float32 of shape (len(ids), dim), rows L2-normalised."""

    def delete(self, ids: Sequence[str]) -> None:
        """Delete records by id (missing ids are ignored)."""

    def query(self, embedding: Sequence[float] | np.ndarray, k: int, flt: SearchFilter | None = None) -> list[DenseHit]:
        """The ``k`` nearest chunks by cosine similarity that pass ``flt``, best first."""

    def get_embeddings(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors by id (missing ids absent)."""

    def all_ids(self) -> list[str]:
        """Every stored id."""

    def count(self) -> int:
        """Number of records."""

    def heartbeat(self) -> None:
        """Raise if the index does not answer."""

    def reopen(self) -> None:
        """Drop cached state and read the index anew (after another process wrote to it)."""

    def close(self) -> None:
        """Release the index's client (the index is unusable afterwards)."""

    def damage(self) -> str | None:
        """Why the index's files cannot be read, in one line naming the file; None when they can."""

    def reset(self) -> None:
        """Drop every record, damaged files included, leaving an empty index (for a rebuild)."""

    def purge(self, compact: bool = False) -> list[str]:
        """After deletions: remove deleted records' bytes from the index's files (``compact``: and
        rewrite the files without free space); returns warnings for what could not be removed
        (e.g. a server's files)."""
