"""ChunkStore + pipeline: idempotency, edits, deletions, bad files, batching, search, CLI body."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import CORPUS, HashEmbedder, copy_corpus, shared_embedder, snapshot  # noqa: E402

from ingestion.deletion import delete_document  # noqa: E402
from ingestion.documents import SearchFilter  # noqa: E402
from ingestion.errors import StoreError, StoreLockedError  # noqa: E402
from ingestion.ingest_command import run_ingest  # noqa: E402
from ingestion.pipeline import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, IngestOptions, IngestProgress, ingest_paths  # noqa: E402
from ingestion.stores.chroma_store import ChromaStore  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402

ODD_KEYS = ("OPS/12", "OPS:12", "OPS 12", "ops-12#1")


@pytest.fixture(scope="session")
def embedder():
    return shared_embedder()


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory, embedder):
    """The fixture corpus ingested once with the real model: (store, report, corpus dir)."""
    base = tmp_path_factory.mktemp("corpus_run")
    corpus = copy_corpus(base / "corpus")
    store = ChunkStore(base / "store", embedder=embedder)
    report = ingest_paths([corpus], store, progress=False)
    yield store, report, corpus
    store.close()


@pytest.fixture
def hash_store(tmp_path):
    store = ChunkStore(tmp_path / "hstore", embedder=HashEmbedder(), collection="hash-test")
    yield store
    store.close()


def chroma_ids_of(store: ChunkStore, doc_id: str) -> list[str]:
    got = store.dense.collection.get(where={"doc_id": doc_id}, include=[])
    return sorted(got["ids"])


def jira_ticket(n_paragraphs: int) -> str:
    paras = [f"Step {i}: on host dc-pool-{i:02d} ran systemctl restart dcache@dc-pool-{i:02d}Domain.service "
             "and checked the pinboard for errors." for i in range(n_paragraphs)]
    issue = {"key": "OPS-200", "fields": {"summary": "Pool restarts", "description": "\n\n".join(paras),
                                         "status": {"name": "Open"}, "created": "2026-02-01T10:00:00.000+0100"}}
    return json.dumps({"issues": [issue]})


# -- full corpus with the real model ----------------------------------------------------------
def test_corpus_ingest_report(corpus_run):
    store, report, _ = corpus_run
    assert report.counts == {"indexed": 8, "unchanged": 0, "skipped-empty": 0, "skipped": 0, "failed": 0}
    by_source = {f.source: f for f in report.files}
    assert set(by_source) == {"logbooks/ops.elog", "misc/notes.txt", "postmortems/cvmfs.md", "shiftlogs/noheader.log",
                              "shiftlogs/shift.log", "tickets/ggus.csv", "tickets/jira.json", "tickets/records.jsonl"}
    assert by_source["tickets/jira.json"].documents == 3 and by_source["tickets/jira.json"].format == "jira"
    assert by_source["shiftlogs/shift.log"].documents == 2
    n_docs = sum(f.documents for f in report.files)
    assert store.manifest.count() == n_docs == 18
    assert store.lexical.count() == report.chunks_written == store.dense.count() == sum(f.chunks for f in report.files)
    assert report.chunks_per_s > 0 and report.elapsed_s > 0
    data = json.loads(json.dumps(report.to_dict()))
    assert data["counts"]["indexed"] == 8 and len(data["files"]) == 8
    rows, total = store.manifest.page(0, 5)
    assert total == 18 and len(rows) == 5
    assert set(rows[0]) >= {"doc_id", "source", "title", "doc_type", "n_chunks", "content_hash"}
    assert store.manifest.page(15, 50)[0][-1]["doc_id"] == "tickets/records.jsonl#KB-0002"
    store.ping()


def test_second_run_writes_nothing(corpus_run, monkeypatch):
    store, _, corpus = corpus_run
    before = snapshot(store)

    def forbidden(*args, **kwargs):
        raise AssertionError("unchanged corpus must not be re-embedded or re-written")

    monkeypatch.setattr(store.embedder, "embed_array", forbidden)
    monkeypatch.setattr(ChromaStore, "upsert", forbidden)
    monkeypatch.setattr(ChromaStore, "delete", forbidden)
    report = ingest_paths([corpus], store, progress=False)
    assert report.counts["unchanged"] == 8 and report.chunks_written == 0
    # without file fingerprints every file is parsed again; document hashes still match
    store.db.execute("DELETE FROM files")
    report = ingest_paths([corpus], store, progress=False)
    assert report.counts["unchanged"] == 8 and report.chunks_written == 0
    assert snapshot(store)["docs"] == before["docs"] and snapshot(store)["chunks"] == before["chunks"]


def test_dense_and_lexical_search_with_filters(corpus_run):
    store, _, _ = corpus_run
    dense = store.dense_search("worker nodes failing because the CVMFS cache is too small", 5)
    assert dense and dense[0].chunk.doc_id in {"tickets/jira.json#OPS-107", "postmortems/cvmfs.md#PM-2026-02"}
    assert [h.score for h in dense] == sorted((h.score for h in dense), reverse=True)
    assert -1.0 <= dense[-1].score <= 1.0
    lexical = store.lexical_search("SRM_AUTHORIZATION_FAILURE", 3)
    assert lexical[0].chunk.doc_id == "tickets/jira.json#OPS-108" and lexical[0].score > 0
    assert store.lexical_search("OPS-107", 10)[0].chunk.metadata["key"] in {"OPS-107", "PM-2026-02"}
    assert store.lexical_search("Hochdruckstörung", 3) == []
    for weird in ['"unbalanced', "a:b", "NOT", "*", "(", "x OR", "", "   ", "col:val AND", "je.lck^2", "'; DROP"]:
        store.lexical_search(weird, 3)
    hit = store.lexical_search("je.lck", 5)
    assert {h.chunk.doc_id for h in hit} >= {"logbooks/ops.elog#41", "logbooks/ops.elog#42"}
    only_jira = SearchFilter(doc_types=("jira",))
    assert {h.chunk.metadata["doc_type"] for h in store.dense_search("restart", 10, only_jira)} == {"jira"}
    assert {h.chunk.metadata["doc_type"] for h in store.lexical_search("restart dcache", 10, only_jira)} <= {"jira"}
    flt = SearchFilter(ticket_key="41", source="logbooks/ops.elog")
    assert {h.chunk.doc_id for h in store.dense_search("pool", 10, flt)} == {"logbooks/ops.elog#41"}
    assert {h.chunk.doc_id for h in store.lexical_search("pool", 10, flt)} == {"logbooks/ops.elog#41"}
    feb4 = SearchFilter(since_ts=1770159600, until_ts=1770245999)  # 2026-02-04 00:00 .. 23:59:59 +01:00
    for hits in (store.dense_search("problem", 20, feb4),
                 store.lexical_search("the OR host OR BGP OR arc02", 20, feb4)):
        assert hits and {h.chunk.doc_id for h in hits} <= {"logbooks/ops.elog#43", "tickets/jira.json#OPS-108"}
    # both searches return the same canonical chunk objects
    d = {h.chunk.chunk_id: h.chunk for h in store.dense_search("BGP session flap", 3)}
    l_ = {h.chunk.chunk_id: h.chunk for h in store.lexical_search("BGP session flap", 3)}
    for cid in set(d) & set(l_):
        assert d[cid] == l_[cid]


def test_none_and_list_metadata(corpus_run):
    store, _, _ = corpus_run
    (c108,) = store.lexical.document_chunks("tickets/jira.json#OPS-108")
    assert c108.metadata["priority"] is None and c108.metadata["labels"] == []
    assert c108.text.startswith("Jira OPS-108 | ARC CE arc02 rejects jobs")
    got = store.dense.collection.get(ids=[c108.chunk_id], include=["metadatas"])
    meta = got["metadatas"][0]
    assert "priority" not in meta and "labels" not in meta and meta["status"] == "In Progress"
    tagged = store.dense.collection.get(where={"labels": {"$contains": "cvmfs"}}, include=["metadatas"])
    assert {m["doc_id"] for m in tagged["metadatas"]} == {"tickets/jira.json#OPS-107"}
    assert tagged["metadatas"][0]["labels"] == ["cvmfs", "batch"]
    pm = store.lexical.document_chunks("postmortems/cvmfs.md#PM-2026-02")[0]
    assert pm.metadata["services"] == ["CVMFS", "HTCondor"] and isinstance(pm.metadata["created_ts"], int)


# -- edits, deletions, special keys (cheap embedder) ---------------------------------------
def test_edited_ticket_3_then_4_then_2_chunks(tmp_path):
    store = ChunkStore(tmp_path / "s", embedder=HashEmbedder(), collection="edit-test", max_chunk_tokens=64)
    path = tmp_path / "src" / "tickets" / "edit.json"
    path.parent.mkdir(parents=True)
    doc_id = "tickets/edit.json#OPS-200"
    for n_paragraphs, expected in ((2, 3), (3, 4), (1, 2)):
        path.write_text(jira_ticket(n_paragraphs))
        report = ingest_paths([tmp_path / "src"], store, progress=False)
        assert report.files[0].status == "indexed" and report.files[0].chunks == expected
        ids = [c.chunk_id for c in store.lexical.document_chunks(doc_id)]
        assert ids == [f"{doc_id}#{i}" for i in range(expected)]
        assert chroma_ids_of(store, doc_id) == sorted(ids)
        assert store.dense.count() == store.lexical.count() == expected
        assert store.db.query("SELECT COUNT(*) FROM chunks_fts")[0][0] == expected
    assert store.lexical_search("dc-pool-02", 5) == []  # text of the removed paragraph is gone
    assert store.lexical_search("dc-pool-00", 5)[0].chunk.doc_id == doc_id
    store.close()


def test_special_character_keys_are_four_citable_documents(hash_store, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "odd.jsonl").write_text("\n".join(json.dumps({"id": k, "text": f"Ticket {k}: tape robot stuck"})
                                             for k in ODD_KEYS))
    ingest_paths([src], hash_store, progress=False)
    rows, total = hash_store.manifest.page()
    assert total == 4 and {r["doc_id"] for r in rows} == {f"odd.jsonl#{k}" for k in ODD_KEYS}
    for key in ODD_KEYS:
        doc_id = f"odd.jsonl#{key}"
        (chunk,) = hash_store.lexical.document_chunks(doc_id)
        assert chunk.chunk_id == f"{doc_id}#0" and chunk.metadata["key"] == key
        flt = SearchFilter(ticket_key=key)
        assert [h.chunk.doc_id for h in hash_store.lexical_search("tape robot", 10, flt)] == [doc_id]
        assert [h.chunk.doc_id for h in hash_store.dense_search("tape robot", 10, flt)] == [doc_id]
    assert delete_document(hash_store, "odd.jsonl#OPS 12") is True
    assert delete_document(hash_store, "odd.jsonl#OPS 12") is False
    assert hash_store.manifest.page()[1] == 3 and hash_store.dense.count() == 3
    assert hash_store.lexical.document_chunks("odd.jsonl#OPS 12") == []
    # the file still has the entry: the next ingest restores it (the store mirrors its sources)
    report = ingest_paths([src], hash_store, progress=False)
    assert report.files[0].written_documents == 1 and hash_store.manifest.page()[1] == 4


def test_more_chunks_than_chroma_max_batch_size(hash_store, tmp_path, monkeypatch):
    max_batch = hash_store.dense.max_batch_size
    n = max_batch + 150
    src = tmp_path / "bulk"
    src.mkdir()
    (src / "kb.jsonl").write_text("\n".join(json.dumps({"id": f"KB-{i:05d}", "text": f"note {i} on host wn-{i}"})
                                            for i in range(n)))
    sizes: list[int] = []
    original = type(hash_store.dense.collection).upsert

    def spy(self, *args, **kwargs):
        sizes.append(len(kwargs["ids"]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(hash_store.dense.collection), "upsert", spy)
    report = ingest_paths([src], hash_store, progress=False, options=IngestOptions(batch_chunks=n + 1))
    assert report.chunks_written == n == hash_store.dense.count() == hash_store.lexical.count()
    assert len(sizes) >= 2 and max(sizes) <= max_batch and sum(sizes) == n
    sizes.clear()
    assert ingest_paths([src], hash_store, progress=False).chunks_written == 0 and sizes == []


def test_small_client_batch_limit_also_applies_to_deletes(hash_store, tmp_path, monkeypatch):
    monkeypatch.setattr(hash_store.dense, "max_batch_size", 4)
    calls: list[tuple[str, int]] = []
    coll_type = type(hash_store.dense.collection)
    up, de = coll_type.upsert, coll_type.delete
    monkeypatch.setattr(coll_type, "upsert", lambda s, **kw: (calls.append(("upsert", len(kw["ids"]))), up(s, **kw))[1])
    monkeypatch.setattr(coll_type, "delete", lambda s, **kw: (calls.append(("delete", len(kw["ids"]))), de(s, **kw))[1])
    src = tmp_path / "src"
    src.mkdir()
    (src / "kb.jsonl").write_text("\n".join(json.dumps({"id": f"K{i}", "text": f"t{i}"}) for i in range(11)))
    ingest_paths([src], hash_store, progress=False)
    (src / "kb.jsonl").write_text(json.dumps({"id": "K0", "text": "t0"}))
    report = ingest_paths([src], hash_store, prune=True, progress=False)
    assert report.files[0].deleted_documents == 10 and hash_store.dense.count() == 1
    assert calls and all(size <= 4 for _, size in calls) and ("delete", 4) in calls


def test_bad_files_are_reported_and_never_lose_stored_data(hash_store, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(CORPUS / "tickets", src / "tickets")
    latin = ("$@MID@$: 1\nDate: Thu, 08 Jan 2026 03:17:44 +0100\nAuthor: Jürgen Müller\nSubject: Kühlung\n"
             + "=" * 40 + "\nCRAC-B2: Hochdruckstörung Verdichter 1, 27°C.\n").encode("latin-1")
    (src / "facility.elog").write_bytes(latin)
    (src / "empty.log").write_bytes(b"")
    (src / "blank.txt").write_bytes(b"  \n\n\t \n")
    (src / "blob.dat").write_bytes(b"\x00\x01\x02\x03binary\x00" * 20)
    (src / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (src / "cut.json").write_text('{"issues": [{"key": "OPS-1", "fields": {"summary": "x"')
    report = ingest_paths([src, tmp_path / "does-not-exist"], hash_store, progress=False)
    status = {f.source: (f.status, f.reason) for f in report.files}
    assert status["facility.elog"][0] == "indexed"
    assert status["empty.log"] == ("skipped-empty", "empty or whitespace-only file")
    assert status["blank.txt"][0] == "skipped-empty"
    assert status["blob.dat"][0] == "failed" and "binary" in status["blob.dat"][1]
    assert status["photo.png"][0] == "failed" and ".png" in status["photo.png"][1]
    assert status["cut.json"][0] == "failed" and "truncated JSON" in status["cut.json"][1]
    missing = next(f for f in report.files if f.path.endswith("does-not-exist"))
    assert (missing.status, missing.reason) == ("failed", "no such file or directory")
    assert report.counts == {"indexed": 4, "unchanged": 0, "skipped-empty": 2, "skipped": 0, "failed": 4}
    assert not report.ok
    (chunk,) = hash_store.lexical.document_chunks("facility.elog#1")
    assert "Hochdruckstörung Verdichter 1, 27°C" in chunk.text and chunk.metadata["author"] == "Jürgen Müller"
    assert hash_store.lexical_search("Hochdruckstörung", 3)[0].chunk.doc_id == "facility.elog#1"
    # a good file that turns bad keeps its stored documents, even with --prune
    before = hash_store.manifest.page(0, 100)
    jira = src / "tickets" / "jira.json"
    jira.write_bytes(jira.read_bytes()[:300])
    report = ingest_paths([src], hash_store, progress=False, prune=True)
    assert {f.source: f.status for f in report.files}["tickets/jira.json"] == "failed"
    assert hash_store.manifest.page(0, 100) == before


def test_vanished_entries_and_files_need_prune(hash_store, tmp_path):
    src = copy_corpus(tmp_path / "c")
    ingest_paths([src], hash_store, progress=False)
    n_docs = hash_store.manifest.count()
    (src / "tickets" / "ggus.csv").write_text(
        (CORPUS / "tickets/ggus.csv").read_text().split("\nGGUS-170002")[0] + "\n")
    (src / "misc" / "notes.txt").unlink()
    report = ingest_paths([src], hash_store, progress=False)
    ggus = next(f for f in report.files if f.source == "tickets/ggus.csv")
    assert ggus.status == "unchanged" and ggus.kept_vanished == 1 and ggus.warnings
    assert hash_store.manifest.count() == n_docs
    report = ingest_paths([src], hash_store, progress=False, prune=True)
    assert report.pruned_documents == 1 and report.documents_deleted == 2
    assert hash_store.manifest.count() == n_docs - 2
    assert hash_store.lexical.document_chunks("tickets/ggus.csv#GGUS-170002") == []
    assert hash_store.lexical.document_chunks("misc/notes.txt#notes.txt") == []
    assert hash_store.dense.count() == hash_store.lexical.count()
    (src / "tickets" / "records.jsonl").write_text("\n")
    report = ingest_paths([src], hash_store, progress=False, prune=True)
    assert next(f for f in report.files if f.source == "tickets/records.jsonl").deleted_documents == 2
    assert ingest_paths([src], hash_store, progress=False, prune=True).documents_deleted == 0


def test_reingest_with_another_root_supersedes_old_ids(hash_store, tmp_path):
    src = copy_corpus(tmp_path / "c")
    ingest_paths([src / "tickets"], hash_store, progress=False, root=src)
    assert hash_store.manifest.page()[0][0]["source"] == "tickets/ggus.csv"
    n = hash_store.manifest.count()
    report = ingest_paths([src / "tickets"], hash_store, progress=False)
    assert {f.source for f in report.files} == {"ggus.csv", "jira.json", "records.jsonl"}
    assert hash_store.manifest.count() == n and hash_store.dense.count() == hash_store.lexical.count()
    assert {r["source"] for r in hash_store.manifest.page(0, 100)[0]} == {"ggus.csv", "jira.json", "records.jsonl"}


def test_interrupted_write_is_recovered_in_process(hash_store, tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    (src / "t.json").write_text(jira_ticket(2))
    ingest_paths([src], hash_store, progress=False)
    clean = snapshot(hash_store)
    (src / "t.json").write_text(jira_ticket(6))
    monkeypatch.setattr(hash_store.lexical, "insert_chunks", lambda chunks: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(StoreError, match="disk full"):
        ingest_paths([src], hash_store, progress=False)
    monkeypatch.undo()
    assert hash_store.db.query("SELECT COUNT(*) FROM pending")[0][0] == 1
    assert snapshot(hash_store)["chunks"] == clean["chunks"]  # SQLite side untouched
    (src / "t.json").write_text(jira_ticket(2))  # the source went back before the re-run
    report = ingest_paths([src], hash_store, progress=False)
    assert report.recovered_documents == 1 and report.files[0].written_documents == 1
    after = snapshot(hash_store)
    assert after["pending"] == 0 and after["chunks"] == clean["chunks"]
    assert sorted(after["chroma"]) == sorted(clean["chroma"])


def _settings(data_dir: Path) -> SimpleNamespace:
    return SimpleNamespace(data_dir=data_dir, chroma_url=None, database_url=None, collection="opscopilot",
                           embedding_model=None)


def test_cli_body_report_file_exit_code_and_progress(tmp_path, caplog):
    src = copy_corpus(tmp_path / "c")
    report_path = tmp_path / "out" / "report.json"
    with caplog.at_level(logging.INFO, logger="ingestion.pipeline"):
        outcome = run_ingest([src], _settings(tmp_path / "data"), report_file=report_path, progress=False,
                             embedder=HashEmbedder())
    assert outcome.exit_code == EXIT_OK
    data = json.loads(report_path.read_text())
    assert data["counts"]["indexed"] == 8 and data["chunks_written"] > 0 and data["error"] is None
    assert any("[8/8]" in r.getMessage() for r in caplog.records)
    (src / "broken.json").write_text("{")
    outcome = run_ingest([src], _settings(tmp_path / "data"), report_file=report_path, progress=False,
                         embedder=HashEmbedder())
    assert outcome.exit_code == EXIT_FAILED
    assert json.loads(report_path.read_text())["counts"] == {"indexed": 0, "unchanged": 8, "skipped-empty": 0,
                                                             "skipped": 0, "failed": 1}
    seen: list[IngestProgress] = []
    store = ChunkStore(tmp_path / "data2", embedder=HashEmbedder())
    ingest_paths([src], store, progress=True, on_progress=seen.append)
    assert seen[-1].files_done == seen[-1].files_total == 9 and seen[-1].chunks_written > 0
    with store.ingest_lock():
        with pytest.raises(StoreLockedError):
            ingest_paths([src], store, progress=False)
    store.close()


def test_a_held_lock_names_its_holder_and_the_report_is_still_written(tmp_path):
    import socket

    src = copy_corpus(tmp_path / "c")
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    report_path = tmp_path / "report.json"
    with store.ingest_lock():
        with pytest.raises(StoreLockedError) as info:
            ingest_paths([src], store, progress=False)
        assert info.value.holder["pid"] == os.getpid() and info.value.holder["host"] == socket.gethostname()
        outcome = run_ingest([src], _settings(tmp_path / "data"), report_file=report_path, progress=False,
                             embedder=HashEmbedder())
    assert outcome.exit_code == EXIT_LOCKED
    data = json.loads(report_path.read_text())
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in data["error"] and data["files"] == []
    assert store.manifest.count() == 0  # nothing was read or written
    outcome = run_ingest([src], _settings(tmp_path / "data"), report_file=report_path, progress=False,
                         embedder=HashEmbedder())  # released: the next run goes through
    assert outcome.exit_code == EXIT_OK and json.loads(report_path.read_text())["error"] is None
    store.close()


def test_store_rejects_another_embedding_model(corpus_run, tmp_path):
    store, _, _ = corpus_run
    with pytest.raises(StoreError, match="embedding model"):
        ChunkStore(store.data_dir, embedder=HashEmbedder())


def test_odd_metadata_keys_and_values_are_stored(hash_store, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    record = {"id": "R-1", "text": "odd metadata", "#tag": "x", "": "empty key", "$ref": 1, "score": float("nan"),
              "huge": 2**70, "nested": {"a": [1, None]}, "tags": [], "owner": None}
    (src / "odd.jsonl").write_text(json.dumps(record) + "\n")
    report = ingest_paths([src], hash_store, progress=False)
    assert report.counts["indexed"] == 1
    (chunk,) = hash_store.lexical.document_chunks("odd.jsonl#R-1")
    assert chunk.metadata["#tag"] == "x" and chunk.metadata["owner"] is None
    meta = hash_store.dense.collection.get(ids=[chunk.chunk_id], include=["metadatas"])["metadatas"][0]
    assert meta["x_#tag"] == "x" and meta["huge"] == str(2**70) and "score" not in meta and "owner" not in meta
    assert hash_store.lexical.get_chunks([chunk.chunk_id, "nope"]) == {chunk.chunk_id: chunk}
    info = hash_store.manifest.info("odd.jsonl#R-1")
    assert info["n_chunks"] == 1 and info["doc_type"] == "jsonl" and hash_store.manifest.info("nope") is None


def test_same_relative_name_from_two_folders_is_refused_not_overwritten(tmp_path):
    """Two different files that would get the same source name: the second is reported
    failed and the first one's stored document is untouched (no silent data loss)."""
    from ingestion.pipeline import ingest_paths
    from ingestion.stores.chunk_store import ChunkStore

    for site, text in (("siteA", "site A: restart the gridftp door"), ("siteB", "site B: drain pool 12")):
        (tmp_path / site).mkdir()
        (tmp_path / site / "notes.txt").write_text(text)
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    assert ingest_paths([tmp_path / "siteA"], store, progress=False).to_dict()["counts"]["indexed"] == 1
    report = ingest_paths([tmp_path / "siteB"], store, progress=False).to_dict()
    assert report["counts"]["failed"] == 1
    assert "already stored from" in report["files"][0]["reason"]
    (doc,) = store.manifest.page()[0]
    assert "site A" in store.lexical.document_chunks(doc["doc_id"])[0].text
