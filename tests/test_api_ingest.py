"""Ingest jobs and documents over the API, on a temporary store (the shared sample store is not touched)."""

from __future__ import annotations

import os
import shutil
import time
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from copilot.api.app import create_app
from copilot.config import Settings
from copilot.service import CopilotService
from ingestion.stores.chunk_store import ChunkStore

pytestmark = pytest.mark.slow

CORPUS = os.path.join(os.path.dirname(__file__), os.pardir, "evals", "data", "corpus")
KEY = {"Authorization": "Bearer adm"}


@pytest.fixture(scope="module")
def env(tmp_path_factory, embedder):
    """An app over an empty store, an ingest root holding the ticket exports, and a folder outside it."""
    base = tmp_path_factory.mktemp("ingest-api")
    root, outside = base / "root", base / "outside"
    shutil.copytree(os.path.join(CORPUS, "tickets"), root / "tickets")
    outside.mkdir()
    (outside / "secret.log").write_text("2026-01-01 00:00 root password is hunter2\n")
    (root / "escape").symlink_to(outside, target_is_directory=True)
    (root / "mixed").mkdir()
    (root / "mixed" / "ok.log").write_text("fine\n")
    (root / "mixed" / "leak.log").symlink_to(outside / "secret.log")
    (root / "dangling").symlink_to(base / "missing")
    (root / "empty").mkdir()
    settings = Settings(data_dir=base / "data", ingest_root=root, api_keys=["adm"], _env_file=None)
    store = ChunkStore(settings.data_dir, embedder=embedder)
    app = create_app(settings, CopilotService(settings, store, None))
    with TestClient(app) as client:
        yield client, settings, store, root, outside


def _wait_job(client, job_id: str, timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        r = client.get(f"/v1/ingest/{job_id}", headers=KEY)
        assert r.status_code == 200, r.text
        job = r.json()
        if job["status"] in ("succeeded", "partial", "failed"):
            return job
        assert time.monotonic() < deadline, f"ingest job still {job['status']} after {timeout_s} s"
        time.sleep(0.1)


def _ingest_tickets(client) -> dict:
    r = client.post("/v1/ingest", json={"path": "tickets"}, headers=KEY)
    assert r.status_code == 202, r.text
    return _wait_job(client, r.json()["id"])


def test_server_side_path_ingest_job(env):
    client, settings, store, root, _ = env
    r = client.post("/v1/ingest", json={"path": "tickets"}, headers=KEY)
    assert r.status_code == 202, r.text
    accepted = r.json()
    assert accepted["files"] == ["ggus_export.csv", "jira_export.json"]
    assert accepted["status_url"].endswith(f"/v1/ingest/{accepted['id']}")
    job = _wait_job(client, accepted["id"])
    assert job["status"] == "succeeded", job
    assert job["progress"]["files_done"] == job["progress"]["files_total"] == 2
    report = job["report"]
    assert report["counts"]["failed"] == 0 and report["documents"] == 23
    assert {f["source"] for f in report["files"]} == {"ggus_export.csv", "jira_export.json"}
    assert store.manifest.count() >= 23
    # idempotent: the same path again changes nothing; an absolute path inside the root is fine too
    r = client.post("/v1/ingest", json={"path": str(root / "tickets")}, headers=KEY)
    again = _wait_job(client, r.json()["id"])
    assert again["report"]["chunks_written"] == 0 and again["report"]["counts"]["unchanged"] == 2


@pytest.mark.parametrize("path,status,reason", [
    ("../outside", 400, "'..'"),
    ("tickets/../../outside/secret.log", 400, "'..'"),
    ("/etc", 403, "outside the ingest root"),
    ("/etc/passwd", 403, "outside the ingest root"),
    ("escape", 403, "symlink"),
    ("escape/secret.log", 403, "symlink"),
    ("mixed", 403, "symlinks that lead outside"),
    ("dangling", 403, "dangling symlink"),
    ("no/such/folder", 404, "no such file"),
    ("empty", 400, "no files"),
    ("a" * 4000, 400, "unusable path"),
])
def test_server_side_paths_that_escape_are_rejected(env, path, status, reason):
    client, settings, store, root, outside = env
    before = store.manifest.count()
    r = client.post("/v1/ingest", json={"path": path}, headers=KEY)
    assert r.status_code == status, r.text
    assert reason in r.json()["detail"]
    assert store.manifest.count() == before


def test_outside_absolute_path_and_bad_bodies(env):
    client, settings, store, root, outside = env
    r = client.post("/v1/ingest", json={"path": str(outside)}, headers=KEY)
    assert r.status_code == 403
    r = client.post("/v1/ingest", json={"path": "tickets", "surprise": 1}, headers=KEY)
    assert r.status_code == 400 and r.json()["detail"]
    r = client.post("/v1/ingest", json={"path": ""}, headers=KEY)
    assert r.status_code == 400
    r = client.post("/v1/ingest", content=b"{not json", headers={**KEY, "content-type": "application/json"})
    assert r.status_code == 400
    r = client.post("/v1/ingest", content=b"tickets", headers={**KEY, "content-type": "text/plain"})
    assert r.status_code == 415 and "multipart" in r.json()["detail"]
    r = client.get("/v1/ingest/0123456789abcdef", headers=KEY)
    assert r.status_code == 404


def test_upload_ingest_job(env):
    client, settings, store, root, _ = env
    jira = open(os.path.join(CORPUS, "tickets", "jira_export.json"), "rb").read()
    elog = open(os.path.join(CORPUS, "logbooks", "facility.elog"), "rb").read()
    r = client.post("/v1/ingest", headers=KEY, data={"folder": "uploaded"},
                    files=[("files", ("jira_export.json", jira)), ("files", ("facility.elog", elog)),
                           ("files", ("broken.json", b"{\"issues\": [ oops"))])
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    job = _wait_job(client, job_id)
    assert job["status"] == "partial" and job["kind"] == "upload"  # one file failed, the others are stored
    counts = job["report"]["counts"]
    assert counts["indexed"] == 2 and counts["failed"] == 1
    assert any("failed" in w for w in job["warnings"])
    failed = [f for f in job["report"]["files"] if f["status"] == "failed"]
    assert failed[0]["source"] == "uploaded/broken.json" and failed[0]["reason"]
    saved = settings.data_dir / "uploads" / "uploaded"  # a stable home: uploads/<folder>/<name>, whatever the job
    assert sorted(p.name for p in saved.iterdir()) == ["broken.json", "facility.elog", "jira_export.json"]
    assert not (settings.data_dir / "uploads" / ".incoming" / job_id).exists()
    assert store.manifest.info("uploaded/jira_export.json#OPS-101") is not None
    assert store.manifest.info("uploaded/facility.elog#12") is not None


@pytest.mark.parametrize("files,data,status,reason", [
    ([("files", (".hidden.log", b"x"))], {}, 400, "hidden"),
    ([("files", ("a.log", b"x")), ("files", ("a.log", b"y"))], {}, 400, "duplicate"),
    ([("files", ("a.log", b"x"))], {"folder": "../up"}, 400, "folder"),
    ([("files", ("a.log", b"x"))], {"folder": "/abs"}, 400, "folder"),
    ([], {"folder": "x"}, 400, "no files"),
])
def test_bad_uploads_are_rejected_and_leave_nothing(env, files, data, status, reason):
    client, settings, store, root, _ = env
    uploads = settings.data_dir / "uploads"
    before = sorted(p.name for p in uploads.iterdir()) if uploads.exists() else []
    docs = store.manifest.count()
    r = client.post("/v1/ingest", headers=KEY, data=data, files=files or {"unrelated": (None, "x")})
    assert r.status_code == status, r.text
    assert reason in r.json()["detail"]
    after = sorted(p.name for p in uploads.iterdir()) if uploads.exists() else []
    assert after == before and store.manifest.count() == docs


def test_upload_path_traversal_in_file_name_is_neutralised(env):
    client, settings, store, root, _ = env
    r = client.post("/v1/ingest", headers=KEY, files=[("files", ("../../evil.log", b"2026-01-01 note\n"))])
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert r.json()["files"] == ["evil.log"]
    _wait_job(client, job_id)
    assert (settings.data_dir / "uploads" / "evil.log").exists()
    assert not (settings.data_dir / "evil.log").exists()


def test_documents_paging(env):
    client, settings, store, root, _ = env
    _ingest_tickets(client)
    total = client.get("/v1/documents", headers=KEY).json()["total"]
    assert total >= 23
    seen = []
    for offset in range(0, total, 7):
        page = client.get(f"/v1/documents?offset={offset}&limit=7", headers=KEY).json()
        assert page["total"] == total and page["offset"] == offset and page["limit"] == 7
        seen += [d["doc_id"] for d in page["documents"]]
    assert len(seen) == total == len(set(seen))
    assert client.get(f"/v1/documents?offset={total}", headers=KEY).json()["documents"] == []
    assert client.get("/v1/documents?limit=0", headers=KEY).status_code == 400
    assert client.get("/v1/documents?limit=1001", headers=KEY).status_code == 400
    assert client.get("/v1/documents?offset=-1", headers=KEY).status_code == 400
    doc = next(d for d in client.get("/v1/documents?limit=1000", headers=KEY).json()["documents"]
               if d["doc_id"] == "jira_export.json#OPS-101")
    assert doc["doc_type"] == "jira" and doc["key"] == "OPS-101" and doc["created"].startswith("2026-01-12")


def test_get_and_delete_a_document_whose_id_has_slash_and_hash(env):
    client, settings, store, root, _ = env
    client.post("/v1/ingest", headers=KEY, data={"folder": "tickets"},
                files=[("files", ("jira_export.json", open(os.path.join(CORPUS, "tickets", "jira_export.json"),
                                                          "rb").read()))])
    deadline = time.monotonic() + 120
    while store.manifest.info("tickets/jira_export.json#OPS-102") is None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    doc_id = "tickets/jira_export.json#OPS-101"
    total = client.get("/v1/documents", headers=KEY).json()["total"]
    r = client.get("/v1/documents/" + quote(doc_id, safe="/"), headers=KEY)
    assert r.status_code == 200 and r.json()["doc_id"] == doc_id
    assert r.json()["chunks"] and r.json()["chunks"][0]["chunk_id"] == doc_id + "#0"
    r = client.delete("/v1/documents/" + quote(doc_id, safe="/"), headers=KEY)
    assert r.status_code == 200 and r.json()["deleted"] == doc_id and r.json()["chunks"] >= 1
    assert client.get("/v1/documents", headers=KEY).json()["total"] == total - 1
    assert store.lexical.document_chunks(doc_id) == []
    assert client.delete("/v1/documents/" + quote(doc_id, safe="/"), headers=KEY).status_code == 404
    # fully percent-encoded works as well
    r = client.delete("/v1/documents/" + quote("tickets/jira_export.json#OPS-102", safe=""), headers=KEY)
    assert r.status_code == 200
    # a raw '#' never reaches the server: the hint says how to send it
    r = client.delete("/v1/documents/tickets/jira_export.json", headers=KEY)
    assert r.status_code == 404 and "%23" in r.json()["detail"]
    assert client.get("/v1/documents", headers=KEY).json()["total"] == total - 2


# -- issue #14: uploads update documents; special files never read ----------------------------------
def _upload(client, files, **data) -> dict:
    r = client.post("/v1/ingest", headers=KEY, data=data, files=[("files", f) for f in files])
    assert r.status_code == 202, r.text
    job = _wait_job(client, r.json()["id"])
    assert job["status"] == "succeeded", job
    return job


def _records(*pairs) -> bytes:
    import json

    return "".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in pairs).encode()


def test_uploading_a_file_again_replaces_it_when_changed_and_reports_unchanged_when_not(env):
    client, settings, store, root, _ = env
    jira = open(os.path.join(CORPUS, "tickets", "jira_export.json"), "rb").read()
    first = _upload(client, [("tickets.json", jira)], folder="reup")
    assert [(f["source"], f["status"]) for f in first["report"]["files"]] == [("reup/tickets.json", "indexed")]
    again = _upload(client, [("tickets.json", jira)], folder="reup")  # identical
    (entry,) = again["report"]["files"]
    assert (entry["source"], entry["status"], entry["reason"]) == ("reup/tickets.json", "unchanged", None)
    assert again["report"]["chunks_written"] == 0
    edited = jira.replace(b"OPS-101", b"OPS-901", 1)
    third = _upload(client, [("tickets.json", edited)], folder="reup")
    (entry,) = third["report"]["files"]
    assert entry["status"] == "indexed" and entry["written_documents"] >= 1 and entry["reason"] is None
    assert store.manifest.info("reup/tickets.json#OPS-901") is not None
    assert store.manifest.info("reup/tickets.json#OPS-101") is not None  # kept: no prune asked
    # without a folder too
    assert _upload(client, [("solo.jsonl", _records(("KB-1", "renew cert")))])["report"]["counts"]["indexed"] == 1
    assert _upload(client, [("solo.jsonl", _records(("KB-1", "renew cert")))])["report"]["counts"]["unchanged"] == 1


def test_upload_prune_removes_the_folders_files_that_are_gone(env):
    client, settings, store, root, _ = env
    a, b = _records(("A-1", "drain dc-pool-07")), _records(("B-1", "restart the gridftp door"))
    _upload(client, [("a.jsonl", a), ("b.jsonl", b)], folder="pr")
    _upload(client, [("c.jsonl", _records(("C-1", "other folder")))], folder="pr/sub")
    _upload(client, [("b.jsonl", _records(("B-9", "same name, other folder")))], folder="other")
    job = _upload(client, [("a.jsonl", a)], folder="pr", prune="true")
    assert job["report"]["files"][0]["status"] == "unchanged" and job["report"]["pruned_documents"] == 1
    assert store.manifest.info("pr/b.jsonl#B-1") is None
    assert not (settings.data_dir / "uploads" / "pr" / "b.jsonl").exists()
    assert store.manifest.info("pr/a.jsonl#A-1") is not None
    assert store.manifest.info("pr/sub/c.jsonl#C-1") is not None  # a sub-folder is another upload folder
    assert store.manifest.info("other/b.jsonl#B-9") is not None


def test_upload_replaces_documents_stored_from_the_old_per_job_layout(env):
    client, settings, store, root, _ = env
    from ingestion.pipeline import ingest_paths

    legacy = settings.data_dir / "uploads" / ("0" * 32)
    (legacy / "legacy").mkdir(parents=True)
    (legacy / "legacy" / "kb.jsonl").write_bytes(_records(("L-1", "old layout"), ("L-2", "kept")))
    ingest_paths([legacy / "legacy" / "kb.jsonl"], store, progress=False, root=legacy)
    assert store.manifest.info("legacy/kb.jsonl#L-1") is not None
    job = _upload(client, [("kb.jsonl", _records(("L-1", "old layout"), ("L-3", "new")))], folder="legacy")
    (entry,) = job["report"]["files"]
    assert entry["status"] == "indexed" and entry["written_documents"] == 1, entry
    assert store.manifest.info("legacy/kb.jsonl#L-3") is not None


def test_upload_folder_that_crosses_an_uploaded_file_is_a_409(env):
    client, settings, store, root, _ = env
    _upload(client, [("c.log", b"2026-01-20 06:04 [OPS] note\n")], folder="conf")
    r = client.post("/v1/ingest", headers=KEY, data={"folder": "conf/c.log"}, files=[("files", ("x.log", b"x"))])
    assert r.status_code == 409 and "crosses the uploaded file" in r.json()["detail"]
    r = client.post("/v1/ingest", headers=KEY, files=[("files", ("conf", b"x"))])
    assert r.status_code == 409 and "is an upload folder" in r.json()["detail"]


def test_server_side_folder_with_a_named_pipe_skips_it(env):
    client, settings, store, root, _ = env
    folder = root / "pipes"
    folder.mkdir()
    (folder / "ops.log").write_text("2026-01-20 06:04 [OPS] restarted xrootd on dc-door-02\n")
    os.mkfifo(folder / "pipe.log")
    r = client.post("/v1/ingest", json={"path": "pipes"}, headers=KEY)
    assert r.status_code == 202, r.text
    job = _wait_job(client, r.json()["id"])  # bounded: a job blocked on the pipe fails the test
    assert job["status"] == "succeeded", job
    files = {f["source"]: (f["status"], f["reason"]) for f in job["report"]["files"]}
    assert files["ops.log"][0] == "indexed"
    assert files["pipe.log"] == ("skipped", "a named pipe (FIFO), not a regular file: never opened")
    r = client.post("/v1/ingest", json={"path": "pipes/pipe.log"}, headers=KEY)  # named directly
    job = _wait_job(client, r.json()["id"])
    assert [(f["status"], f["source"]) for f in job["report"]["files"]] == [("skipped", "pipe.log")]
