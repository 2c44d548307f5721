"""Kill-and-resume with a real SIGKILL of an ingest subprocess; the result must equal one clean run,
on the embedded store (SQLite + Chroma) and on the shared one (PostgreSQL + pgvector) alike."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import FIXTURES, REPO_ROOT, copy_corpus, shared_embedder, snapshot  # noqa: E402

from ingestion.pipeline import ingest_paths  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402
from ingestion.stores.database import open_database  # noqa: E402

WORKER = FIXTURES / "ingest_worker.py"
TIMEOUT_S = 240


class Worker:
    """An ingest subprocess whose stdout lines can be awaited with a deadline."""

    def __init__(self, corpus: Path, data_dir: Path, log: Path, *extra: str) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.stderr = open(log, "ab")
        self.proc = subprocess.Popen([sys.executable, str(WORKER), str(corpus), str(data_dir), *extra],
                                     stdout=subprocess.PIPE, stderr=self.stderr, cwd=REPO_ROOT, env=env, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, prefix: str) -> str:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"worker exited (rc={self.proc.wait()}) before {prefix!r}")
            if line.startswith(prefix):
                return line
        self.kill()
        raise AssertionError(f"timed out waiting for {prefix!r}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=30) == -signal.SIGKILL
        self.stderr.close()

    def finish(self) -> dict:
        line = self.wait_for("DONE ")
        assert self.proc.wait(timeout=60) == 0
        self.stderr.close()
        return json.loads(line[len("DONE "):])


def make_v2(corpus: Path) -> None:
    """Edit the corpus: shrink a ticket, change an ELOG entry, drop a file, add one."""
    jira = corpus / "tickets" / "jira.json"
    data = json.loads(jira.read_text())
    data["issues"][0]["fields"]["description"] = "CVMFS cache too small."
    data["issues"][0]["fields"]["comment"]["comments"] = []
    jira.write_text(json.dumps(data, indent=1))
    elog = corpus / "logbooks" / "ops.elog"
    elog.write_text(elog.read_text().replace("0 errors in the csm check", "2 errors in the csm check, rerun OK"))
    (corpus / "misc" / "notes.txt").unlink()
    (corpus / "misc" / "new.jsonl").write_text(json.dumps({"id": "KB-9", "text": "UPS-2 battery replaced."}) + "\n")


@pytest.fixture(params=["embedded", "shared"])
def store_kind(request, pg_collection) -> dict:
    """How to open the store under test: ChunkStore keyword arguments and the worker's flags."""
    if request.param == "embedded":
        return {"kwargs": {}, "flags": []}
    url = request.getfixturevalue("postgres_url")
    return {"kwargs": {"database_url": url, "collection": pg_collection},
            "flags": ["--database-url", url, "--collection", pg_collection]}


def test_sigkill_mid_run_then_rerun_equals_clean_run(tmp_path, store_kind):
    corpus = copy_corpus(tmp_path / "corpus")
    killed = tmp_path / "killed-store"
    log = tmp_path / "worker.log"
    flags = store_kind["flags"]

    # 1. first ingest, killed at an arbitrary moment after the second dense write
    w = Worker(corpus, killed, log, *flags)
    w.wait_for("CHROMA_UPSERT 2")
    w.kill()

    # 2. the corpus changes; the next run is killed between a dense write and its database commit
    make_v2(corpus)
    w = Worker(corpus, killed, log, "--pause-at", "1", "--prune", *flags)
    w.wait_for("PAUSED")
    w.kill()
    db = open_database(killed, store_kind["kwargs"].get("database_url"),
                       store_kind["kwargs"].get("collection", "opscopilot"))
    pending = dict(db.query("SELECT doc_id, op FROM pending"))
    stored = {r[0] for r in db.query("SELECT doc_id FROM documents")}
    db.close()
    # the kill hit both kinds of interrupted write: a changed stored document and a new one
    assert pending.get("logbooks/ops.elog#42") == "write" and "logbooks/ops.elog#42" in stored
    assert any(doc_id not in stored for doc_id in pending)

    # 3. a plain re-run completes and recovers the interrupted documents
    report = Worker(corpus, killed, log, "--prune", *flags).finish()
    assert report["recovered_documents"] >= 1
    assert report["counts"]["failed"] == 0

    # 4. one clean run of the final corpus, in-process
    clean_kwargs = dict(store_kind["kwargs"])
    if clean_kwargs:  # the shared store: another schema of the same server
        clean_kwargs["collection"] = "clean_" + clean_kwargs["collection"]
    clean_store = ChunkStore(tmp_path / "clean-store", embedder=shared_embedder(), **clean_kwargs)
    ingest_paths([corpus], clean_store, prune=True, progress=False)
    clean = snapshot(clean_store)
    resumed_store = ChunkStore(killed, embedder=shared_embedder(), **store_kind["kwargs"])
    resumed = snapshot(resumed_store)

    assert resumed["pending"] == clean["pending"] == 0
    assert resumed["docs"] == clean["docs"]
    assert resumed["chunks"] == clean["chunks"]
    assert resumed["fts_rows"] == clean["fts_rows"] == len(clean["chunks"])
    assert sorted(resumed["chroma"]) == sorted(clean["chroma"]) == sorted(c[0] for c in clean["chunks"])
    for chunk_id, (text, meta, emb) in clean["chroma"].items():
        r_text, r_meta, r_emb = resumed["chroma"][chunk_id]
        assert (r_text, r_meta) == (text, meta)
        np.testing.assert_allclose(r_emb, emb, atol=1e-4)
    assert not any(d[0].startswith("misc/notes.txt") for d in resumed["docs"])
    query = "pool enabled again csm check"
    assert [h.chunk.chunk_id for h in resumed_store.lexical_search(query, 5)] == \
        [h.chunk.chunk_id for h in clean_store.lexical_search(query, 5)]
    # and a further run changes nothing
    assert ingest_paths([corpus], resumed_store, prune=True, progress=False).chunks_written == 0
    resumed_store.close()
    clean_store.close()


def test_lock_is_released_when_a_run_is_killed(tmp_path, store_kind):
    """The lock (flock, or a PostgreSQL advisory lock) dies with the process: a killed run never
    blocks the next one."""
    corpus = copy_corpus(tmp_path / "corpus")
    store_dir = tmp_path / "store"
    w = Worker(corpus, store_dir, tmp_path / "w.log", "--pause-at", "1", *store_kind["flags"])
    w.wait_for("PAUSED")
    store = ChunkStore(store_dir, embedder=shared_embedder(), **store_kind["kwargs"])
    from ingestion.errors import StoreLockedError

    with pytest.raises(StoreLockedError):  # a prune run must be alone (a plain one shares a shared store's lock)
        ingest_paths([corpus], store, prune=True, progress=False)
    w.kill()
    report = ingest_paths([corpus], store, progress=False)
    assert report.recovered_documents >= 1 and report.counts["failed"] == 0
    store.close()
