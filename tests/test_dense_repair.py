"""A damaged dense index (issue 46 item 2): named in one line at open, the store keeps serving what
needs only SQLite, ingest refuses with the reason, and ``reindex`` (CLI and API) rebuilds it from the
stored chunk texts, with search results equal to a fresh ingest's; a rebuild killed half-way
converges when run again.

Real embedded Chroma, hash embeddings (no model download). The damages are the ones a disk that
fills while Chroma persists leaves (a file cut short), and files lost outright.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import HashEmbedder  # noqa: E402

from copilot.api.app import create_app  # noqa: E402
from copilot.api.server import ServerThread  # noqa: E402
from copilot.config import Settings  # noqa: E402
from copilot.service import CopilotService  # noqa: E402
from ingestion.deletion import delete_document  # noqa: E402
from ingestion.ingest_command import run_ingest  # noqa: E402
from ingestion.reindex import reindex  # noqa: E402
from ingestion.report import EXIT_STORE  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402
from ingestion.stores.hnsw_files import DATA, HEADER, ID_MAP  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "evals" / "data" / "corpus"
QUERIES = ("dCache pool restart after disk full", "FTS transfer failures to FNAL", "certificate expired on the CE")
DELETED = "tickets/jira_export.json#OPS-101"

pytestmark = pytest.mark.usefixtures("restore_logging")


def _build(data: Path) -> dict[str, list[tuple[str, float]]]:
    """Ingest the sample corpus into ``data`` and delete one document (a purge: the HNSW index is
    persisted, so its files are the index); the dense results of :data:`QUERIES` then."""
    settings = Settings(data_dir=data, embedding_model="test/hash-embedder", _env_file=None)
    assert run_ingest([CORPUS], settings, progress=False, embedder=HashEmbedder()).exit_code == 0
    store = ChunkStore(data, embedder=HashEmbedder())
    try:
        assert delete_document(store, DELETED)
        return _dense_results(store)
    finally:
        store.close()


def _dense_results(store: ChunkStore) -> dict[str, list[tuple[str, float]]]:
    return {q: [(h.chunk.chunk_id, round(h.score, 5)) for h in store.dense_search(q, 8)] for q in QUERIES}


def _segment(data: Path) -> Path:
    (header,) = (data / "chroma").glob(f"*/{HEADER}")
    return header.parent


def _cut(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _cut_after_a_dot(path: Path) -> None:
    """Cut the file just after a ``.`` byte (a pickle's STOP opcode, and a character of chunk ids)."""
    data = path.read_bytes()
    path.write_bytes(data[:data.rindex(b".", 0, len(data) // 2) + 1])


#: Damage -> what the one line at open must name. The segment folder is passed in.
DAMAGES = {
    "id map cut short": (lambda seg: _cut(seg / ID_MAP), ID_MAP),
    "id map cut after a dot": (lambda seg: _cut_after_a_dot(seg / ID_MAP), ID_MAP),
    "vectors cut short": (lambda seg: _cut(seg / DATA), DATA),
    "header deleted": (lambda seg: (seg / HEADER).unlink(), HEADER),
    "segment folder deleted": (lambda seg: shutil.rmtree(seg), "is missing"),
    "database cut short": (lambda seg: _cut(seg.parent / "chroma.sqlite3"), "chroma.sqlite3 cannot be opened"),
    "chroma folder deleted": (lambda seg: shutil.rmtree(seg.parent), "holds no chunk"),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict[str, list[tuple[str, float]]]]:
    """A store built once (copied per test) and its dense results before any damage."""
    data = tmp_path_factory.mktemp("dense-repair") / "data"
    return data, _build(data)


def _damaged_copy(built, tmp_path: Path, damage: str) -> Path:
    data = tmp_path / "data"
    shutil.copytree(built[0], data)
    DAMAGES[damage][0](_segment(data))
    return data


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damage_is_named_at_open_and_reindex_restores_the_results(built, tmp_path, caplog, damage):
    data = _damaged_copy(built, tmp_path, damage)
    with caplog.at_level(logging.ERROR, logger="ingestion.stores.chunk_store"):
        store = ChunkStore(data, embedder=HashEmbedder())
    try:
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "\n" not in errors[0], errors
        assert store.dense_damage == errors[0]
        assert DAMAGES[damage][1] in store.dense_damage and "copilot documents reindex" in store.dense_damage
        assert all(store.dense_search(q, 8) == [] for q in QUERIES)  # off, not an error
        assert store.lexical_search("dCache pool restart", 5)  # lexical search keeps working

        report = reindex(store)
        assert store.dense_damage is None and not report.resumed
        assert report.chunks == store.lexical.count() == report.embedded
        assert _dense_results(store) == built[1]  # what a fresh ingest answers
    finally:
        store.close()
    reopened = ChunkStore(data, embedder=HashEmbedder())
    try:
        assert reopened.dense_damage is None and _dense_results(reopened) == built[1]
    finally:
        reopened.close()


def test_damage_no_file_check_sees_turns_dense_search_off_at_its_second_failure(built, tmp_path, caplog):
    """Vectors overwritten in place (the files keep their sizes): the first search that fails again after
    re-reading the index turns dense search off, naming reindex, instead of raising; reindex repairs it."""
    data = tmp_path / "data"
    shutil.copytree(built[0], data)
    vectors = _segment(data) / DATA
    vectors.write_bytes(os.urandom(vectors.stat().st_size))
    store = ChunkStore(data, embedder=HashEmbedder())
    try:
        assert store.dense_damage is None  # nothing to see in the files
        for q in QUERIES:
            store.dense_search(q, 8)  # no exception, whatever Chroma makes of the bytes
        if store.dense_damage is not None:
            assert "copilot documents reindex" in store.dense_damage
            assert store.dense_search(QUERIES[0], 8) == []
        reindex(store)
        assert store.dense_damage is None and _dense_results(store) == built[1]
    finally:
        store.close()


def test_a_document_deleted_during_the_rebuild_leaves_no_text_in_the_new_files(built, tmp_path):
    data = _damaged_copy(built, tmp_path, "id map cut short")
    store = ChunkStore(data, embedder=HashEmbedder())
    victim = "tickets/jira_export.json#OPS-105"
    marker = store.lexical.document_chunks(victim)[0].text.split("\n")[-1][:40].encode()
    deleted: list[bool] = []

    def delete_midway(done: int, total: int) -> None:
        if not deleted and done >= total // 2:
            deleted.append(delete_document(store, victim))

    try:
        reindex(store, batch_size=8, on_progress=delete_midway)
        assert deleted == [True] and store.manifest.info(victim) is None
    finally:
        store.close()
    assert all(marker not in p.read_bytes() for p in (data / "chroma").rglob("*") if p.is_file())


def test_while_damaged_reads_and_deletes_work_and_ingest_refuses(built, tmp_path):
    data = _damaged_copy(built, tmp_path, "id map cut short")
    settings = Settings(data_dir=data, embedding_model="test/hash-embedder", _env_file=None)
    store = ChunkStore(data, embedder=HashEmbedder())
    try:
        page, total = store.manifest.page(limit=1000)
        assert total == len(page) > 0
        doc_id = page[0]["doc_id"]
        assert store.lexical.document_chunks(doc_id)
        assert delete_document(store, doc_id) and store.manifest.info(doc_id) is None
    finally:
        store.close()
    extra = tmp_path / "more"
    extra.mkdir()
    (extra / "new.log").write_text("2026-03-01 10:00 [OPS] wn-7 rebooted after a kernel panic\n")
    outcome = run_ingest([extra], settings, progress=False, embedder=HashEmbedder())
    assert outcome.exit_code == EXIT_STORE and "reindex" in outcome.report.error
    store = ChunkStore(data, embedder=HashEmbedder())
    try:
        reindex(store)
        results = _dense_results(store)
        kept = {cid.rsplit("#", 1)[0] for hits in results.values() for cid, _ in hits}
        assert doc_id not in kept  # deleted stays gone
        assert store.dense.count() == store.lexical.count()
    finally:
        store.close()
    assert run_ingest([extra], settings, progress=False, embedder=HashEmbedder()).exit_code == 0


_KILLED_REINDEX = """
import os, signal, sys
sys.path.insert(0, {fixtures!r})
from ingestion_helpers import HashEmbedder
from ingestion.reindex import reindex
from ingestion.stores.chunk_store import ChunkStore
store = ChunkStore({data!r}, embedder=HashEmbedder())
def die(done, total):
    if done >= 16:
        os.kill(os.getpid(), signal.SIGKILL)
reindex(store, batch_size=8, on_progress=die)
"""


def test_a_killed_reindex_converges_when_run_again(built, tmp_path):
    data = _damaged_copy(built, tmp_path, "id map cut short")
    script = _KILLED_REINDEX.format(fixtures=str(Path(__file__).parent / "fixtures" / "ingestion"), data=str(data))
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    store = ChunkStore(data, embedder=HashEmbedder())
    try:
        assert store.dense_damage is not None and "rebuild" in store.dense_damage
        report = reindex(store)
        assert report.resumed and 0 < report.embedded < report.chunks
        assert store.dense_damage is None and _dense_results(store) == built[1]
        again = reindex(store)  # idempotent: a rebuild of a sound index gives the same
        assert not again.resumed and _dense_results(store) == built[1]
    finally:
        store.close()


ADMIN = {"Authorization": "Bearer admin-key"}
READER = {"Authorization": "Bearer reader-key"}


def test_the_api_reports_degraded_and_rebuilds(built, tmp_path):
    data = _damaged_copy(built, tmp_path, "id map cut short")
    keys = tmp_path / "keys.yaml"
    keys.write_text("keys:\n  - name: admin\n    key: admin-key\n    ingest: true\n    delete: true\n"
                    "  - name: reader\n    key: reader-key\n")
    settings = Settings(data_dir=data, keys_file=keys, _env_file=None)
    store = ChunkStore(data, embedder=HashEmbedder())
    with ServerThread(create_app(settings, CopilotService(settings, store, None))) as srv:
        ready = requests.get(srv.url + "/readyz", timeout=10).json()
        assert ready["dense_index"] == "degraded" and ID_MAP in ready["dense_index_detail"]
        assert ready["cpu"] and "without repacking" in ready["cpu"]  # the CPU and what the kernels use on it
        hits = requests.post(srv.url + "/v1/search", headers=READER, timeout=30,
                             json={"question": "dCache pool restart after disk full"})
        assert hits.status_code == 200 and hits.json()["sources"], hits.text  # lexical only
        assert requests.post(srv.url + "/v1/index/reindex", timeout=10).status_code == 401  # no key
        assert requests.post(srv.url + "/v1/index/reindex", headers=READER, timeout=10).status_code == 403
        started = requests.post(srv.url + "/v1/index/reindex", headers=ADMIN, timeout=10)
        assert started.status_code == 202, started.text
        for _ in range(600):  # 60 s at most
            status = requests.get(srv.url + "/v1/index", headers=READER, timeout=10).json()
            if not status["rebuild"]["running"]:
                break
            time.sleep(0.1)
        assert status["dense_index"] == "ok" and status["rebuild"]["error"] is None, status
        assert status["rebuild"]["done"] == status["rebuild"]["total"] == status["chunks"]
        assert requests.get(srv.url + "/readyz", timeout=10).json()["dense_index"] == "ok"
    assert _dense_results(store) == built[1]
    store.close()


def test_a_second_rebuild_while_one_runs_is_refused_and_a_failure_is_reported(monkeypatch):
    """The API answers 409 on :class:`RebuildRunningError`; a rebuild that fails keeps its reason."""
    import threading

    from copilot.serving import reindex_runner
    from copilot.serving.reindex_runner import RebuildRunningError, ReindexRunner
    from ingestion.errors import StoreLockedError

    release = threading.Event()

    def blocked(store, on_progress=None):
        release.wait(30)
        raise StoreLockedError("another ingest is running")

    monkeypatch.setattr(reindex_runner, "reindex", blocked)
    runner = ReindexRunner(store=None)  # type: ignore[arg-type]
    assert runner.start().running
    with pytest.raises(RebuildRunningError):
        runner.start()
    release.set()
    for _ in range(300):  # 30 s at most
        if not runner.state.running:
            break
        time.sleep(0.1)
    assert not runner.state.running and "another ingest is running" in runner.state.error
