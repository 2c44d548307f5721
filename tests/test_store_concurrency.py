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
