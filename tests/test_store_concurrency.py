"""One dense-index client, safe under concurrency (issue 46, items 3 and 5).

Deleting documents (each deletion purges the embedded Chroma's files and replaces its client) while
other threads search must neither fail nor corrupt ``chroma.sqlite3``; an embedded Chroma whose start
failed once in this process must open again once the cause is gone. The real embedded store
(SQLite FTS5 + embedded Chroma) with the model-free ``HashEmbedder``.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from pathlib import Path

from ingestion.deletion import delete_document
from ingestion.documents import Document
from ingestion.stores.chroma_store import ChromaStore
from ingestion.stores.chunk_store import ChunkStore

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import HashEmbedder  # noqa: E402

#: Upper bound of the storm (s): the loops also stop when every deletion is done.
STORM_S = 40.0


def _ticket(i: int) -> Document:
    return Document(f"stress/big.jsonl#ST-{i}", f"xrootd door {i} restarted on dcache pool {i} after a hang",
                    {"source": "stress/big.jsonl", "doc_type": "jsonl", "key": f"ST-{i}", "title": f"ticket {i}"})


def test_a_failed_chroma_start_does_not_poison_the_next_open(tmp_path):
    """chromadb caches the system of a folder before starting it; a start that failed must not leave
    that half-built system to the next client ("'RustBindingsAPI' object has no attribute 'bindings'")."""
    folder = tmp_path / "chroma"
    folder.mkdir()
    (folder / "chroma.sqlite3").write_bytes(b"not a database" * 512)
    damaged = ChromaStore(folder, None, "opscopilot", "hash")  # opens closed, naming the file (the store degrades)
    damage = damaged.damage()
    assert damage is not None and "chroma.sqlite3 cannot be opened" in damage and "bindings" not in damage
    damaged.close()
    (folder / "chroma.sqlite3").unlink()
    store = ChromaStore(folder, None, "opscopilot", "hash")
    assert store.count() == 0
    store.close()


def test_deletes_while_others_search_neither_fail_nor_corrupt_the_store(tmp_path):
    """One thread deletes 40 documents one by one (each a purge that re-opens the Chroma client) while
    two others search without pause: no call fails, every deleted document is gone, every other one is
    found, and both SQLite files pass ``pragma integrity_check``."""
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    store.upsert_documents([_ticket(i) for i in range(60)])
    errors: list[str] = []
    searches = [0]
    done = threading.Event()
    deadline = time.monotonic() + STORM_S

    def deleter() -> None:
        try:
            for i in range(40):
                if time.monotonic() > deadline:
                    break
                assert delete_document(store, f"stress/big.jsonl#ST-{i}")
        except Exception as exc:  # reported below, with the searchers' failures
            errors.append(f"delete: {type(exc).__name__}: {exc}")
        finally:
            done.set()

    def searcher(offset: int) -> None:
        i = offset
        while not done.is_set() and time.monotonic() < deadline:
            try:
                store.dense_search(f"xrootd door {i % 60} restarted", 5)
                store.lexical_search(f"dcache pool {i % 60}", 5)
                searches[0] += 1
            except Exception as exc:
                errors.append(f"search: {type(exc).__name__}: {exc}")
                return
            i += 1

    threads = [threading.Thread(target=deleter)] + [threading.Thread(target=searcher, args=(k,)) for k in (0, 30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(STORM_S + 30)
    assert not any(t.is_alive() for t in threads), "a storm thread did not stop"
    assert errors == [], errors[:5]
    assert searches[0] > 10
    assert store.manifest.count() == 20 and store.dense.count() == 20
    assert store.lexical.document_chunks("stress/big.jsonl#ST-0") == []
    for i in (40, 59):  # HashEmbedder: the same text, the same vector
        text = store.lexical.document_chunks(f"stress/big.jsonl#ST-{i}")[0].text
        assert store.dense_search(text, 1)[0].chunk.doc_id == f"stress/big.jsonl#ST-{i}"
    store.close()
    for db in (tmp_path / "data" / "chroma" / "chroma.sqlite3", tmp_path / "data" / "index.sqlite3"):
        with sqlite3.connect(db) as conn:
            assert conn.execute("pragma integrity_check").fetchone()[0] == "ok", db


def test_uploads_deletes_lists_and_searches_at_once_through_a_real_uvicorn(tmp_path):
    """The issue's storm, short: under uvicorn, one client deletes uploaded tickets one by one, one
    uploads a new file every 0.5 s, one lists and one searches without pause, for at most 20 s. No
    answer is a 5xx other than 503, every ingest job succeeds, every listed document is found by its own
    words and every deleted one is gone, and both SQLite files pass ``integrity_check``."""
    import json
    from urllib.parse import quote

    import httpx

    from copilot.api.app import create_app
    from copilot.api.server import ServerThread
    from copilot.config import Settings
    from copilot.service import CopilotService

    data = tmp_path / "data"
    settings = Settings(data_dir=data, api_keys=["storm"], _env_file=None)
    store = ChunkStore(data, embedder=HashEmbedder())
    bad: list[str] = []
    jobs: list[str] = []
    deleted: list[int] = []

    def ok(r: httpx.Response, what: str) -> httpx.Response:
        if r.status_code >= 500 and r.status_code != 503:
            bad.append(f"{what}: {r.status_code} {r.text[:200]}")
        return r

    def upload(client: httpx.Client, name: str, rows: list[dict]) -> None:
        r = ok(client.post("/v1/ingest", data={"folder": "stress"}, files=[(
            "files", (name, "\n".join(json.dumps(row) for row in rows).encode()))]), f"upload {name}")
        if r.status_code == 202:
            jobs.append(r.json()["id"])

    with ServerThread(create_app(settings, CopilotService(settings, store, None))) as server, \
            httpx.Client(base_url=server.url, headers={"Authorization": "Bearer storm"}, timeout=60) as client:
        upload(client, "big.jsonl", [{"id": f"ST-{i}", "text": f"xrootd door {i} restarted, marker st{i}x"}
                                     for i in range(60)])
        deadline = time.monotonic() + 30
        while client.get(f"/v1/ingest/{jobs[0]}").json()["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, "the first upload did not finish"
            time.sleep(0.1)
        stop = time.monotonic() + 20

        def deleter() -> None:
            for i in range(40):
                if time.monotonic() > stop:
                    return
                r = ok(client.delete("/v1/documents/" + quote(f"stress/big.jsonl#ST-{i}", safe="/")), f"delete {i}")
                if r.status_code == 200:
                    deleted.append(i)

        def uploader() -> None:
            k = 0
            while time.monotonic() < stop and k < 20:
                row = {"id": f"UP-{k}", "text": f"gridftp mover {k} stalled, marker up{k}x"}
                upload(client, f"up-{k}.jsonl", [row])
                k += 1
                time.sleep(0.5)

        def reader(path: str) -> None:
            while time.monotonic() < stop and len(deleted) < 40:
                if path == "/v1/search":
                    ok(client.post(path, json={"question": "xrootd door restarted", "max_sources": 3}), "search")
                else:
                    ok(client.get(path, params={"limit": 100}), "list")

        threads = [threading.Thread(target=f, args=a) for f, a in
                   ((deleter, ()), (uploader, ()), (reader, ("/v1/search",)), (reader, ("/v1/documents",)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(STORM_S + 60)
        states = []
        for job in jobs:
            while (state := client.get(f"/v1/ingest/{job}").json()["status"]) in ("queued", "running"):
                assert time.monotonic() < stop + 120, "an ingest job did not finish"
                time.sleep(0.1)
            states.append(state)
        listed = {d["doc_id"] for d in client.get("/v1/documents", params={"limit": 1000}).json()["documents"]}
        unfound = [doc for doc in sorted(listed) if doc not in {
            s["doc_id"] for s in client.post("/v1/search", json={
                "question": ("st" + doc.rsplit("-", 1)[1] if "#ST-" in doc else "up" + doc.rsplit("-", 1)[1]) + "x",
                "max_sources": 3}).json()["sources"]}]
    store.close()
    assert not bad, bad[:5]
    assert states and set(states) == {"succeeded"}, states
    assert deleted and all(f"stress/big.jsonl#ST-{i}" not in listed for i in deleted)
    assert not unfound, unfound[:5]
    for db in (data / "index.sqlite3", data / "chroma" / "chroma.sqlite3"):
        with sqlite3.connect(db) as conn:
            assert conn.execute("pragma integrity_check").fetchone()[0] == "ok", db.name
