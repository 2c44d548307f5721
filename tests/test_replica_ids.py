"""Replicas name themselves truly and share the ingest queue (issue #23, items 3 and 8).

- two real uvicorn servers (port 0) on one store: each is named by the port it bound, the names
  differ, and starting the second leaves the first one's running ingest job running;
- a replica starting under the name of a live one never interrupts that one's running job (only
  a lease that expired does);
- jobs queued on one replica are taken from the store's job table by another: a job that meets
  the store's ingest lock waits in the queue instead of failing, and an idle replica runs it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import httpx
import pytest

from copilot.api.app import create_app
from copilot.api.server import ServerThread
from copilot.config import Settings
from copilot.service import CopilotService
from copilot.serving.ingest_jobs import IngestJob, IngestJobManager, JobQueueConfig
from copilot.serving.job_table import JobTable
from ingestion.stores.chunk_store import ChunkStore

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import HashEmbedder  # noqa: E402

pytestmark = pytest.mark.usefixtures("restore_logging")


def _bulk(folder: Path, n_files: int, per_file: int) -> None:
    folder.mkdir(parents=True)
    for f in range(n_files):
        lines = [json.dumps({"id": f"BULK-{f:03d}-{r:03d}", "title": f"wn{f:03d}-{r:03d} drained",
                             "text": f"Worker node wn{f:03d}-{r:03d} was drained after {r + 3} failed jobs."})
                 for r in range(per_file)]
        (folder / f"bulk-{f:03d}.jsonl").write_text("\n".join(lines) + "\n")


def _server(tmp_path: Path, root: Path) -> ServerThread:
    settings = Settings(data_dir=tmp_path / "data", ingest_root=root, _env_file=None)  # port: the default 8000
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    return ServerThread(create_app(settings, CopilotService(settings, store, None)), port=0).start()


def _job(url: str, job_id: str) -> dict:
    return httpx.get(f"{url}/v1/ingest/{job_id}", timeout=30).json()


def test_two_servers_on_one_store_have_their_own_names_and_leave_each_others_jobs(tmp_path):
    root = tmp_path / "root"
    _bulk(root / "bulk", n_files=20, per_file=300)
    first = _server(tmp_path, root)
    second = None
    try:
        job_id = httpx.post(f"{first.url}/v1/ingest", json={"path": "bulk"}, timeout=30).json()["id"]
        deadline = time.monotonic() + 120
        while (job := _job(first.url, job_id))["progress"]["files_done"] < 1:
            assert job["status"] in ("queued", "running") and time.monotonic() < deadline, job
            time.sleep(0.05)
        second = _server(tmp_path, root)
        ids = [s.server.config.app.state.ingest_jobs.replica_id for s in (first, second)]
        assert ids[0] != ids[1]
        for server, replica in zip((first, second), ids):
            assert f":{server.port}/{os.getpid()}" in replica and server.port != 8000
        job = _job(second.url, job_id)  # the second reports the first's job, still running
        assert job["status"] == "running" and job["replica"] == ids[0], job
        deadline = time.monotonic() + 300
        while (job := _job(second.url, job_id))["status"] in ("queued", "running"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert job["status"] == "succeeded" and job["replica"] == ids[0], job
        assert job["report"]["counts"]["indexed"] == 20
    finally:
        for server in (second, first):
            if server is not None:
                server.stop()


def test_a_replica_starting_under_a_live_ones_name_does_not_interrupt_its_job(tmp_path):
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    table = JobTable(store.db, lease_s=1.0)
    request = {"kind": "path", "files": [], "root": str(tmp_path), "prune": False, "folder": None}
    table.save("live", "running", "vm:8000/7", time.time(), request, {"id": "live"})
    manager = IngestJobManager(store, tmp_path / "uploads", JobQueueConfig("vm:8000/7", lease_s=1.0))
    try:
        assert table.get("live").status == "running"  # its owner may well be alive: its lease is fresh
        time.sleep(1.3)  # no heartbeat: the owner is gone
        assert table.get("live").status == "interrupted"
    finally:
        manager.close()
        store.close()


def _wait(manager: IngestJobManager, job_id: str, statuses: tuple[str, ...], timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while (job := manager.get(job_id)).status not in statuses:
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
    return asdict(job)


def test_a_job_queued_on_one_replica_waits_for_the_store_and_is_run_by_another(tmp_path):
    root = tmp_path / "root"
    _bulk(root / "q", n_files=2, per_file=3)
    files = sorted((root / "q").iterdir())
    stores = [ChunkStore(tmp_path / "data", embedder=HashEmbedder()) for _ in range(2)]
    a = IngestJobManager(stores[0], tmp_path / "uploads", JobQueueConfig("a", ingest_root=root, poll_s=0.2))
    b = None
    try:
        with stores[0].ingest_lock():  # another ingest (a `copilot ingest`, say) holds the store
            job = a.submit(IngestJob(a.new_id(), "path", files, root / "q"))
            time.sleep(1.0)  # a takes it, meets the lock, puts it back: queued, not failed
            waiting = _wait(a, job.id, ("queued",))
            assert any(w.startswith("waited: another ingest is running") for w in waiting["warnings"]), waiting
            a.close()
            b = IngestJobManager(stores[1], tmp_path / "uploads", JobQueueConfig("b", ingest_root=root, poll_s=0.2))
        done = _wait(b, job.id, ("succeeded", "partial", "failed"))
        assert done["status"] == "succeeded" and done["replica"] == "b", done
        assert done["report"]["counts"]["indexed"] == 2
        assert any("taken by replica b from a" in w for w in done["warnings"])
        # both replicas idle: a queue of jobs submitted to b runs to the end
        a = IngestJobManager(stores[0], tmp_path / "uploads", JobQueueConfig("a2", ingest_root=root, poll_s=0.2))
        jobs = [b.submit(IngestJob(b.new_id(), "path", [f], root / "q")) for f in files]
        for j in jobs:
            assert _wait(b, j.id, ("succeeded", "partial", "failed"))["status"] == "succeeded"
    finally:
        a.close()
        if b is not None:
            b.close()
        for store in stores:
            store.close()
