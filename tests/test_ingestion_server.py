"""Server mode: the store against a real ``chroma run`` started by the test on 127.0.0.1."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import copy_corpus, free_port, shared_embedder, snapshot  # noqa: E402

from ingestion.documents import SearchFilter  # noqa: E402
from ingestion.errors import StoreError  # noqa: E402
from ingestion.pipeline import ingest_paths  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402

STARTUP_TIMEOUT_S = 60.0


def chroma_cli() -> str:
    candidate = Path(sys.executable).parent / "chroma"
    found = str(candidate) if candidate.exists() else shutil.which("chroma")
    if not found:
        pytest.skip("the chroma CLI (from the chromadb package) is not installed")
    return found


@pytest.fixture
def chroma_server(tmp_path):
    """Start ``chroma run`` on a free port; yield its URL; terminate it afterwards."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "chroma.log", "wb")
    proc = subprocess.Popen([chroma_cli(), "run", "--path", str(tmp_path / "chroma-data"), "--host", "127.0.0.1",
                            "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"chroma run exited with {proc.returncode}: "
                            f"{(tmp_path / 'chroma.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"chroma run not ready after {STARTUP_TIMEOUT_S} s")
            time.sleep(0.2)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        log.close()


def test_ingest_and_search_through_chroma_server(chroma_server, tmp_path):
    url, proc = chroma_server
    corpus = copy_corpus(tmp_path / "corpus")
    store = ChunkStore(tmp_path / "data", chroma_url=url, embedder=shared_embedder(), collection="ops-server")
    store.ping()
    assert store.dense.max_batch_size > 0
    report = ingest_paths([corpus / "tickets", corpus / "logbooks"], store, progress=False)
    assert report.counts["indexed"] == 4 and report.counts["failed"] == 0
    assert store.dense.count() == store.lexical.count() == report.chunks_written

    # a second client (another API replica) sees the same collection on the server
    import chromadb

    other = chromadb.HttpClient(host="127.0.0.1", port=int(url.rsplit(":", 1)[1]))
    assert other.get_collection("ops-server").count() == store.lexical.count()

    hits = store.dense_search("CVMFS cache too small on worker nodes", 3, SearchFilter(doc_types=("jira",)))
    assert hits and hits[0].chunk.doc_id == "tickets/jira.json#OPS-107"
    before = snapshot(store)
    again = ingest_paths([corpus / "tickets", corpus / "logbooks"], store, progress=False)
    assert again.chunks_written == 0 and snapshot(store)["chroma"].keys() == before["chroma"].keys()

    proc.terminate()
    proc.wait(timeout=15)
    with pytest.raises(StoreError, match="unreachable"):
        store.ping()
    store.close()


def test_unreachable_server_is_a_store_error(tmp_path):
    with pytest.raises(StoreError, match="cannot open Chroma collection"):
        ChunkStore(tmp_path / "data", chroma_url=f"http://127.0.0.1:{free_port()}", embedder=shared_embedder())
    with pytest.raises(ValueError, match="malformed Chroma URL"):
        ChunkStore(tmp_path / "data", chroma_url="ftp://", embedder=shared_embedder())
