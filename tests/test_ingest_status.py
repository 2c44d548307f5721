"""Honest ingest statuses (issue #23, item 2): a job or run is ``succeeded`` only when every file
is; ``partial`` or ``failed`` with counts otherwise; a store write that fails (here: a real
file-size limit, ``RLIMIT_FSIZE``, which makes every write past it fail with ``EFBIG`` as a full
disk fails with ``ENOSPC``) marks the files of the unwritten batch ``failed`` with the reason,
never ``unchanged``, and what was stored before stays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from copilot.api.app import create_app
from copilot.config import Settings
from copilot.service import CopilotService
from ingestion.pipeline import ingest_paths
from ingestion.report import FileReport, IngestReport
from ingestion.stores.chunk_store import ChunkStore

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import HashEmbedder  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BAD_JSON = '{"tickets": [{"key": "OPS-1", "summary": "truncated'  # a JSON export cut short


def _record(key: str, text: str) -> str:
    return json.dumps({"id": key, "title": f"ticket {key}", "text": text}) + "\n"


@pytest.mark.parametrize("statuses, failed_records, error, outcome", [
    (["indexed", "unchanged", "skipped-empty"], 0, None, "succeeded"),
    (["indexed", "failed"], 0, None, "partial"),
    (["unchanged"], 2, None, "partial"),
    (["failed"] * 10, 0, None, "failed"),
    (["failed", "skipped", "skipped-empty"], 0, None, "failed"),
    (["indexed"], 0, "store write failed: disk I/O error", "failed"),
])
def test_run_outcome(statuses, failed_records, error, outcome):
    report = IngestReport(files=[FileReport(path=f"/x/{i}", source=str(i), status=s) for i, s in enumerate(statuses)],
                          error=error)
    if failed_records:
        report.files[0].failed_records = [{"where": f"line {i}", "reason": "blank key"} for i in range(failed_records)]
    assert report.outcome == outcome
    assert report.to_dict()["outcome"] == outcome


@pytest.fixture
def api(tmp_path):
    """A real app over an empty store (model-free embedder), its ingest root, and its data dir."""
    root = tmp_path / "root"
    root.mkdir()
    settings = Settings(data_dir=tmp_path / "data", ingest_root=root, _env_file=None)
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    with TestClient(create_app(settings, CopilotService(settings, store, None))) as client:
        yield client, root, tmp_path


def _finished(client, job_id: str, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        job = client.get(f"/v1/ingest/{job_id}").json()
        if job["status"] not in ("queued", "running"):
            return job
        assert time.monotonic() < deadline, f"job still {job['status']} after {timeout_s} s"
        time.sleep(0.05)


def test_a_path_job_where_every_file_fails_is_failed_with_its_counts(api):
    client, root, tmp = api
    (root / "broken").mkdir()
    for i in range(10):
        (root / "broken" / f"export-{i}.json").write_text(BAD_JSON)
    r = client.post("/v1/ingest", json={"path": "broken"})
    assert r.status_code == 202, r.text
    job = _finished(client, r.json()["id"])
    assert job["status"] == "failed", job
    assert job["report"]["outcome"] == "failed" and job["report"]["counts"]["failed"] == 10
    assert "no file was ingested: 10 of 10 file(s) failed" in job["error"]
    # the answer names no server folder: report paths are relative to the ingest root
    body = json.dumps(job)
    assert str(tmp) not in body and os.path.realpath(tmp) not in body
    assert sorted(f["path"] for f in job["report"]["files"]) == [f"broken/export-{i}.json" for i in range(10)]


def test_a_path_job_with_some_failed_files_is_partial(api):
    client, root, _ = api
    (root / "mixed").mkdir()
    (root / "mixed" / "good.jsonl").write_text(_record("OPS-1", "The tape robot jammed and was reset."))
    (root / "mixed" / "bad.json").write_text(BAD_JSON)
    job = _finished(client, client.post("/v1/ingest", json={"path": "mixed"}).json()["id"])
    assert job["status"] == "partial", job
    assert job["report"]["counts"]["indexed"] == 1 and job["report"]["counts"]["failed"] == 1
    assert job["error"] is None and "1 of 2 file(s) failed: see the report" in job["warnings"]
    # a partial job can be run again (once the cause is fixed)
    (root / "mixed" / "bad.json").write_text(_record("OPS-2", "The pool was drained."))
    r = client.post(f"/v1/ingest/{job['id']}/resume")
    assert r.status_code == 202, r.text
    again = _finished(client, job["id"])
    assert again["status"] == "succeeded" and again["report"]["counts"] == {
        "indexed": 1, "unchanged": 1, "skipped-empty": 0, "skipped": 0, "failed": 0}


_LIMITED_INGEST = """
import json, resource, signal, sys
from pathlib import Path
from copilot.config import Settings
from ingestion.ingest_command import run_ingest

settings = Settings(data_dir=Path(sys.argv[1]), _env_file=None)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
outcome = run_ingest([Path(sys.argv[2])], settings, progress=False)
print(json.dumps({"exit_code": outcome.exit_code, "report": outcome.report.to_dict()}))
"""


@pytest.mark.slow
def test_a_store_write_that_fails_marks_the_files_failed_and_keeps_what_was_stored(tmp_path, embedder):
    data, corpus = tmp_path / "data", tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text(_record("A-1", "Disk cleaned on wn01 after the scratch area filled up."))
    store = ChunkStore(data, embedder=embedder)
    assert ingest_paths([corpus], store, progress=False).ok
    store.close()
    (corpus / "b.jsonl").write_text(_record("B-1", "Tape robot TLS-4 gripper jammed on slot 1187."))
    (corpus / "c.jsonl").write_text(_record("C-1", "The BGP session to sw-border-01 flapped twice."))

    # the store opens (reads), the lock file takes its few bytes, every page write to the store fails
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", _LIMITED_INGEST, str(data), str(corpus), "40000"],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    report = result["report"]
    assert result["exit_code"] == 4  # EXIT_STORE, as `copilot ingest` exits
    assert report["error"] and "store write failed" in report["error"]
    files = {f["source"]: f for f in report["files"]}
    assert files["a.jsonl"]["status"] == "unchanged"
    for name in ("b.jsonl", "c.jsonl"):
        assert files[name]["status"] == "failed", files[name]
        assert files[name]["reason"].startswith("not stored: store write failed")
        assert files[name]["written_documents"] == files[name]["written_chunks"] == 0
    assert report["outcome"] == "failed" and report["counts"]["failed"] == 2 and report["chunks_written"] == 0
    assert "Traceback" not in proc.stderr

    # nothing stored before was lost; a run without the limit stores the rest
    store = ChunkStore(data, embedder=embedder)
    try:
        assert [r["doc_id"] for r in store.manifest.page(0, 10)[0]] == ["a.jsonl#A-1"]
        assert store.lexical_search("scratch", 3)[0].chunk.doc_id == "a.jsonl#A-1"
        again = ingest_paths([corpus], store, progress=False)
        assert again.ok and again.counts["indexed"] == 2 and again.counts["unchanged"] == 1
        assert store.manifest.count() == 3
    finally:
        store.close()


@pytest.mark.slow  # the command loads the embedding model for the store's index signature
def test_copilot_ingest_prints_the_outcome_and_exits_1_when_every_file_fails(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"export-{i}.json").write_text(BAD_JSON)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COPILOT_")}
    env.update(HF_HUB_OFFLINE="1", COPILOT_DATA_DIR=str(tmp_path / "data"))
    proc = subprocess.run([sys.executable, "-m", "ingestion", str(corpus), "--report", str(tmp_path / "r.json")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr[-2000:]
    printed = json.loads(proc.stdout)
    assert printed["outcome"] == "failed" and printed["failed"] == 3
    assert json.loads((tmp_path / "r.json").read_text())["outcome"] == "failed"


def test_a_batch_that_failed_before_its_deletions_loses_no_stored_document(tmp_path):
    """Re-ingesting from another folder renames every source (old names deleted, new ones written
    in one batch). When the dense write fails first (a full disk), the next run's recovery must
    keep the old documents, not complete deletions that never began."""
    from ingestion.errors import StoreError

    src = tmp_path / "src" / "site2"
    src.mkdir(parents=True)
    for name in ("a", "b"):
        (src / f"{name}.md").write_text(f"# Post-mortem {name}\n\nThe {name} pool was drained and restarted.\n")
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    ingest_paths([src], store, root=tmp_path / "src", progress=False)
    before = sorted(r["doc_id"] for r in store.manifest.page()[0])
    assert before == ["site2/a.md#a", "site2/b.md#b"]

    def full_disk(*_a, **_k):
        raise OSError(28, "No space left on device")

    store.dense.upsert = full_disk  # the batch's first dense write fails, before any deletion
    with pytest.raises(StoreError):
        ingest_paths([src], store, root=src, progress=False)
    store.close()

    again = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    assert again.recover() and sorted(r["doc_id"] for r in again.manifest.page()[0]) == before
    assert again.lexical_search("pool drained", 5) and again.dense.count() == again.lexical.count() == 2
    report = ingest_paths([src], again, root=src, progress=False)  # with space: the rename goes through
    assert report.ok and len(again.manifest.page()[0]) == 2
    assert sorted(r["doc_id"] for r in again.manifest.page()[0]) == ["a.md#a", "b.md#b"]
