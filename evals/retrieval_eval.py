"""Retrieval eval: recall@k (k = 1, 5, 10) and MRR of the expected source document, and where
the asked-for span stands among the evidence lines the operator (and the model) reads first.

Ranks are over documents, as the service cites them (one source per document, numbered by
its first chunk in the retrieved order), for dense, BM25 and hybrid retrieval. Hybrid fuses
per document (weighted RRF over each document's best chunk rank, see
:mod:`copilot.search.retrieval`), and a document's first chunk stands at its fused rank, so
first appearance in the chunk list is the document ranking.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from copilot.search.retrieval import HybridRetriever
from evals.questions import Question

if TYPE_CHECKING:
    from copilot.service import CopilotService

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


def run_evidence(service: CopilotService, questions: list[Question]) -> dict:
    """Copy questions only (an answerable question whose span a right answer quotes): how often
    the span is in the first source's first evidence line, in the expected source's first line,
    and in any evidence line shown, with the sources the service picks (no model call).

    Returns:
        ``{"copy": n, "first_source_first_line": k, "expected_first_line": k, "any_line": k,
        "per_question": [{"id", "first_source_first_line", "expected_first_line", "any_line"}]}``.
    """
    rows = []
    for q in questions:
        if not (q.copy and q.answerable and q.answer_span and not q.first):
            continue
        sources = service.search(q.question)
        expected = next((s for s in sources if q.matches(s.doc_id)), None)
        span = q.answer_span
        rows.append({
            "id": q.id,
            "first_source_first_line": bool(sources and sources[0].highlights and span in sources[0].highlights[0]),
            "expected_first_line": bool(expected and expected.highlights and span in expected.highlights[0]),
            "any_line": any(span in h for s in sources for h in s.highlights),
        })
    keys = ("first_source_first_line", "expected_first_line", "any_line")
    return {"copy": len(rows), **{k: sum(r[k] for r in rows) for k in keys}, "per_question": rows}
