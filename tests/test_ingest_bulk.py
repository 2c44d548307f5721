"""Bulk ingest of one large JSON Lines file (issue 23, item 8): batching, progress and ETA inside
the file, a report when SIGINT or SIGTERM stops the run, and resuming it.

The files are the benchmark's synthetic tickets (:mod:`evals.ticket_corpus`); stores are real
(SQLite + embedded Chroma) with the model-free ``HashEmbedder`` (real tokenizer and chunker).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import REPO_ROOT, HashEmbedder, snapshot  # noqa: E402

from evals.ticket_corpus import write_tickets  # noqa: E402
from ingestion.interrupt import IngestInterrupted, stop_on_signals  # noqa: E402
from ingestion.pipeline import IngestOptions, IngestProgress, ingest_paths  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402

CLI_WITH_HASH_EMBEDDER = (
    "import sys; sys.path.insert(0, %r); import ingestion.embedding; from ingestion_helpers import HashEmbedder; "
    "ingestion.embedding.Embedder = lambda *a, **k: HashEmbedder(); from copilot.cli.main import app; app()"
) % str(Path(__file__).parent / "fixtures" / "ingestion")
"""``python -c`` code running the ``copilot`` command line over stores built with ``HashEmbedder``."""


def assert_same_store(a: ChunkStore, b: ChunkStore) -> None:
    """Both stores hold the same manifest, chunk rows, FTS rows and dense records (vectors compared as arrays)."""
    left, right = snapshot(a), snapshot(b)
    for part in ("docs", "chunks", "fts_rows", "pending"):
        assert left[part] == right[part], part
    assert left["chroma"].keys() == right["chroma"].keys()
    for cid, (text, meta, vector) in left["chroma"].items():
        assert (text, meta) == right["chroma"][cid][:2]
        np.testing.assert_array_equal(vector, right["chroma"][cid][2])


class StopAfter:
    """``on_progress`` callback that raises ``IngestInterrupted(SIGTERM)`` once ``batches``
    batches were written (what a SIGTERM under ``stop_on_signals`` does at that point)."""

    def __init__(self, batches: int) -> None:
        self.batches = batches
        self.seen: list[IngestProgress] = []

    def __call__(self, p: IngestProgress) -> None:
        self.seen.append(p)
        if p.current is None and p.chunks_written >= self.batches * 100:
            raise IngestInterrupted(signal.SIGTERM)


@pytest.fixture
def tickets(tmp_path: Path) -> Path:
    """1,000 synthetic tickets in one JSON Lines file (one chunk each)."""
    path = tmp_path / "src" / "tickets.jsonl"
    write_tickets(path, 1000, seed=5)
    return path


def test_one_write_per_batch_and_progress_inside_the_file(tmp_path, tickets):
    embedder = HashEmbedder()
    store = ChunkStore(tmp_path / "data", embedder=embedder)
    seen: list[IngestProgress] = []
    report = ingest_paths([tickets], store, progress=False, on_progress=seen.append,
                          options=IngestOptions(batch_chunks=100))
    entry = report.files[0]
    assert (entry.status, entry.documents, entry.written_documents, entry.chunks) == ("indexed", 1000, 1000, 1000)
    assert store.manifest.count() == 1000 == store.lexical.count()
    assert embedder.calls == math.ceil(1000 / 100)  # one embed (one apply) per batch of 100 chunks
    inside = [p for p in seen if p.files_done == 0 and p.records_total]
    assert inside and all(p.records_total == 1000 for p in inside)
    assert len({p.records_done for p in inside}) >= 10  # after each of the 10 batches at least
    assert [p.bytes_done for p in seen] == sorted(p.bytes_done for p in seen)
    assert seen[-1].bytes_done == seen[-1].bytes_total == tickets.stat().st_size
    assert all(p.eta_s is not None and p.eta_s >= 0 for p in inside if p.records_done)
    assert seen[-1].eta_s == 0
    again = ingest_paths([tickets], store, progress=False)
    assert again.files[0].status == "unchanged" and embedder.calls == 10
    store.close()


def test_a_stop_keeps_what_was_written_reports_the_rest_and_a_rerun_resumes(tmp_path, tickets):
    clean = ChunkStore(tmp_path / "clean", embedder=HashEmbedder())
    ingest_paths([tickets], clean, progress=False, options=IngestOptions(batch_chunks=100))
    other = tickets.parent / "later.jsonl"
    write_tickets(other, 10, seed=6)
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    with pytest.raises(IngestInterrupted) as stopped:
        ingest_paths([tickets, other], store, progress=False, on_progress=StopAfter(3),
                     options=IngestOptions(batch_chunks=100))
    report = stopped.value.report
    assert stopped.value.exit_code == 143 and report is not None
    assert report.error.startswith("interrupted by SIGTERM: 300 document(s), 300 chunk(s) written")
    first, second = report.files
    assert first.status == "failed" and first.written_documents == 300 and "re-run to resume" in first.reason
    assert (second.source, second.status) == ("later.jsonl", "failed") and "not ingested" in second.reason
    assert store.manifest.count() == 300 and store.db.query("SELECT COUNT(*) FROM pending")[0][0] == 0
    assert store.manifest.files.get(str(tickets)) is None  # not fingerprinted: parsed again next run
    resumed = ingest_paths([tickets], store, progress=False, options=IngestOptions(batch_chunks=100))
    assert resumed.files[0].written_documents == 700 and resumed.recovered_documents == 0
    assert_same_store(store, clean)
    clean.close()
    store.close()


class _KilledMidWrite(HashEmbedder):
    """Raises ``KeyboardInterrupt`` on its ``at``-th embed call: a Ctrl-C while a batch is encoded."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def embed_array(self, texts):
        if self.calls + 1 == self.at:
            self.calls += 1
            raise KeyboardInterrupt
        return super().embed_array(texts)


def test_ctrl_c_during_a_batch_leaves_it_unstored_and_the_rerun_converges(tmp_path, tickets):
    clean = ChunkStore(tmp_path / "clean", embedder=HashEmbedder())
    ingest_paths([tickets], clean, progress=False, options=IngestOptions(batch_chunks=100))
    store = ChunkStore(tmp_path / "data", embedder=_KilledMidWrite(at=4))
    with pytest.raises(IngestInterrupted) as stopped:
        ingest_paths([tickets], store, progress=False, options=IngestOptions(batch_chunks=100))
    assert stopped.value.signal_name == "SIGINT" and stopped.value.exit_code == 130
    assert stopped.value.report.files[0].written_documents == 300 == store.manifest.count()
    resumed = ingest_paths([tickets], store, progress=False, options=IngestOptions(batch_chunks=100))
    assert resumed.files[0].written_documents == 700
    assert_same_store(store, clean)
    clean.close()
    store.close()


def test_stop_on_signals_turns_sigterm_into_ingest_interrupted_once():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(IngestInterrupted) as stopped:
        with stop_on_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises at the next bytecode
    assert stopped.value.signal_name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


def _stored_documents(data_dir: Path) -> int:
    db = data_dir / "index.sqlite3"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_copilot_ingest_writes_its_report_when_stopped_by_a_signal(tmp_path, clean_copilot_env, sig):
    path = tmp_path / "src" / "tickets.jsonl"
    write_tickets(path, 2000, seed=7)
    report_file = tmp_path / "report.json"
    cmd = [sys.executable, "-c", CLI_WITH_HASH_EMBEDDER, "ingest", str(path), "--report", str(report_file)]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _stored_documents(tmp_path / "data") == 0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the ingest finished before it could be stopped"
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, stderr[-2000:]
    data = json.loads(report_file.read_text())
    stored = _stored_documents(tmp_path / "data")
    assert data["error"].startswith(f"interrupted by {signal.Signals(sig).name}")
    assert data["outcome"] == "failed" and data["files"][0]["status"] == "failed"
    assert 0 < data["files"][0]["written_documents"] == stored < 2000
    assert "re-run to resume" in stderr
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(report_file.read_text())["files"][0]["written_documents"] == 2000 - stored
    assert _stored_documents(tmp_path / "data") == 2000


def test_the_api_job_progress_carries_records_bytes_and_eta():
    from dataclasses import asdict

    from copilot.api.schemas.ingest import IngestProgressOut

    p = IngestProgress(0, 1, "tickets.jsonl", 256, 256, 12.5, 256, 1000, 139_000, 543_000, 36.8)
    shown = IngestProgressOut(**asdict(p))
    assert (shown.records_done, shown.records_total, shown.bytes_total, shown.eta_s) == (256, 1000, 543_000, 36.8)


def test_an_api_ingest_job_reports_progress_inside_its_one_large_file(tmp_path):
    from fastapi.testclient import TestClient

    from copilot.api.app import create_app
    from copilot.config import Settings
    from copilot.service import CopilotService

    root = tmp_path / "root"
    write_tickets(root / "tickets.jsonl", 3000, seed=8)
    settings = Settings(data_dir=tmp_path / "data", ingest_root=root, api_keys=["adm"], _env_file=None)
    store = ChunkStore(settings.data_dir, embedder=HashEmbedder())
    key = {"Authorization": "Bearer adm"}
    inside: list[dict] = []
    with TestClient(create_app(settings, CopilotService(settings, store, None))) as client:
        r = client.post("/v1/ingest", json={"path": "tickets.jsonl"}, headers=key)
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + 120
        while (job := client.get(f"/v1/ingest/{r.json()['id']}", headers=key).json())["status"] in ("queued",
                                                                                                    "running"):
            p = job["progress"]
            if p["files_done"] == 0 and 0 < p["records_done"] < p["records_total"]:
                inside.append(p)
            assert time.monotonic() < deadline, job
            time.sleep(0.05)
    assert job["status"] == "succeeded", job
    assert inside and all(p["records_total"] == 3000 and p["eta_s"] is not None for p in inside)
    assert 0 < inside[0]["bytes_done"] < inside[0]["bytes_total"] == (root / "tickets.jsonl").stat().st_size
