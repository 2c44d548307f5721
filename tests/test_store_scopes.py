"""Access scopes in the stores (issue 23, item 6): :class:`copilot.access.Access` narrowing a
user's :class:`SearchFilter`, and the source-folder and match-none filters in every backend —
SQLite FTS5, embedded Chroma (folders expanded from the manifest), a Chroma server, PostgreSQL
and pgvector — each checked to return ``k`` hits that all pass, never a post-filtered few."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
import test_ingestion_server  # noqa: E402  (its fixture starts a real `chroma run`)
from ingestion_helpers import HashEmbedder  # noqa: E402

from copilot.access import Access  # noqa: E402
from ingestion.documents import SearchFilter, source_in_folders  # noqa: E402
from ingestion.loaders.registry import DOC_TYPES  # noqa: E402
from ingestion.pipeline import ingest_paths  # noqa: E402
from ingestion.stores.chroma_store import ChromaStore, build_where  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402
from ingestion.stores.database import SqliteDatabase  # noqa: E402
from ingestion.stores.lexical_index import filter_sql  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "evals" / "data" / "corpus"
OPS = Access("ops", frozenset({"elog", "shiftlog"}), ("logbooks",))
SEC = Access("sec", frozenset({"jira"}), ("tickets/security",))
chroma_server = test_ingestion_server.chroma_server  # the fixture, for the server-mode test
#: Words of many chunks of every type (BM25 OR-s them), so both scopes have more than k matches.
QUERY = "restart pool transfer ticket disk service failed fixed error link"


def _corpus(root: Path) -> Path:
    """Folders whose names share prefixes, and one whose case differs."""
    for dest, src in {"logbooks/operations.elog": "logbooks/operations.elog",
                      "logbooks-old/operations.elog": "logbooks/operations.elog",
                      "Logbooks/operations.elog": "logbooks/operations.elog",
                      "logbooks/shift.log": "shiftlogs/shift-2026-01-20.log",
                      "tickets/security/jira.json": "tickets/jira_export.json",
                      "tickets/security_x/jira.json": "tickets/jira_export.json",
                      "tickets/ggus_export.csv": "tickets/ggus_export.csv"}.items():
        (root / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CORPUS / src, root / dest)
    return root


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> ChunkStore:
    base = tmp_path_factory.mktemp("store-scopes")
    store = ChunkStore(base / "data", embedder=HashEmbedder())
    ingest_paths([_corpus(base / "corpus")], store, progress=False)
    return store


def _check_backends(store: ChunkStore, access: Access, k: int = 6) -> None:
    """Dense and lexical search under ``access``: ``k`` hits (the store has more readable chunks), all readable."""
    flt = access.restrict(None)
    for hits in (store.dense_search(QUERY, k, flt), store.lexical_search(QUERY, k, flt)):
        metas = [h.chunk.metadata for h in hits]
        assert len(metas) == k and all(access.allows(m) for m in metas), [m["source"] for m in metas]


# -- Access ------------------------------------------------------------------------------------------------
def test_restrict_intersects_and_an_empty_intersection_means_nothing():
    assert Access("all").restrict(None) is None
    flt = OPS.restrict(None)
    assert (flt.doc_types, flt.source_folders, flt.match_none) == (("elog", "shiftlog"), ("logbooks",), False)
    assert OPS.restrict(SearchFilter(doc_types=("elog", "jira"))).doc_types == ("elog",)
    assert OPS.restrict(SearchFilter(doc_types=("jira",))).match_none  # not "all types"
    assert OPS.restrict(SearchFilter(source="tickets/security/jira.json")).match_none
    assert OPS.restrict(SearchFilter(source="logbooks-old/operations.elog")).match_none
    assert not OPS.restrict(SearchFilter(source="logbooks/operations.elog")).match_none
    assert OPS.restrict(SearchFilter(source_folders=("logbooks/sub", "tickets"))).source_folders == ("logbooks/sub",)
    assert OPS.restrict(SearchFilter(source_folders=("tickets",))).match_none
    assert Access("none", frozenset(), None).restrict(None).match_none
    assert Access("types", frozenset({"jira"})).restrict(None).doc_types == ("jira",)
    assert set(Access("x", None, ("a",)).restrict(None).doc_types or DOC_TYPES) == set(DOC_TYPES)


def test_allows_and_partitions():
    assert OPS.allows({"doc_type": "elog", "source": "logbooks/a.elog"})
    assert not OPS.allows({"doc_type": "elog", "source": "logbooks-old/a.elog"})
    assert not OPS.allows({"doc_type": "jira", "source": "logbooks/a.json"})
    assert not OPS.allows({"doc_type": "elog"})  # no source: not provably inside the folders
    assert source_in_folders("logbooks", ("logbooks",)) and not source_in_folders("Logbooks/a", ("logbooks",))
    assert Access("all", can_ingest=True).partition == "" == Access("other").partition
    same = Access("ops-2", frozenset({"shiftlog", "elog"}), ("logbooks",), can_ingest=True)
    assert OPS.partition == same.partition != SEC.partition and OPS.partition.startswith("scope-")


# -- SQL and Chroma translation ---------------------------------------------------------------------------------
def test_folder_sql_matches_whole_segments_exactly_case_and_wildcards_included(tmp_path):
    db = SqliteDatabase(tmp_path)
    db.executescript("CREATE TABLE chunks (source TEXT)")
    sources = ["logbooks", "logbooks/a", "logbooks/x/b", "logbooks-old/a", "Logbooks/a", "LOGBOOKS/a", "logbooksX",
               "a%b/c", "aXb/c", "a_b/c", "a-b/c"]
    db.executemany("INSERT INTO chunks VALUES (?)", [(s,) for s in sources])

    def matching(*folders: str) -> list[str]:
        where, params = filter_sql(SearchFilter(source_folders=folders))
        return sorted(r[0] for r in db.query(f"SELECT source FROM chunks c WHERE TRUE{where}", params))

    assert matching("logbooks") == ["logbooks", "logbooks/a", "logbooks/x/b"]
    assert matching("a%b") == ["a%b/c"] and matching("a_b") == ["a_b/c"]
    assert matching("logbooks/x", "a-b") == ["a-b/c", "logbooks/x/b"]
    where, params = filter_sql(SearchFilter(source_folders=("logbooks",), match_none=True))
    assert where == " AND FALSE" and not db.query(f"SELECT source FROM chunks c WHERE TRUE{where}", params)


def test_build_where_uses_the_stored_sources_under_the_folders():
    flt = OPS.restrict(None)
    assert build_where(flt, ["logbooks/a.elog"]) == {"$and": [{"source": {"$in": ["logbooks/a.elog"]}},
                                                              {"doc_type": {"$in": ["elog", "shiftlog"]}}]}
    with pytest.raises(ValueError, match="folder_sources"):
        build_where(flt)  # never silently widened to every folder
    with pytest.raises(ValueError, match="match_none"):
        build_where(SearchFilter(match_none=True))


def test_a_chroma_store_without_folder_sources_refuses_a_folder_filter(tmp_path):
    chroma = ChromaStore(tmp_path / "chroma", None, "scopes", "hash")
    with pytest.raises(ValueError, match="cannot filter by source folder"):
        chroma.query([0.0] * 8, 3, SearchFilter(source_folders=("logbooks",)))
    assert chroma.query([0.0] * 8, 3, SearchFilter(match_none=True)) == []


# -- the stores ----------------------------------------------------------------------------------------------------
def test_sqlite_and_embedded_chroma_return_k_readable_hits(store):
    assert sorted(store.manifest.sources_under(["logbooks"])) == ["logbooks/operations.elog", "logbooks/shift.log"]
    assert store.manifest.sources_under(["tickets/security"]) == ["tickets/security/jira.json"]
    _check_backends(store, OPS)
    _check_backends(store, SEC)
    nothing = OPS.restrict(SearchFilter(doc_types=("jira",)))
    assert store.dense_search("restart", 5, nothing) == [] == store.lexical_search("restart", 5, nothing)
    assert store.dense_search("restart", 5, Access("x", None, ("no/such/folder",)).restrict(None)) == []


def test_the_document_list_is_filtered_in_the_manifest(store):
    every, total = store.manifest.page(0, 1000)
    rows, n = store.manifest.page(0, 1000, OPS.restrict(None))
    assert n == len(rows) == sum(OPS.allows(r) for r in every) < total
    assert [r["doc_id"] for r in store.manifest.page(2, 3, OPS.restrict(None))[0]] == [r["doc_id"] for r in rows[2:5]]


def test_postgres_and_pgvector_return_k_readable_hits(tmp_path, postgres_url, pg_collection):
    shared = ChunkStore(tmp_path / "pg", database_url=postgres_url, collection=pg_collection, embedder=HashEmbedder())
    try:
        ingest_paths([_corpus(tmp_path / "corpus")], shared, progress=False)
        assert type(shared.dense).__name__ == "PgVectorStore"
        _check_backends(shared, OPS)
        _check_backends(shared, SEC)
        nothing = SEC.restrict(SearchFilter(source="logbooks/operations.elog"))
        assert shared.dense_search("restart", 5, nothing) == [] == shared.lexical_search("restart", 5, nothing)
        rows, n = shared.manifest.page(0, 1000, SEC.restrict(None))
        assert n == len(rows) > 0 and all(SEC.allows(r) for r in rows)
    finally:
        shared.close()


def test_a_chroma_server_returns_k_readable_hits(tmp_path, chroma_server):
    url, _ = chroma_server
    served = ChunkStore(tmp_path / "srv", chroma_url=url, embedder=HashEmbedder())
    ingest_paths([_corpus(tmp_path / "corpus")], served, progress=False)
    _check_backends(served, OPS)
    _check_backends(served, SEC)
