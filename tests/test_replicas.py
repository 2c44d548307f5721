"""Two `copilot serve` replicas on one shared store (a real PostgreSQL with pgvector), 127.0.0.1 only.

- ingest through one replica, the other answers with the new document among its sources and
  reports the job (jobs live in the store);
- 8 clients over both replicas for ``OPSCOPILOT_LOAD_S`` seconds (default 60): no 5xx but
  queue-full 503s, each with Retry-After;
- a replica killed (SIGKILL) mid-ingest: its job turns ``interrupted`` when its lease expires,
  the other replica resumes it, and the store converges to every document, nothing pending.

Each replica is a real process with the embedded models (the draft model is off so that the
two replicas do not also build one in the background on a 2-core machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time

import httpx
import pytest

from copilot.api.server import free_port
from evals.load_test import QUESTIONS, ServerProcess, load, summarise
from ingestion.stores.database import open_database

READY_TIMEOUT_S = 600.0
JOB_TIMEOUT_S = 300.0
LOAD_S = float(os.environ.get("OPSCOPILOT_LOAD_S", "60"))
LEASE_S = 2


@pytest.fixture(scope="module")
def replicas(postgres_url, tmp_path_factory):
    """Two replicas (ids a and b) on one PostgreSQL schema and one data dir (shared uploads)."""
    tmp = tmp_path_factory.mktemp("replicas")
    collection = f"replicas_{os.getpid()}"
    base = {**os.environ, "HF_HUB_OFFLINE": "1", "COPILOT_DATABASE_URL": postgres_url,
            "COPILOT_COLLECTION": collection, "COPILOT_DATA_DIR": str(tmp / "data"),
            "COPILOT_DRAFT_MODEL": "", "COPILOT_QUEUE_SIZE": "2", "COPILOT_JOB_LEASE_S": str(LEASE_S),
            "COPILOT_MAX_NEW_TOKENS": "16", "COPILOT_TORCH_THREADS": "1"}
    for key in ("COPILOT_API_KEYS", "COPILOT_REQUIRE_KEY_FOR_ASK", "COPILOT_CHROMA_URL"):
        base.pop(key, None)
    servers = {}
    try:
        for name in ("a", "b"):
            servers[name] = ServerProcess(free_port(), {**base, "COPILOT_REPLICA_ID": name}, READY_TIMEOUT_S,
                                          tmp / f"replica-{name}.log")
        for server in servers.values():
            server.wait_ready()
        yield {"servers": servers, "url": postgres_url, "collection": collection, "tmp": tmp}
    finally:
        for server in servers.values():
            if server.proc.poll() is None:
                server.stop()


def _wait_job(url: str, job_id: str, done: tuple[str, ...] = ("succeeded", "partial", "failed")) -> dict:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        job = httpx.get(f"{url}/v1/ingest/{job_id}", timeout=10).json()
        if job["status"] in done:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not {done} after {JOB_TIMEOUT_S} s: {job}")


def test_ingest_through_one_replica_answers_from_the_other(replicas):
    a, b = replicas["servers"]["a"].url, replicas["servers"]["b"].url
    record = {"id": "TAPE-4711", "title": "Tape robot TLS-4 gripper jammed",
              "text": "The gripper of tape robot TLS-4 jammed on slot 1187; vendor replaced the gripper finger."}
    resp = httpx.post(f"{a}/v1/ingest", files={"files": ("tape.jsonl", json.dumps(record) + "\n")},
                      data={"folder": "replicas"}, timeout=30)
    assert resp.status_code == 202, resp.text
    job = _wait_job(b, resp.json()["id"])  # the other replica reports the job: jobs live in the store
    assert job["status"] == "succeeded" and job["replica"] == "a", job
    listed = httpx.get(f"{b}/v1/ingest", timeout=10).json()
    assert job["id"] in [j["id"] for j in listed["jobs"]]

    answer = httpx.post(f"{b}/v1/ask", json={"question": "What jammed on tape robot TLS-4?", "max_new_tokens": 8},
                        timeout=120)
    assert answer.status_code == 200, answer.text
    assert "replicas/tape.jsonl#TAPE-4711" in [s["doc_id"] for s in answer.json()["sources"]]
    # a filtered question too (the embedded store used to 500 on these after another process wrote)
    filtered = httpx.post(f"{b}/v1/search", json={"question": "gripper jammed", "filters": {"ticket_key": "TAPE-4711"}},
                          timeout=60)
    assert filtered.status_code == 200, filtered.text
    assert [s["doc_id"] for s in filtered.json()["sources"]] == ["replicas/tape.jsonl#TAPE-4711"]


def test_eight_clients_over_both_replicas(replicas, tmp_path):
    urls = [s.url for s in replicas["servers"].values()]
    questions = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines() if line.strip()]
    args = argparse.Namespace(clients=8, duration=LOAD_S, max_requests=400, sequential=2, max_new_tokens=16,
                              max_sources=3, request_timeout=120.0)
    samples, wall = asyncio.run(load(urls, "none", "opscopilot", questions, args))
    summary = summarise(samples, wall)
    (tmp_path / "load.json").write_text(json.dumps(summary, indent=2))
    conc = summary["concurrent"]
    print(f"8 clients x {LOAD_S:.0f} s over 2 replicas: {conc['ok']} answers, {conc['answers_per_min']}/min, "
          f"{conc['http_503']} x 503, p50 {conc['latency_ms_p50']} ms")
    assert conc["ok"] > 0
    assert conc["http_5xx_other"] == 0 and summary["sequential"]["http_5xx_other"] == 0
    assert conc["http_503_without_retry_after"] == 0
    assert conc["connection_errors"] == 0


def _corpus_upload(n_files: int, per_file: int) -> list[tuple[str, tuple[str, bytes]]]:
    files = []
    for f in range(n_files):
        lines = [json.dumps({"id": f"BULK-{f:03d}-{r:03d}", "title": f"Batch host wn{f:03d}-{r:03d} drained",
                             "text": f"Worker node wn{f:03d}-{r:03d} was drained after {r + 3} failed jobs on "
                                     f"partition p{f % 7}; the scratch disk was full and was cleaned."})
                 for r in range(per_file)]
        files.append(("files", (f"bulk-{f:03d}.jsonl", ("\n".join(lines) + "\n").encode())))
    return files


def test_replica_killed_mid_ingest_is_resumed_by_the_other(replicas):
    a_server, b = replicas["servers"]["a"], replicas["servers"]["b"].url
    n_files, per_file = 40, 20
    resp = httpx.post(f"{a_server.url}/v1/ingest", files=_corpus_upload(n_files, per_file),
                      data={"folder": "bulk"}, timeout=60)
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while True:  # kill replica a once the job has written part of the corpus
        job = httpx.get(f"{a_server.url}/v1/ingest/{job_id}", timeout=10).json()
        assert job["status"] in ("queued", "running"), f"finished before the kill: {job['status']}"
        if job["progress"]["documents_written"] > 0:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    a_server.proc.send_signal(signal.SIGKILL)
    a_server.proc.wait(timeout=30)

    job = _wait_job(b, job_id, done=("interrupted",))  # a's lease expires
    assert job["replica"] == "a"
    assert httpx.post(f"{b}/v1/ingest/{job_id}/resume", timeout=30).status_code == 202
    assert httpx.post(f"{b}/v1/ingest/{job_id}/resume", timeout=30).status_code == 409  # already queued again
    job = _wait_job(b, job_id)
    assert job["status"] == "succeeded" and job["replica"] == "b", job
    assert any("resumed" in w for w in job["warnings"])
    assert job["report"]["counts"]["failed"] == 0

    db = open_database(replicas["tmp"], replicas["url"], replicas["collection"])
    try:
        bulk = db.query("SELECT COUNT(*) FROM documents WHERE source LIKE 'bulk/%'")[0][0]
        assert bulk == n_files * per_file
        assert db.query("SELECT COUNT(*) FROM pending")[0][0] == 0
        chunks = db.query("SELECT COUNT(*) FROM chunks")[0][0]
        assert db.query("SELECT COUNT(*) FROM dense_chunks")[0][0] == chunks
    finally:
        db.close()
    # the resumed documents answer
    found = httpx.post(f"{b}/v1/search", json={"question": "wn039-019 drained", "max_sources": 3}, timeout=60).json()
    assert "bulk/bulk-039.jsonl#BULK-039-019" in [s["doc_id"] for s in found["sources"]], found
