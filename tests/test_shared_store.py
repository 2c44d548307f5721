"""The store shared by several processes: a second writer seen by a running reader (embedded and
PostgreSQL), two stores on one PostgreSQL, hybrid retrieval equal to the embedded store, the
ingest jobs table, and bad database URLs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import REPO_ROOT, copy_corpus, shared_embedder  # noqa: E402

from copilot.config import Settings  # noqa: E402
from copilot.search.retrieval import HybridRetriever  # noqa: E402
from copilot.serving.job_table import JobTable  # noqa: E402
from ingestion.documents import SearchFilter  # noqa: E402
from ingestion.errors import StoreError  # noqa: E402
from ingestion.pipeline import ingest_paths  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402
from ingestion.stores.database import open_database  # noqa: E402

CLI_TIMEOUT_S = 300


@pytest.fixture(params=["embedded", "shared"])
def store_kwargs(request, pg_collection) -> dict:
    """ChunkStore keyword arguments for the embedded store, or the shared one on a real PostgreSQL."""
    if request.param == "embedded":
        return {}
    return {"database_url": request.getfixturevalue("postgres_url"), "collection": pg_collection}


def _cli_ingest(data_dir: Path, store_kwargs: dict, *paths: Path) -> None:
    """``copilot ingest`` in a process of its own, on the same store."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COPILOT_DATA_DIR": str(data_dir)}
    if store_kwargs:
        env |= {"COPILOT_DATABASE_URL": store_kwargs["database_url"], "COPILOT_COLLECTION": store_kwargs["collection"]}
    done = subprocess.run([sys.executable, "-m", "ingestion", *map(str, paths)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-2000:]


def test_another_process_ingest_is_seen_by_a_running_reader(tmp_path, store_kwargs):
    """#13 item 3: with a reader open (the server's store), `copilot ingest` from another process adds
    documents; the reader's filtered dense searches see them (they used to fail with Chroma's
    "Error finding id" on the embedded store) and its lexical ones too, without a restart."""
    corpus = copy_corpus(tmp_path / "corpus")
    data_dir = tmp_path / "data"
    reader = ChunkStore(data_dir, embedder=shared_embedder(), **store_kwargs)
    ingest_paths([corpus / "tickets"], reader, progress=False)
    elog = SearchFilter(doc_types=("elog",))
    assert reader.dense_search("pool disabled after restart", 5, elog) == []

    _cli_ingest(data_dir, store_kwargs, corpus / "logbooks")

    hits = reader.dense_search("pool disabled after restart", 5, elog)
    assert hits and all(h.chunk.metadata["doc_type"] == "elog" for h in hits)
    assert hits[0].chunk.doc_id.startswith("ops.elog#")  # sources are named relative to the folder ingested
    assert reader.dense_search("pool disabled after restart", 3, SearchFilter(ticket_key="41"))[0].chunk.doc_id \
        == "ops.elog#41"
    assert any(h.chunk.doc_id == "ops.elog#41" for h in reader.lexical_search("dc-pool-14 disabled", 5))
    unfiltered = {h.chunk.doc_id for h in reader.dense_search("pool disabled after restart", 20)}
    assert any(d.startswith("ops.elog#") for d in unfiltered) and any(d.startswith("jira.json#") for d in unfiltered)
    assert reader.lexical.count() == reader.dense.count()
    assert reader.refresh() is False  # nothing changed since
    reader.close()


def test_two_stores_on_one_postgres_see_each_others_writes(tmp_path, postgres_url, pg_collection):
    corpus = copy_corpus(tmp_path / "corpus")
    a = ChunkStore(tmp_path / "a", database_url=postgres_url, collection=pg_collection, embedder=shared_embedder())
    b = ChunkStore(tmp_path / "b", database_url=postgres_url, collection=pg_collection, embedder=shared_embedder())
    ingest_paths([corpus / "tickets"], a, progress=False)
    assert b.manifest.page() == a.manifest.page() and b.manifest.count() > 0
    assert b.dense_search("cvmfs cache", 3)[0].chunk.doc_id == a.dense_search("cvmfs cache", 3)[0].chunk.doc_id
    # a second ingest of the same files through the other store changes nothing: one manifest
    assert ingest_paths([corpus / "tickets"], b, progress=False).counts["unchanged"] > 0
    assert b.lexical.count() == a.lexical.count() == b.dense.count()
    a.close()
    b.close()


def test_hybrid_retrieval_on_the_shared_store_matches_the_embedded_one(tmp_path, postgres_url, pg_collection):
    """The expected document among the top 3 for each fixture question on both stores (recall@k and
    MRR on both stores are measured by ``copilot eval retrieval`` on both question sets: evals/results/README.md)."""
    corpus = copy_corpus(tmp_path / "corpus")
    embedded = ChunkStore(tmp_path / "embedded", embedder=shared_embedder())
    shared = ChunkStore(tmp_path / "shared", database_url=postgres_url, collection=pg_collection,
                        embedder=shared_embedder())
    for store in (embedded, shared):
        ingest_paths([corpus], store, progress=False)
    questions = {
        "How was the stale je.lck lock on dc-pool-14 removed?": "logbooks/ops.elog#42",
        "Why did the CVMFS stratum-1 replication fail?": "postmortems/cvmfs.md#PM-2026-02",
        "What was done about OPS-107?": "tickets/jira.json#OPS-107",
        "BGP session flap on sw-border-01": "logbooks/ops.elog#43",
    }
    for question, expected in questions.items():
        for store in (embedded, shared):
            top = list(dict.fromkeys(p.chunk.doc_id for p in HybridRetriever(store).retrieve(question, 6)))[:3]
            assert expected in top, (question, store.db.location, top)
    # user syntax never reaches the query parser of either
    for store in (embedded, shared):
        for text in ('"a" OR (', "NOT -- ::", "OPS-107 AND", "'; DROP TABLE chunks; --", "%s %(x)s ?"):
            store.lexical_search(text, 5)
    assert shared.lexical_search("OPS-107", 1)[0].chunk.doc_id == "tickets/jira.json#OPS-107"
    embedded.close()
    shared.close()


def test_ingest_jobs_table_leases_and_claims(tmp_path, store_kwargs):
    db = open_database(tmp_path, store_kwargs.get("database_url"), store_kwargs.get("collection", "opscopilot"))
    table = JobTable(db, lease_s=1.0)
    req = {"kind": "path", "files": ["/x/a.json"], "root": "/x", "prune": False, "folder": None}
    table.save("j1", "running", "replica-a", time.time(), req, {"id": "j1"})
    table.save("j2", "queued", "replica-b", time.time(), req, {"id": "j2"})
    table.save("j3", "succeeded", "replica-b", time.time(), req, {"id": "j3"})
    assert table.claim("j1", "replica-b") is None  # running, lease fresh: not resumable
    assert table.expire() == []  # j1's lease is fresh: a replica that starts never interrupts it
    assert table.get("j2").status == "queued"
    time.sleep(1.2)  # replica-b's lease expires without a heartbeat
    assert table.get("j2").status == "interrupted"
    claimed = table.claim("j2", "replica-a")
    assert claimed is not None and claimed.owner == "replica-a" and claimed.request == req
    assert table.claim("j2", "replica-b") is None  # claimed once only
    assert table.claim("j3", "replica-a") is None  # succeeded
    table.heartbeat("replica-a", ["j2"])
    rows, total = table.page(0, 10)
    assert total == 3 and {r.id for r in rows} == {"j1", "j2", "j3"}
    table.forget_finished(keep=0)
    assert {r.id for r in table.page(0, 10)[0]} == {"j2"}  # the active one is kept
    db.close()


def test_bad_database_urls_are_clear_errors(tmp_path):
    with pytest.raises(StoreError, match="unsupported database URL 'mysql://ops:\\*\\*\\*@db/ops'"):
        open_database(tmp_path, "mysql://ops:secret@db/ops", "opscopilot")
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot open PostgreSQL at postgresql://ops:\\*\\*\\*@127.0.0.1:1/ops"):
        open_database(tmp_path, "postgresql://ops:secret@127.0.0.1:1/ops", "opscopilot")
    assert time.monotonic() - started < 30
    masked = Settings(database_url="postgresql://ops:secret@db:5432/ops").masked()
    assert masked["database_url"] == "postgresql://ops:***@db:5432/ops"


def test_cli_says_why_the_shared_store_is_unusable(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from copilot.cli.main import app

    monkeypatch.setenv("COPILOT_DATA_DIR", str(tmp_path))
    for url, reason in (("mysql://ops:secret@db/ops", "unsupported database URL"),
                        ("postgresql://ops:secret@127.0.0.1:1/ops", "cannot open PostgreSQL")):
        monkeypatch.setenv("COPILOT_DATABASE_URL", url)
        result = CliRunner().invoke(app, ["documents", "list"])
        assert result.exit_code == 4, result.output
        assert "store unusable:" in result.output and reason in result.output and "secret" not in result.output
