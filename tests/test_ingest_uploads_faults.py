"""Upload folders the filesystem cannot hold, and server paths in job answers (issue #23, item 9):
a 256-byte folder name or ``"a/"`` x 1,500 is a 400 with the reason and one short log line (it
was a 500 with a 7,000-line traceback); an upload job's report names files relative to the
uploads folder, never by their absolute server path."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from copilot.api.app import create_app
from copilot.config import Settings
from copilot.service import CopilotService
from ingestion.stores.chunk_store import ChunkStore
from ingestion.uploads import UploadPathError, safe_folder

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import HashEmbedder  # noqa: E402

pytestmark = pytest.mark.usefixtures("restore_logging")


@pytest.fixture
def client(tmp_path):
    settings = Settings(data_dir=tmp_path / "data", _env_file=None)
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    with TestClient(create_app(settings, CopilotService(settings, store, None))) as c:
        yield c


@pytest.mark.parametrize("folder, reason", [
    ("x" * 256, "has a name of 256 bytes; the limit is 255"),
    ("é" * 128, "has a name of 256 bytes; the limit is 255"),
    ("a/" * 1500, "is 1500 names deep; the limit is 32"),
    ("/".join(["y" * 200] * 6), "is 1205 bytes long; the limit is 1024"),
])
def test_folders_the_filesystem_cannot_hold_are_a_400_with_the_reason(client, tmp_path, caplog, folder, reason):
    caplog.set_level(logging.DEBUG)
    r = client.post("/v1/ingest", files=[("files", ("a.log", b"2026-01-20 06:04 [OPS] disk full\n"))],
                    data={"folder": folder})
    assert r.status_code == 400, r.text
    assert reason in r.json()["error"]["message"]
    assert len(r.text) < 600  # the reason shows the folder cut short
    assert not [rec for rec in caplog.records if rec.exc_info], "a traceback was logged"
    assert sum(rec.getMessage().count("\n") + 1 for rec in caplog.records) < 20
    assert not (tmp_path / "data" / "uploads" / ".incoming").exists()  # nothing of it is kept


def test_the_limits_accept_the_longest_allowed_folder():
    longest = "/".join(["z" * 255] * 4)  # 1,023 bytes, 4 names
    assert str(safe_folder(longest)) == longest
    with pytest.raises(UploadPathError):
        safe_folder(longest + "/z")


def test_an_upload_jobs_answer_names_no_server_folder(client, tmp_path):
    r = client.post("/v1/ingest", files=[("files", ("ops.log", b"2026-01-20 06:04 [OPS] tape robot jammed\n")),
                                         ("files", ("bad.json", b'{"issues": [ oops'))],
                    data={"folder": "shift"})
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 60
    while (job := client.get(f"/v1/ingest/{r.json()['id']}").json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert job["status"] == "partial", job
    assert sorted(f["path"] for f in job["report"]["files"]) == ["shift/bad.json", "shift/ops.log"]
    body = json.dumps(job) + json.dumps(client.get("/v1/ingest").json())
    assert str(tmp_path) not in body and os.path.realpath(tmp_path) not in body


def test_the_redactor_names_known_folders_and_hides_every_other_server_path():
    from copilot.redact import PathRedactor

    redact = PathRedactor.of(relative={"<ingest root>": Path("/srv/in")}, named={"<data dir>": Path("/data")}).text
    assert redact("/srv/in/tickets/a.csv failed") == "tickets/a.csv failed"
    assert redact("cannot open /data/chroma") == "cannot open <data dir>/chroma"
    # a known folder's name inside another path is not that folder; the other path is hidden whole
    assert redact("already stored from /tmp/x/evals/data/corpus/a.log; ingest") == \
        "already stored from <server path>; ingest"
    for kept in ("see http://127.0.0.1:8000/v1/x", "POST /v1/ingest/abc/resume", "rm -rf / now", "a/b/c"):
        assert redact(kept) == kept
