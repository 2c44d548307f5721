"""Delete means gone: a deleted document's text leaves every file of the store (issue #23, item 5).

The real app, the real embedded store (SQLite FTS5 + embedded Chroma) and the model-free
``HashEmbedder``: a document carrying a unique marker is ingested (uploaded, or from a
server-side folder), deleted through ``DELETE /v1/documents/{id}`` or ``copilot documents
delete``, and then the bytes of every file under the data dir are scanned for the marker.
"""

from __future__ import annotations

import json
import os
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from fastapi.testclient import TestClient

from copilot.api.app import create_app
from copilot.config import Settings
from copilot.service import CopilotService
from ingestion.deletion import delete_document
from ingestion.pipeline import ingest_paths
from ingestion.stores.chunk_store import ChunkStore
from ingestion.stores.lexical_index import fts5_secure_delete_available
from ingestion.stores.purge import compact, purge_pending
from ingestion.uploads import upload_copy

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import HashEmbedder  # noqa: E402

KEY = {"Authorization": "Bearer adm"}
MARKER = "ZEBRA-MARKER-93f1"
TOKEN = "zebramarker93f1qx"
"""One word: the FTS5 index stores it as a term (prefix-compressed, so its tail is scanned)."""
CLI_WITH_HASH_EMBEDDER = (
    "import sys; sys.path.insert(0, %r); import ingestion.embedding; from ingestion_helpers import HashEmbedder; "
    "ingestion.embedding.Embedder = lambda *a, **k: HashEmbedder(); from copilot.cli.main import app; app()"
) % str(Path(__file__).parent / "fixtures" / "ingestion")
"""``python -c`` code running the ``copilot`` command line over stores built with ``HashEmbedder``."""
SECRET_TEXT = f"Root cause: the {MARKER} credential {TOKEN} was pasted into the ticket."


def leftovers(data_dir: Path) -> list[str]:
    """Every file under ``data_dir`` (recursively, hidden ones, -wal/-shm and Chroma's too)
    whose bytes hold the marker, the title marker or the tail of the FTS term."""
    needles = (MARKER.encode(), b"zebra-title-93f1", TOKEN[4:].encode())
    found = []
    for path in sorted(data_dir.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if MARKER.encode() in data or any(n in data.lower() for n in needles):
                found.append(str(path.relative_to(data_dir)))
    return found


def tickets_jsonl(n_other: int = 40) -> bytes:
    """A JSON Lines ticket export: ``SEC-1`` holds the secret, the others ordinary text."""
    rows = [{"id": "SEC-1", "title": "ZEBRA-TITLE-93f1 leaked credential", "text": SECRET_TEXT}]
    rows += [{"id": f"OPS-{i}", "title": f"ticket {i}", "text": f"xrootd door {i} restarted on dcache pool {i}"}
             for i in range(n_other)]
    return "\n".join(json.dumps(r) for r in rows).encode()


@pytest.fixture
def env(tmp_path):
    """An app over a fresh embedded store in ``tmp_path/data`` and an ingest root beside it."""
    root = tmp_path / "root"
    root.mkdir()
    settings = Settings(data_dir=tmp_path / "data", ingest_root=root, api_keys=["adm"], _env_file=None)
    store = ChunkStore(settings.data_dir, embedder=HashEmbedder())
    with TestClient(create_app(settings, CopilotService(settings, store, None))) as client:
        yield client, settings, store, root


def _wait_job(client: TestClient, job_id: str, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        job = client.get(f"/v1/ingest/{job_id}", headers=KEY).json()
        if job["status"] not in ("queued", "running"):
            return job
        assert time.monotonic() < deadline, f"ingest job still {job['status']}"
        time.sleep(0.05)


def _search_ids(client: TestClient, query: str) -> list[str]:
    """Ids of the documents ``POST /v1/search`` returns (hybrid: lexical + dense)."""
    r = client.post("/v1/search", headers=KEY, json={"question": query, "max_sources": 5})
    assert r.status_code == 200, r.text
    return [source["doc_id"] for source in r.json()["sources"]]


def test_api_delete_of_an_uploaded_ticket_leaves_no_byte_of_it(env):
    client, settings, store, _ = env
    r = client.post("/v1/ingest", headers=KEY, data={"folder": "tickets"},
                    files=[("files", ("export.jsonl", tickets_jsonl()))])
    assert r.status_code == 202, r.text
    assert _wait_job(client, r.json()["id"])["status"] == "succeeded"
    assert _search_ids(client, MARKER)[0] == "tickets/export.jsonl#SEC-1"
    assert leftovers(settings.data_dir)  # the marker is on disk: index.sqlite3, chroma, uploads/
    # two ratings: one of an answer that showed the ticket (and quotes it), one of another answer
    for doc_id, answer in (("tickets/export.jsonl#SEC-1", f"The credential {MARKER} leaked [1]."),
                           ("tickets/export.jsonl#OPS-7", "Pool 7 was restarted [1].")):
        r = client.post("/v1/feedback", headers=KEY, json={
            "rating": "up", "question": "what happened?", "answer": answer,
            "sources": [{"n": 1, "doc_id": doc_id, "cited": True}]})
        assert r.status_code == 201, r.text

    started = time.perf_counter()
    r = client.delete("/v1/documents/" + quote("tickets/export.jsonl#SEC-1", safe="/"), headers=KEY)
    delete_s = time.perf_counter() - started
    assert r.status_code == 200, r.text
    assert leftovers(settings.data_dir) == [], "the deleted ticket's text is still on disk"
    assert delete_s < 10
    assert not purge_pending(store)
    kept = client.get("/v1/feedback", headers=KEY).json()["feedback"]
    assert [f["sources"][0]["doc_id"] for f in kept] == ["tickets/export.jsonl#OPS-7"]
    # the upload copy held it: gone; the file's other tickets stay stored, searchable and not prunable
    assert not (settings.uploads_dir / "tickets" / "export.jsonl").exists()
    assert store.manifest.count() == 40 and store.dense.count() == store.lexical.count() == 40
    assert "tickets/export.jsonl#OPS-7" in _search_ids(client, "dcache pool 7")
    assert store.lexical_search("dcache pool 7", 1)[0].chunk.doc_id == "tickets/export.jsonl#OPS-7"
    text = store.lexical.document_chunks("tickets/export.jsonl#OPS-7")[0].text
    assert store.dense_search(text, 1)[0].chunk.doc_id == "tickets/export.jsonl#OPS-7"
    assert store.lexical_search(MARKER, 5) == [] and MARKER not in str(_search_ids(client, MARKER))
    assert store.manifest.prunable() == []
    assert client.get("/v1/documents/" + quote("tickets/export.jsonl#OPS-3", safe="/"), headers=KEY).status_code == 200
    assert client.get("/v1/documents/" + quote("tickets/export.jsonl#SEC-1", safe="/"), headers=KEY).status_code == 404
    # deleting a detached sibling works too; uploading the file again re-adds what it holds
    assert client.delete("/v1/documents/" + quote("tickets/export.jsonl#OPS-1", safe="/"), headers=KEY).json()[
        "deleted"] == "tickets/export.jsonl#OPS-1"
    r = client.post("/v1/ingest", headers=KEY, data={"folder": "tickets"},
                    files=[("files", ("export.jsonl", tickets_jsonl()))])
    assert _wait_job(client, r.json()["id"])["status"] == "succeeded"
    assert store.manifest.count() == 41 and store.manifest.prunable() == []


def test_cli_delete_of_a_server_side_document_purges_the_store_but_keeps_the_operators_file(env):
    client, settings, store, root = env
    (root / "postmortems").mkdir()
    source = root / "postmortems" / "srm.md"
    source.write_text(f"---\ntitle: ZEBRA-TITLE-93f1 SRM outage\n---\n# Outage\n\n{SECRET_TEXT}\n")
    (root / "postmortems" / "other.md").write_text("---\ntitle: FTS transfer stall\n---\nThe FTS server stalled.\n")
    report = ingest_paths([root], store, progress=False)
    assert report.to_dict()["counts"].get("failed", 0) == 0
    doc_id = next(d["doc_id"] for d in store.manifest.page()[0] if d["source"] == "postmortems/srm.md")
    assert leftovers(settings.data_dir)

    # `copilot documents delete` in a process of its own, beside the serving one (as in production)
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", CLI_WITH_HASH_EMBEDDER, "documents", "delete", doc_id],
                            env={**os.environ, "COPILOT_DATA_DIR": str(settings.data_dir), "HF_HUB_OFFLINE": "1"},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"deleted {doc_id}" in result.stdout and time.perf_counter() - started < 60
    assert leftovers(settings.data_dir) == []
    assert store.manifest.info(doc_id) is None and store.lexical_search(MARKER, 5) == []
    assert source.exists()  # the operator's own file is not ours to remove
    assert any(d.startswith("postmortems/other.md") for d in _search_ids(client, "FTS server stalled"))


def test_chroma_log_and_hnsw_file_keep_nothing_of_a_deleted_chunk(tmp_path):
    """Below Chroma's sync threshold (1000 records) its log still holds every written record,
    and the HNSW file keeps a deleted element's vector: both are purged."""
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    from ingestion.documents import Document

    secret = Document("kb.jsonl#S", SECRET_TEXT, {"source": "kb.jsonl", "doc_type": "jsonl", "key": "S"})
    store.upsert_documents([secret] + [Document(f"kb.jsonl#{i}", f"note {i} on pool {i}",
                                                {"source": "kb.jsonl", "doc_type": "jsonl", "key": str(i)})
                                       for i in range(5)])
    chunk_id = store.lexical.document_chunks("kb.jsonl#S")[0].chunk_id
    vector = store.dense.get_embeddings([chunk_id])[chunk_id]
    chroma_db = tmp_path / "data" / "chroma" / "chroma.sqlite3"
    with sqlite3.connect(chroma_db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM embeddings_queue WHERE id = ?", (chunk_id,)).fetchone()[0] == 1
    assert delete_document(store, "kb.jsonl#S")
    with sqlite3.connect(chroma_db) as conn:
        queued = conn.execute("SELECT operation, metadata FROM embeddings_queue WHERE id = ?", (chunk_id,)).fetchall()
    assert [op for op, _ in queued] == [3]  # only the deletion itself (id, no text) is left in the log
    segment = next((tmp_path / "data" / "chroma").glob("*/header.bin")).parent
    _, max_elements, used, _ = struct.unpack_from("<4Q", (segment / "header.bin").read_bytes(), 4)
    lengths = (segment / "length.bin").read_bytes()  # one int per slot: the unused ones held freed memory
    assert len(lengths) == 4 * max_elements and lengths[4 * used:] == bytes(4 * (max_elements - used))
    hnsw = next((tmp_path / "data" / "chroma").glob("*/data_level0.bin")).read_bytes()
    floats = np.frombuffer(hnsw[: len(hnsw) // 4 * 4], dtype=np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(floats, vector.size)
    assert not np.isclose(windows, vector, atol=1e-5).all(axis=1).any()
    assert leftovers(tmp_path / "data") == []
    text = store.lexical.document_chunks("kb.jsonl#3")[0].text  # HashEmbedder: the same text, the same vector
    assert store.dense.count() == 5 and store.dense_search(text, 1)[0].chunk.doc_id == "kb.jsonl#3"


def test_a_store_opened_and_closed_before_in_the_process_does_not_keep_the_text(tmp_path):
    """``copilot serve`` opens the store once to check it, closes it, then the app opens its own:
    the first one's Chroma client must not keep the folder's segments (and unsaved log) alive."""
    from ingestion.documents import Document

    ChunkStore(tmp_path / "data", embedder=HashEmbedder()).close()
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    store.upsert_documents([Document("kb.jsonl#S", SECRET_TEXT, {"source": "kb.jsonl", "doc_type": "jsonl",
                                                                 "key": "S"}),
                            Document("kb.jsonl#1", "note on pool 1", {"source": "kb.jsonl", "doc_type": "jsonl",
                                                                      "key": "1"})])
    assert delete_document(store, "kb.jsonl#S")
    assert leftovers(tmp_path / "data") == []
    assert store.manifest.count() == 1


def test_compact_rewrites_the_store_and_keeps_every_document(tmp_path):
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    from ingestion.documents import Document

    store.upsert_documents([Document(f"n.jsonl#{i}", f"note {i} about the FTS server {i}",
                                     {"source": "n.jsonl", "doc_type": "jsonl", "key": str(i)}) for i in range(30)])
    assert compact(store) == []
    assert store.manifest.count() == 30 and store.dense.count() == 30
    assert store.lexical_search("FTS server 12", 1)[0].chunk.doc_id == "n.jsonl#12"
    assert (tmp_path / "data" / "index.sqlite3-wal").stat().st_size == 0
    store.close()
    result = subprocess.run([sys.executable, "-c", CLI_WITH_HASH_EMBEDDER, "documents", "compact"],
                            env={**os.environ, "COPILOT_DATA_DIR": str(tmp_path / "data"), "HF_HUB_OFFLINE": "1"},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "store compacted" in result.stdout, result.stderr
    assert ChunkStore(tmp_path / "data", embedder=HashEmbedder()).manifest.count() == 30


def test_upload_copy_names_only_installed_uploads(tmp_path):
    root = tmp_path / "uploads"
    assert upload_copy(root, str(root / "tickets" / "export.jsonl")) == root / "tickets" / "export.jsonl"
    assert upload_copy(root, str(root / ".incoming" / "job" / "a.log")) is None
    assert upload_copy(root, str(tmp_path / "elsewhere" / "a.log")) is None
    assert upload_copy(root, str(root)) is None


def test_fts5_secure_delete_needs_sqlite_3_42():
    assert not fts5_secure_delete_available("3.40.1")
    assert fts5_secure_delete_available("3.42.0") and fts5_secure_delete_available("3.45.1")
