"""Weighted, document-level reciprocal rank fusion (no models: a fake store ranks chunks)."""

from __future__ import annotations

import pytest

from copilot.search import retrieval
from copilot.search.retrieval import BM25_WEIGHT, DENSE_WEIGHT, RRF_K, HybridRetriever, rrf_fuse
from ingestion.documents import Chunk, ScoredChunk, SearchFilter


def _doc(cid: str) -> str:
    return cid.rsplit("#", 1)[0]


# ---------------------------------------------------------------------------- rrf_fuse


def test_plain_rrf_matches_the_formula():
    scores = rrf_fuse([["a", "b", "c"], ["b", "a"]], k=60)
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["c"] == pytest.approx(1 / 63)
    assert rrf_fuse([]) == {} and rrf_fuse([[], []]) == {}


def test_default_k_is_cormacks_60_and_weights_default_to_one():
    assert rrf_fuse([["a"], ["b", "a"]]) == rrf_fuse([["a"], ["b", "a"]], 60, [1.0, 1.0])


def test_weights_scale_each_ranking():
    scores = rrf_fuse([["a", "b"], ["b", "a"]], k=10, weights=[1.0, 2.0])
    assert scores["a"] == pytest.approx(1 / 11 + 2 / 12)
    assert scores["b"] == pytest.approx(1 / 12 + 2 / 11)
    assert scores["b"] > scores["a"]  # the heavier ranking decides a swap
    flipped = rrf_fuse([["a", "b"], ["b", "a"]], k=10, weights=[2.0, 1.0])
    assert flipped["a"] > flipped["b"]


def test_zero_weight_ignores_a_ranking_but_keeps_its_ids():
    scores = rrf_fuse([["a", "b"], ["z", "b", "a"]], k=1, weights=[1.0, 0.0])
    assert scores["a"] > scores["b"] > scores["z"] == 0.0


def test_k_sets_how_much_the_top_rank_dominates():
    # a is first in one ranking only; b is second in both
    low = rrf_fuse([["a", "b"], ["c", "b", "d", "a"]], k=1)
    high = rrf_fuse([["a", "b"], ["c", "b", "d", "a"]], k=100)
    assert low["a"] > low["b"]  # small k: a single first place wins
    assert high["b"] > high["a"]  # large k: agreement wins


def test_ties_keep_first_appearance_order():
    scores = rrf_fuse([["a", "b"], ["b", "a"]], k=60)
    assert scores["a"] == scores["b"]
    assert list(scores) == ["a", "b"]
    assert sorted(scores, key=lambda x: -scores[x]) == ["a", "b"]  # stable sort: earlier ranking wins
    assert list(rrf_fuse([["x"], ["y"]])) == ["x", "y"]


def test_an_id_repeated_in_one_ranking_counts_once_at_its_best_rank():
    assert rrf_fuse([["a", "b", "a"]], k=0) == pytest.approx({"a": 1.0, "b": 0.5})


@pytest.mark.parametrize("weights,k", [([1.0], 60), ([1.0, -1.0], 60), ([1.0, 1.0, 1.0], 60), (None, -1)])
def test_bad_weights_or_k_are_refused(weights, k):
    with pytest.raises(ValueError):
        rrf_fuse([["a"], ["b"]], k, weights)


# ---------------------------------------------------------------------------- document level


def test_group_takes_each_documents_best_chunk_rank_per_ranking():
    dense = ["A#0", "B#0", "A#1", "C#0"]
    bm25 = ["B#3", "A#2", "B#0"]
    docs = rrf_fuse([dense, bm25], k=10, weights=[1.0, 2.0], group=_doc)
    # ranks are positions in the chunk ranking, not among documents (C is 4th, not 3rd)
    assert docs == pytest.approx({"A": 1 / 11 + 2 / 12, "B": 1 / 12 + 2 / 11, "C": 1 / 14})


def test_document_fusion_is_not_fooled_by_retrievers_picking_different_chunks():
    # dense and BM25 both put document A first but through different chunks; chunk-level
    # fusion splits A's credit and lets B (second in both, same chunk) win
    dense, bm25 = ["A#0", "B#0", "X#0", "A#1"], ["A#1", "B#0", "Y#0", "A#0"]
    chunk = rrf_fuse([dense, bm25], k=10)
    assert max(chunk, key=chunk.get) == "B#0"
    doc = rrf_fuse([dense, bm25], k=10, group=_doc)
    assert max(doc, key=doc.get) == "A"


def test_document_fusion_does_not_reward_chunk_count():
    # a long document with many middling chunks does not outrank a short one ranked first
    dense = ["S#0", "L#0", "L#1", "L#2", "L#3"]
    bm25 = ["S#0", "L#0", "L#1", "L#2", "L#3"]
    doc = rrf_fuse([dense, bm25], k=10, group=_doc)
    assert doc["S"] > doc["L"]


def test_chosen_constants():
    assert (RRF_K, DENSE_WEIGHT, BM25_WEIGHT) == (10, 1.0, 2.0)
    assert retrieval.CANDIDATES >= 10


# ---------------------------------------------------------------------------- HybridRetriever


def _chunk(cid: str, key: str | None = None) -> Chunk:
    doc = _doc(cid)
    return Chunk(cid, doc, f"header of {doc}\nbody of {cid}",
                 {"chunk_index": int(cid.rsplit("#", 1)[1]), "key": key or doc, "source": "s"})


class FakeStore:
    """Fixed dense and BM25 chunk rankings; a ticket-key filter keeps that document's chunks."""

    def __init__(self, dense: list[str], bm25: list[str]) -> None:
        self.dense, self.bm25 = dense, bm25

    def _hits(self, ids: list[str], k: int, flt: SearchFilter | None) -> list[ScoredChunk]:
        if flt and flt.ticket_key:
            ids = [c for c in ids if _doc(c) == flt.ticket_key]
        return [ScoredChunk(_chunk(c), 1.0 - i / 100) for i, c in enumerate(ids[:k])]

    def dense_search(self, query: str, k: int, flt: SearchFilter | None = None) -> list[ScoredChunk]:
        return self._hits(self.dense, k, flt)

    def lexical_search(self, query: str, k: int, flt: SearchFilter | None = None) -> list[ScoredChunk]:
        return self._hits(self.bm25, k, flt)


def _docs(passages) -> list[str]:
    return list(dict.fromkeys(p.chunk.doc_id for p in passages))


def test_retriever_defaults_are_the_named_constants():
    r = HybridRetriever(FakeStore([], []))
    assert (r.rrf_k, r.dense_weight, r.bm25_weight, r.candidates) == (RRF_K, DENSE_WEIGHT, BM25_WEIGHT,
                                                                       retrieval.CANDIDATES)


def test_hybrid_ranks_documents_by_document_level_fusion():
    dense = ["A#0", "B#0", "A#1", "C#0", "D#0"]
    bm25 = ["A#1", "B#0", "C#0", "A#0", "D#0"]
    passages = HybridRetriever(FakeStore(dense, bm25)).retrieve("q", 10)
    assert _docs(passages) == ["A", "B", "C", "D"]
    expected = rrf_fuse([dense, bm25], RRF_K, [DENSE_WEIGHT, BM25_WEIGHT], group=_doc)
    assert passages[0].score == pytest.approx(expected["A"])  # the lead chunk carries its document's score
    assert [p.n for p in passages] == list(range(1, len(passages) + 1))
    assert [p.score for p in passages] == sorted((p.score for p in passages), reverse=True)
    assert len({p.chunk.chunk_id for p in passages}) == len(passages) == 5


def test_bm25_outweighs_dense_on_a_swap():
    passages = HybridRetriever(FakeStore(["A#0", "B#0"], ["B#0", "A#0"])).retrieve("q", 5)
    assert _docs(passages) == ["B", "A"]
    equal = HybridRetriever(FakeStore(["A#0", "B#0"], ["B#0", "A#0"]), bm25_weight=1.0).retrieve("q", 5)
    assert _docs(equal) == ["A", "B"]  # a tie keeps the first ranking's (dense) order


def test_a_documents_other_chunks_follow_its_best_chunk():
    dense = ["A#0", "B#0", "A#2", "A#1"]
    bm25 = ["A#0", "B#0", "A#1", "A#2"]
    passages = HybridRetriever(FakeStore(dense, bm25)).retrieve("q", 10)
    ids = [p.chunk.chunk_id for p in passages]
    assert ids[0] == "A#0" and ids.index("B#0") < ids.index("A#1")  # extra chunks keep their own score
    src_a = [p for p in passages if p.chunk.doc_id == "A"]
    assert max(p.score for p in src_a) == passages[0].score
    assert all(p.score < passages[0].score for p in src_a[1:])


def test_single_modes_keep_their_retrievers_document_order():
    dense = ["C#0", "A#0", "C#1", "B#0"]
    bm25 = ["B#0", "B#1", "A#0"]
    store = FakeStore(dense, bm25)
    assert _docs(HybridRetriever(store).retrieve("q", 10, mode="dense")) == ["C", "A", "B"]
    assert _docs(HybridRetriever(store).retrieve("q", 10, mode="bm25")) == ["B", "A"]


def test_top_k_truncates_chunks_and_can_exceed_the_store():
    store = FakeStore(["A#0", "B#0", "C#0"], ["C#0", "B#0"])
    assert len(HybridRetriever(store).retrieve("q", 2)) == 2
    assert len(HybridRetriever(store).retrieve("q", 100)) == 3
    assert HybridRetriever(FakeStore([], [])).retrieve("q", 5) == []


def test_a_named_key_still_ranks_its_document_first():
    dense = ["A#0", "B#0", "OPS-7#0", "OPS-7#1"]
    bm25 = ["A#0", "B#0", "OPS-7#1"]
    passages = HybridRetriever(FakeStore(dense, bm25)).retrieve("what was done in OPS-7?", 10)
    assert _docs(passages)[0] == "OPS-7"
    assert passages[0].score > 1.0 > passages[-1].score  # above every fused score
    # the boost is hybrid-only
    assert _docs(HybridRetriever(FakeStore(dense, bm25)).retrieve("OPS-7?", 10, mode="bm25"))[0] == "A"


def test_two_named_keys_rank_in_question_order():
    dense = ["A#0", "OPS-2#0", "OPS-1#0"]
    bm25 = ["A#0", "OPS-1#0", "OPS-2#0"]
    passages = HybridRetriever(FakeStore(dense, bm25)).retrieve("compare OPS-2 and OPS-1", 10)
    assert _docs(passages)[:3] == ["OPS-2", "OPS-1", "A"]
