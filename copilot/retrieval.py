"""Hybrid retrieval: dense (Chroma) + BM25 (FTS5) fused by reciprocal rank fusion.

RRF (Cormack, Clarke & Büttcher, SIGIR 2009): score(d) = Σ_r 1 / (k + rank_r(d)).
A question that names a ticket key (``OPS-107``, ``GGUS-165432``) or an ELOG message
number ("message 12", "MID 12", "entry #12") puts that document's chunks first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ingestion.documents import Chunk, SearchFilter
from ingestion.store import ChunkStore

_TICKET_KEY = re.compile(r"\b([A-Z][A-Z0-9]{1,15}-\d{1,9})\b")
_ELOG_MID = re.compile(r"\b(?:message|msg|mid|entry|elog)\s*(?:#|no\.?|number)?\s*(\d{1,7})\b", re.IGNORECASE)


@dataclass(frozen=True)
class Passage:
    """A retrieved chunk, numbered as the prompt cites it.

    Attributes:
        n: 1-based citation number (``[n]`` in the answer).
        chunk: the chunk (id, document id, text, metadata).
        score: fused RRF score (higher is better; key matches rank above everything).
    """

    n: int
    chunk: Chunk
    score: float

    @property
    def source(self) -> str:
        return str(self.chunk.metadata.get("source", ""))

    @property
    def title(self) -> str:
        return str(self.chunk.metadata.get("title") or "")

    def snippet(self, chars: int = 240) -> str:
        text = " ".join(self.chunk.text.split())
        return text if len(text) <= chars else text[: chars - 1] + "…"


def named_keys(question: str) -> list[str]:
    """Ticket keys and ELOG message numbers named in the question, in order, deduplicated."""
    keys = [m.group(1) for m in _TICKET_KEY.finditer(question)]
    keys += [m.group(1) for m in _ELOG_MID.finditer(question)]
    return list(dict.fromkeys(keys))


def rrf_fuse(rankings: list[list[str]], k: int = 60) -> dict[str, float]:
    """Reciprocal rank fusion of several rankings of ids (best first) → id → score."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, cid in enumerate(ranking, start=1):
            scores[cid] = scores.get(cid, 0.0) + 1.0 / (k + rank)
    return scores


class HybridRetriever:
    """Dense + lexical retrieval over a :class:`ChunkStore`.

    Args:
        store: the chunk store.
        candidates: hits fetched from each retriever before fusion (>= top_k).
        rrf_k: the RRF constant.
    """

    def __init__(self, store: ChunkStore, candidates: int = 30, rrf_k: int = 60) -> None:
        self.store = store
        self.candidates = candidates
        self.rrf_k = rrf_k

    def retrieve(self, question: str, top_k: int, flt: SearchFilter | None = None,
                 mode: str = "hybrid") -> list[Passage]:
        """The ``top_k`` best passages for ``question`` (fewer when the store is smaller).

        Args:
            question: free text.
            top_k: passages wanted (>= 1); more than the collection holds is fine.
            flt: metadata filter applied to both retrievers.
            mode: ``"hybrid"``, ``"dense"`` or ``"bm25"``.
        """
        n = max(self.candidates, top_k)
        chunks: dict[str, Chunk] = {}
        rankings: list[list[str]] = []
        if mode in ("hybrid", "dense"):
            hits = self.store.dense_search(question, n, flt)
            rankings.append([h.chunk.chunk_id for h in hits])
            chunks.update((h.chunk.chunk_id, h.chunk) for h in hits)
        if mode in ("hybrid", "bm25"):
            hits = self.store.lexical_search(question, n, flt)
            rankings.append([h.chunk.chunk_id for h in hits])
            chunks.update((h.chunk.chunk_id, h.chunk) for h in hits)
        scores = rrf_fuse(rankings, self.rrf_k)
        if mode == "hybrid":
            self._boost_named(question, flt, chunks, scores)
        ranked = sorted(scores, key=lambda cid: -scores[cid])[:top_k]
        return [Passage(i + 1, chunks[cid], scores[cid]) for i, cid in enumerate(ranked)]

    def _boost_named(self, question: str, flt: SearchFilter | None, chunks: dict[str, Chunk],
                     scores: dict[str, float]) -> None:
        """Put the chunks of documents the question names by key above every fused score."""
        base = flt or SearchFilter()
        for rank, key in enumerate(named_keys(question)):
            keyed = SearchFilter(base.doc_types, base.source, key, base.since_ts, base.until_ts)
            hits = self.store.lexical_search(question, self.candidates, keyed) or \
                self.store.dense_search(question, self.candidates, keyed)
            for i, h in enumerate(hits):
                chunks[h.chunk.chunk_id] = h.chunk
                scores[h.chunk.chunk_id] = 10.0 - rank - i * 1e-3
