"""Parallel ingest runs on one store (issue #23 item 8: replicas work through queued jobs at once).

The shared store (PostgreSQL + pgvector, the ``pgserver`` fixture) runs two ``ingest_paths``
processes side by side; the embedded store (SQLite + embedded Chroma) keeps one run at a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import REPO_ROOT, HashEmbedder, snapshot  # noqa: E402

from ingestion.errors import StoreLockedError  # noqa: E402
from ingestion.pipeline import ingest_paths, ingest_run  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402
from ingestion.stores.database import SqliteDatabase  # noqa: E402

WORKER = Path(__file__).parent / "fixtures" / "ingestion" / "parallel_worker.py"


def _tickets(folder: Path, tag: str, n_files: int = 4, per_file: int = 6) -> None:
    folder.mkdir(parents=True)
    for f in range(n_files):
        lines = [json.dumps({"id": f"{tag}-{f}-{r}", "title": f"{tag} wn{f}{r} drained",
                             "text": f"Worker node {tag}-wn{f}{r} was drained after {r + 3} failed jobs on dc-{tag}."})
                 for r in range(per_file)]
        (folder / f"{tag}-{f}.jsonl").write_text("\n".join(lines) + "\n")


def _start(data: Path, root: Path, folders: list[Path], url: str, collection: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, str(WORKER), str(data), str(root), *map(str, folders),
                             "--database-url", url, "--collection", collection, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, env=env)


def _done(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    line = next(line for line in out.splitlines() if line.startswith("DONE "))
    return json.loads(line[len("DONE "):])


def _serial(tmp_path: Path, root: Path, folders: list[Path], url: str, collection: str) -> ChunkStore:
    store = ChunkStore(tmp_path / "serial", embedder=HashEmbedder(), database_url=url, collection=collection)
    ingest_paths(folders, store, root=root, progress=False)
    return store


def _assert_same(a: ChunkStore, b: ChunkStore) -> None:
    left, right = snapshot(a), snapshot(b)
    for part in ("docs", "chunks", "fts_rows", "pending"):
        assert left[part] == right[part], part
    assert left["chroma"].keys() == right["chroma"].keys()
    query = "drained after failed jobs wn12"
    assert [h.chunk.chunk_id for h in a.lexical_search(query, 8)] == \
        [h.chunk.chunk_id for h in b.lexical_search(query, 8)]


def test_two_processes_ingest_two_folders_at_once_and_equal_a_serial_ingest(tmp_path, postgres_url, pg_collection):
    root = tmp_path / "root"
    _tickets(root / "a", "a")
    _tickets(root / "b", "b")
    procs = [_start(tmp_path / f"data-{n}", root, [root / n], postgres_url, pg_collection) for n in ("a", "b")]
    ra, rb = (_done(p) for p in procs)
    assert ra["counts"]["indexed"] == rb["counts"]["indexed"] == 4 and not ra["error"] and not rb["error"]
    assert ra["started"] < rb["ended"] and rb["started"] < ra["ended"], (ra, rb)  # the runs overlapped
    store = ChunkStore(tmp_path / "check", embedder=HashEmbedder(), database_url=postgres_url,
                       collection=pg_collection)
    serial = _serial(tmp_path, root, [root / "a", root / "b"], postgres_url, "serial_" + pg_collection)
    assert store.manifest.count() == 48
    _assert_same(store, serial)
    store.close()
    serial.close()


def test_two_processes_given_the_same_files_take_turns_per_file(tmp_path, postgres_url, pg_collection):
    root = tmp_path / "root"
    _tickets(root / "a", "a")
    procs = [_start(tmp_path / f"data-{n}", root, [root / "a"], postgres_url, pg_collection) for n in range(2)]
    reports = [_done(p) for p in procs]
    # every file was written once: the run that waited for a file found it already stored
    assert sum(r["counts"]["indexed"] for r in reports) == 4, reports
    assert all(r["counts"]["indexed"] + r["counts"]["unchanged"] == 4 for r in reports)
    store = ChunkStore(tmp_path / "check", embedder=HashEmbedder(), database_url=postgres_url,
                       collection=pg_collection)
    serial = _serial(tmp_path, root, [root / "a"], postgres_url, "serial_" + pg_collection)
    _assert_same(store, serial)
    store.close()
    serial.close()


def test_a_prune_run_is_refused_while_another_run_is_live(tmp_path, postgres_url, pg_collection):
    root = tmp_path / "root"
    _tickets(root / "a", "a", n_files=8)
    proc = _start(tmp_path / "data-w", root, [root / "a"], postgres_url, pg_collection)
    assert proc.stdout.readline().startswith("STARTED ")
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder(), database_url=postgres_url,
                       collection=pg_collection)
    with pytest.raises(StoreLockedError) as info:
        ingest_paths([root / "a"], store, root=root, prune=True, progress=False)
    assert "another ingest is running" in str(info.value) and info.value.holder.get("pid")
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    report = ingest_paths([root / "a"], store, root=root, prune=True, progress=False)  # alone now
    assert report.counts["unchanged"] == 8
    store.close()


def test_pending_rows_are_recovered_only_by_a_run_that_is_alone(tmp_path, postgres_url, pg_collection):
    root = tmp_path / "root"
    _tickets(root / "a", "a", n_files=1)
    kwargs = {"embedder": HashEmbedder(), "database_url": postgres_url, "collection": pg_collection}
    store, other = ChunkStore(tmp_path / "d1", **kwargs), ChunkStore(tmp_path / "d2", **kwargs)
    assert store.parallel_ingest
    ingest_paths([root / "a"], store, root=root, progress=False)
    doc_id = store.manifest.page()[0][0]["doc_id"]
    with ingest_run(other, exclusive=False):  # a live run: the row may be its in-flight batch
        with store.db.transaction():  # what a run between its intent rows and its commit has, or a killed one left
            store.manifest.intents.add([(doc_id, "write", 1, "a/a-0.jsonl", str(root / "a" / "a-0.jsonl"))])
        assert ingest_paths([root / "a"], store, root=root, progress=False).recovered_documents == 0
        assert store.manifest.intents.unresolved()
    report = ingest_paths([root / "a"], store, root=root, progress=False)  # alone: a crashed run's row
    assert report.recovered_documents == 1 and not store.manifest.intents.unresolved()
    assert report.counts["indexed"] == 1  # the stale document was rewritten
    store.close()
    other.close()


def test_embedded_chroma_keeps_one_run_at_a_time(tmp_path):
    root = tmp_path / "root"
    _tickets(root / "a", "a", n_files=1)
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    assert not store.parallel_ingest
    with ingest_run(ChunkStore(tmp_path / "data", embedder=HashEmbedder()), exclusive=False):
        with pytest.raises(StoreLockedError):
            ingest_paths([root / "a"], store, root=root, progress=False)
    assert ingest_paths([root / "a"], store, root=root, progress=False).counts["indexed"] == 1
    store.close()


def test_flock_run_lock_is_shared_and_source_locks_take_turns(tmp_path):
    """The SQLite flavour (used with a Chroma server): shared holders at once, an exclusive request
    refused naming the latest holder, and a source lock that waits for its holder."""
    a, b, c = (SqliteDatabase(tmp_path) for _ in range(3))
    with a.ingest_lock(shared=True) as la:
        assert la.alone and la.exclusive
        la.share()
        with b.ingest_lock(shared=True) as lb:
            assert not lb.alone and not lb.exclusive
            with pytest.raises(StoreLockedError) as info:
                with c.ingest_lock():
                    pass
            assert info.value.holder["pid"] == os.getpid()
            la.hold_sources(["a/x.jsonl", "/abs/a/x.jsonl"], before_wait=lambda: None)
            released: list[str] = []
            waiter = threading.Thread(target=lb.hold_sources, args=(["a/x.jsonl"], lambda: released.append("b")))
            waiter.start()
            waiter.join(0.3)
            assert waiter.is_alive() and released == ["b"]  # b released its own locks, then waits
            la.release_sources()
            waiter.join(5)
            assert not waiter.is_alive()
            lb.release_sources()
    with c.ingest_lock() as lc:  # all gone: exclusive again
        assert lc.exclusive
    for db in (a, b, c):
        db.close()
