"""Hybrid retrieval over the sample corpus: metadata filters, key lookup, k > collection, LangChain."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from copilot.search.filters import Filters
from copilot.search.langchain_retriever import OpsCopilotRetriever
from copilot.search.retrieval import named_keys
from ingestion.documents import SearchFilter

pytestmark = pytest.mark.slow

Q = "transfers failing with SRM_AUTHORIZATION_FAILURE, certificate or disk problems"


@pytest.fixture(scope="module")
def retriever(sample_service):
    return sample_service.searcher.retriever


def _ts(day: str) -> int:
    return int(datetime.fromisoformat(day).replace(tzinfo=timezone.utc).timestamp())


def test_doc_type_filter(retriever):
    hits = retriever.retrieve(Q, 20, SearchFilter(doc_types=("jira",)))
    assert hits and {h.chunk.metadata["doc_type"] for h in hits} == {"jira"}
    both = retriever.retrieve(Q, 40, SearchFilter(doc_types=("elog", "csv_ticket")))
    assert {h.chunk.metadata["doc_type"] for h in both} == {"elog", "csv_ticket"}


def test_source_filter(retriever):
    hits = retriever.retrieve(Q, 20, SearchFilter(source="logbooks/facility.elog"))
    assert hits and {h.chunk.metadata["source"] for h in hits} == {"logbooks/facility.elog"}
    assert retriever.retrieve(Q, 5, SearchFilter(source="no/such/file.elog")) == []


def test_ticket_key_filter(retriever):
    hits = retriever.retrieve("what happened", 10, SearchFilter(ticket_key="OPS-105"))
    assert hits and {h.chunk.doc_id for h in hits} == {"tickets/jira_export.json#OPS-105"}


def test_date_range_filter_is_inclusive(retriever):
    flt = Filters(since="2026-01-20", until="2026-01-20").to_search_filter()
    hits = retriever.retrieve(Q, 50, flt)
    assert hits
    for h in hits:
        assert _ts("2026-01-20") <= h.chunk.metadata["created_ts"] < _ts("2026-01-21"), h.chunk.doc_id
    # the shift log of that day and the OPS-110 ticket (created that day) are in range
    docs = {h.chunk.doc_id for h in hits}
    assert "tickets/jira_export.json#OPS-110" in docs
    # the same day written as a compact date (was read as epoch seconds: 1970)
    compact = Filters(since="20260120", until="20260120").to_search_filter()
    assert compact == flt and {h.chunk.doc_id for h in retriever.retrieve(Q, 50, compact)} == docs


def test_filters_combine(retriever):
    flt = SearchFilter(doc_types=("jira",), since_ts=_ts("2026-01-27"))
    hits = retriever.retrieve(Q, 50, flt)
    assert {h.chunk.doc_id.split("#")[1] for h in hits} <= {"OPS-113", "OPS-114", "OPS-115"}
    assert hits


def test_naive_and_bare_dates_mean_utc():
    f = Filters(since="2026-01-20T00:00:00", until="2026-01-20")
    assert f.since == datetime(2026, 1, 20, tzinfo=timezone.utc)
    assert f.until.date().isoformat() == "2026-01-20" and f.until.hour == 23
    with pytest.raises(ValueError, match="after"):
        Filters(since="2026-01-21", until="2026-01-20")


@pytest.mark.parametrize("question,doc_id", [
    ("What was the resolution of OPS-107?", "tickets/jira_export.json#OPS-107"),
    ("Status of GGUS-165577 please", "tickets/ggus_export.csv#GGUS-165577"),
    ("summarise ops-112 and OPS-109", "tickets/jira_export.json#OPS-109"),  # keys are case-sensitive as written
])
def test_named_ticket_key_comes_first(retriever, question, doc_id):
    assert retriever.retrieve(question, 5)[0].chunk.doc_id == doc_id


def test_named_elog_message_comes_first(retriever):
    assert named_keys("what does ELOG message 13 say?") == ["13"]
    hits = retriever.retrieve("what does ELOG message 13 say?", 5)
    assert hits[0].chunk.metadata["key"] == "13" and hits[0].chunk.metadata["doc_type"] == "elog"


def test_named_key_respects_filters(retriever):
    hits = retriever.retrieve("What was the resolution of OPS-107?", 5, SearchFilter(doc_types=("elog",)))
    assert hits and all(h.chunk.metadata["doc_type"] == "elog" for h in hits)


@pytest.mark.parametrize("mode", ["hybrid", "dense", "bm25"])
def test_top_k_larger_than_the_collection(retriever, sample_service, mode):
    total = sample_service.store.lexical.count()
    hits = retriever.retrieve("pool", 100, mode=mode)
    assert 0 < len(hits) <= total < 100
    assert [h.n for h in hits] == list(range(1, len(hits) + 1))
    assert len({h.chunk.chunk_id for h in hits}) == len(hits)
    if mode == "dense":
        assert len(hits) == total


def test_langchain_retriever(sample_service):
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    lc = OpsCopilotRetriever.from_store(sample_service.store, k=3,
                                        filters=Filters(doc_types=["jira"]))
    assert isinstance(lc, BaseRetriever)
    docs = lc.invoke("What was the resolution of OPS-107?")
    assert len(docs) == 3 and all(isinstance(d, Document) for d in docs)
    first = docs[0].metadata
    assert first["doc_id"] == "tickets/jira_export.json#OPS-107" and first["n"] == 1
    assert first["chunk_id"].startswith(first["doc_id"] + "#") and isinstance(first["score"], float)
    assert all(d.metadata["doc_type"] == "jira" for d in docs)
    assert docs[0].page_content and docs[0].id == first["chunk_id"]
    # batch and the async path work through LangChain's Runnable interface
    assert len(lc.batch(["dCache pool", "certificate"])) == 2
