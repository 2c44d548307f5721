"""Retrieval eval: recall@k (k = 1, 5, 10) and MRR of the expected source document.

Ranks are over documents, as the service cites them (one source per document, numbered by
its first chunk in the retrieved order), for dense, BM25 and hybrid retrieval. Hybrid fuses
per document (weighted RRF over each document's best chunk rank, see
:mod:`copilot.retrieval`), and a document's first chunk stands at its fused rank, so
first appearance in the chunk list is the document ranking.
"""

from __future__ import annotations

from copilot.retrieval import HybridRetriever
from evals.questions import Question

KS = (1, 5, 10)


def doc_ranking(retriever: HybridRetriever, question: str, mode: str, depth: int = 10) -> list[str]:
    """The first ``depth`` distinct document ids in rank order (chunks collapsed to their
    document); asks for more chunks while a document's extra chunks crowd out the ``depth``-th."""
    want = depth * 3
    while True:
        passages = retriever.retrieve(question, want, mode=mode)
        docs = list(dict.fromkeys(p.chunk.doc_id for p in passages))
        if len(docs) >= depth or len(passages) < want:
            return docs[:depth]
        want *= 2


def run_retrieval(retriever: HybridRetriever, questions: list[Question]) -> dict:
    """Returns ``{"recall": {mode: {"@1", "@5", "@10"}}, "mrr": {mode: x}, "per_question": [...]}``."""
    out: dict = {"recall": {}, "mrr": {}, "per_question": []}
    ranks: dict[str, list[int | None]] = {}
    for mode in ("dense", "bm25", "hybrid"):
        ranks[mode] = []
        for q in questions:
            docs = doc_ranking(retriever, q.question, mode)
            rank = next((i + 1 for i, d in enumerate(docs) if q.matches(d)), None)
            ranks[mode].append(rank)
        n = len(questions)
        out["recall"][mode] = {f"@{k}": round(sum(1 for r in ranks[mode] if r and r <= k) / n, 3) for k in KS}
        out["mrr"][mode] = round(sum(1 / r for r in ranks[mode] if r) / n, 3)
    for i, q in enumerate(questions):
        out["per_question"].append({"id": q.id, "source": q.source, **{m: ranks[m][i] for m in ranks}})
    return out
