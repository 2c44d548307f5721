"""Permissions per document (issue 23, item 6): API keys with scopes from one keys file, across
every route. The real app over a real store (embedded Chroma + SQLite, the model-free
``HashEmbedder``), laid out so that document types and folders cut across each other:

    logbooks/operations.elog            elog      ops
    logbooks/shift-2026-01-20.log       shiftlog  ops
    tickets/security/jira_export.json   jira      sec
    tickets/security-old/jira.json      jira      nobody scoped ("security-old" is not under "security")
    tickets/ggus_export.csv             csv_ticket
    postmortems/2026-01-fts-outage.md   postmortem  (the public scope)

A scoped key must never receive a source, snippet, highlight, quote, document, job file or
feedback entry outside its scope; the answer routes (and the answer-history drafter) are
checked with the embedded model in the one ``slow`` test at the end.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import HashEmbedder  # noqa: E402

from copilot.access import KeysFileError, load_keys_file  # noqa: E402
from copilot.api.app import create_app  # noqa: E402
from copilot.config import Settings  # noqa: E402
from copilot.service import CopilotService  # noqa: E402
from ingestion.pipeline import ingest_paths  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "evals" / "data" / "corpus"
LAYOUT = {"logbooks/operations.elog": "logbooks/operations.elog",
          "logbooks/shift-2026-01-20.log": "shiftlogs/shift-2026-01-20.log",
          "tickets/security/jira_export.json": "tickets/jira_export.json",
          "tickets/security-old/jira.json": "tickets/jira_export.json",
          "tickets/ggus_export.csv": "tickets/ggus_export.csv",
          "postmortems/2026-01-fts-outage.md": "postmortems/2026-01-fts-outage.md"}
KEYS_TOML = f"""
[[keys]]
name = "ops"
key_sha256 = "{hashlib.sha256(b'ops-key').hexdigest()}"
doc_types = ["shiftlog", "elog"]
sources = ["logbooks"]

[[keys]]
name = "sec"
key = "sec-key"
doc_types = ["jira"]
sources = ["tickets/security/"]
delete = true

[[keys]]
name = "admin"
key = "admin-key"
ingest = true
delete = true

[[keys]]
name = "ops-ingest"
key = "opsin-key"
sources = ["logbooks"]
ingest = true

[[keys]]
name = "jira-ingest"
key = "jirain-key"
doc_types = ["jira"]
ingest = true

[public]
doc_types = ["postmortem"]
"""
OPS, SEC, ADMIN, OPSIN = ({"Authorization": f"Bearer {k}"} for k in ("ops-key", "sec-key", "admin-key", "opsin-key"))
FLAT = {"Authorization": "Bearer flat-key"}
JIRAIN = {"Authorization": "Bearer jirain-key"}


def ops_reads(meta: dict) -> bool:
    return meta["doc_type"] in ("shiftlog", "elog") and meta["source"].startswith("logbooks/")


def sec_reads(meta: dict) -> bool:
    return meta["doc_type"] == "jira" and meta["source"].startswith("tickets/security/")


READS = {"ops": (OPS, ops_reads), "sec": (SEC, sec_reads)}
QUESTIONS = ["What was the resolution of OPS-107?", "How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?",
             "How was the dc-pool-07 domain restarted?", "What caused the FTS outage?", "GGUS ticket about transfers",
             "message 12"]


def _layout(root: Path, files: dict[str, str]) -> Path:
    for dest, src in files.items():
        (root / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CORPUS / src, root / dest)
    return root


@pytest.fixture(scope="module")
def scoped_store(tmp_path_factory) -> ChunkStore:
    """The layout above in a store of its own (read-only for the tests that share it)."""
    base = tmp_path_factory.mktemp("scopes")
    store = ChunkStore(base / "data", embedder=HashEmbedder())
    report = ingest_paths([_layout(base / "corpus", LAYOUT)], store, progress=False)
    assert report.to_dict()["counts"].get("failed", 0) == 0
    return store


@pytest.fixture
def make_client(tmp_path, restore_logging):
    """``(store, **settings) -> TestClient`` of the real app with the keys file above and a flat key."""
    keys = tmp_path / "keys.toml"
    keys.write_text(KEYS_TOML)

    def make(store: ChunkStore, **overrides) -> TestClient:
        settings = Settings(**{"data_dir": tmp_path / "app", "keys_file": keys, "api_keys": ["flat-key"],
                               "_env_file": None, **overrides})
        return TestClient(create_app(settings, CopilotService(settings, store, None)))

    return make


@pytest.fixture
def client(make_client, scoped_store):
    with make_client(scoped_store) as c:
        yield c


def all_documents(client: TestClient) -> list[dict]:
    page = client.get("/v1/documents", params={"limit": 1000}, headers=ADMIN).json()
    assert page["total"] == len(page["documents"]) > 0
    return page["documents"]


def doc_url(doc_id: str) -> str:
    return "/v1/documents/" + quote(doc_id, safe="")


# -- search -------------------------------------------------------------------------------------------
def test_search_returns_only_readable_sources_and_k_of_them(client):
    docs = all_documents(client)
    for name, (headers, reads) in READS.items():
        readable = [d for d in docs if reads(d)]
        assert readable and len(readable) < len(docs), name
        for question in QUESTIONS:
            r = client.post("/v1/search", json={"question": question, "max_sources": 5}, headers=headers)
            assert r.status_code == 200, r.text
            sources = r.json()["sources"]
            assert all(reads(s) for s in sources), (name, question, [s["doc_id"] for s in sources])
            # filtered in the stores: the five are five readable ones, not what survived a post-filter
            assert len(sources) == min(5, len(readable)), (name, question)
    # the question names a ticket key: the named-key boost keeps the scope too
    ops = client.post("/v1/search", json={"question": "What was the resolution of OPS-107?"}, headers=OPS).json()
    assert ops["sources"] and not any(s["doc_id"].endswith("#OPS-107") for s in ops["sources"])
    sec = client.post("/v1/search", json={"question": "What was the resolution of OPS-107?"}, headers=SEC).json()
    assert sec["sources"][0]["doc_id"] == "tickets/security/jira_export.json#OPS-107"


def test_a_user_filter_outside_the_scope_means_nothing_not_everything(client):
    for filters in ({"doc_types": ["jira"]}, {"source": "tickets/security/jira_export.json"},
                    {"source": "logbooks-old/operations.elog"}):
        r = client.post("/v1/search", json={"question": "OPS-107 resolution", "filters": filters}, headers=OPS)
        assert r.status_code == 200 and r.json()["sources"] == [], (filters, r.text)
    r = client.post("/v1/search", json={"question": "restart", "filters": {"doc_types": ["elog", "jira"]}},
                    headers=OPS)
    assert r.json()["sources"] and {s["doc_type"] for s in r.json()["sources"]} == {"elog"}


# -- documents ------------------------------------------------------------------------------------------
def test_document_list_and_view_show_only_the_scope_and_404_outside_it(client):
    docs = all_documents(client)
    for name, (headers, reads) in READS.items():
        page = client.get("/v1/documents", params={"limit": 1000}, headers=headers).json()
        assert page["total"] == sum(map(reads, docs)) == len(page["documents"]), name
        assert all(reads(d) for d in page["documents"])
        second = client.get("/v1/documents", params={"offset": 1, "limit": 2}, headers=headers).json()
        assert [d["doc_id"] for d in second["documents"]] == [d["doc_id"] for d in page["documents"][1:3]]
    hidden = next(d["doc_id"] for d in docs if not ops_reads(d))
    visible = next(d["doc_id"] for d in docs if ops_reads(d))
    assert client.get(doc_url(visible), headers=OPS).status_code == 200
    out_of_scope = client.get(doc_url(hidden), headers=OPS)
    unknown = client.get(doc_url("logbooks/operations.elog#999999"), headers=OPS)
    assert out_of_scope.status_code == unknown.status_code == 404  # existence does not leak
    assert out_of_scope.json()["detail"].replace(hidden, "X") == unknown.json()["detail"].replace(
        "logbooks/operations.elog#999999", "X")
    assert client.get(doc_url(hidden), headers=ADMIN).status_code == 200
    assert client.get(doc_url(hidden), headers=FLAT).status_code == 200  # a flat api_keys key reads all


def test_public_scope_for_anonymous_reads(make_client, scoped_store):
    with make_client(scoped_store, public_reads=True) as c:
        sources = c.post("/v1/search", json={"question": "What caused the FTS outage?"}).json()["sources"]
        assert sources and {s["doc_type"] for s in sources} == {"postmortem"}
        page = c.get("/v1/documents").json()
        assert page["total"] >= 1 and {d["doc_type"] for d in page["documents"]} == {"postmortem"}
        assert c.get(doc_url("logbooks/operations.elog#2")).status_code == 404
        ops = c.post("/v1/search", json={"question": "dc-pool-07 restart"}, headers=OPS).json()["sources"]
        assert ops and all(ops_reads(s) for s in ops)  # a key still gets its own scope


def test_delete_needs_the_right_and_a_readable_document(make_client, tmp_path):
    store = ChunkStore(tmp_path / "own", embedder=HashEmbedder())
    ingest_paths([_layout(tmp_path / "corpus", {k: v for k, v in LAYOUT.items() if "tickets" in k})], store,
                 progress=False)
    with make_client(store) as c:
        sec_doc, old_doc = "tickets/security/jira_export.json#OPS-107", "tickets/security-old/jira.json#OPS-107"
        r = c.delete(doc_url(sec_doc), headers=OPS)
        assert r.status_code == 403 and r.json()["detail"] == "the API key 'ops' may not delete"
        assert c.delete(doc_url(old_doc), headers=SEC).status_code == 404  # may delete, may not read it
        assert c.get(doc_url(old_doc), headers=ADMIN).status_code == 200
        assert c.delete(doc_url(sec_doc), headers=SEC).status_code == 200
        assert c.get(doc_url(sec_doc), headers=ADMIN).status_code == 404


# -- ingest -------------------------------------------------------------------------------------------------
def _wait(c: TestClient, job_id: str, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        job = c.get(f"/v1/ingest/{job_id}", headers=ADMIN).json()
        if job["status"] not in ("queued", "running"):
            return job
        assert time.monotonic() < deadline, f"ingest job still {job['status']} after {timeout_s} s"
        time.sleep(0.1)


def test_ingest_rights_folders_and_job_visibility(make_client, tmp_path):
    root = tmp_path / "server"
    (root / "logbooks").mkdir(parents=True)
    (root / "logbooks" / "night.log").write_text("2026-01-02 night shift: all quiet\n")
    note = [("files", ("notes.log", b"2026-01-01 ops note: pool drained\n"))]
    with make_client(ChunkStore(tmp_path / "own", embedder=HashEmbedder()), ingest_root=root) as c:
        r = c.post("/v1/ingest", data={"folder": "logbooks"}, files=note, headers=OPS)
        assert r.status_code == 403 and r.json()["detail"] == "the API key 'ops' may not ingest"
        r = c.post("/v1/ingest", data={"folder": "tickets"}, files=note, headers=OPSIN)
        assert r.status_code == 403 and "outside them: tickets/notes.log" in r.json()["detail"]
        r = c.post("/v1/ingest", data={"folder": "logbooks-old"}, files=note, headers=OPSIN)
        assert r.status_code == 403
        r = c.post("/v1/ingest", data={"folder": "logbooks", "prune": "true"}, files=note, headers=OPSIN)
        assert r.status_code == 403 and "may not prune" in r.json()["detail"]
        r = c.post("/v1/ingest", json={"path": "logbooks"}, headers=OPSIN)  # sources are named relative to the path
        assert r.status_code == 403 and "night.log" in r.json()["detail"]
        assert not list((tmp_path / "app" / "uploads").rglob("notes.log"))  # nothing staged for a refusal

        own = c.post("/v1/ingest", data={"folder": "logbooks/shifts"}, files=note, headers=OPSIN)
        assert own.status_code == 202, own.text
        other = c.post("/v1/ingest", data={"folder": "tickets/security"}, files=note, headers=ADMIN)
        assert other.status_code == 202, other.text
        for job in (own.json(), other.json()):
            assert _wait(c, job["id"])["status"] == "succeeded"
        listed = c.get("/v1/ingest", headers=OPSIN).json()
        assert [j["id"] for j in listed["jobs"]] == [own.json()["id"]] and listed["total"] == 1
        assert c.get(f"/v1/ingest/{other.json()['id']}", headers=OPSIN).status_code == 404
        assert c.post(f"/v1/ingest/{other.json()['id']}/resume", headers=OPSIN).status_code == 404
        assert c.get("/v1/ingest", headers=ADMIN).json()["total"] == 2
        assert c.get("/v1/ingest", headers=FLAT).json()["total"] == 2
        assert c.get("/v1/ingest", headers=SEC).status_code == 403


def test_a_scoped_ingest_key_writes_and_replaces_only_what_it_may_read(make_client, tmp_path):
    """A key reading only Jira tickets may not overwrite a stored CSV ticket by uploading a file
    of the same name, nor store documents of another type, nor see other keys' jobs."""
    ggus = (CORPUS / "tickets" / "ggus_export.csv").read_bytes()
    jira = (CORPUS / "tickets" / "jira_export.json").read_bytes()
    with make_client(ChunkStore(tmp_path / "own", embedder=HashEmbedder())) as c:
        first = c.post("/v1/ingest", data={"folder": "tickets/x"}, files=[("files", ("t.csv", ggus))], headers=ADMIN)
        assert _wait(c, first.json()["id"])["status"] == "succeeded"
        stored = c.get("/v1/documents", headers=ADMIN).json()["documents"]
        before = {d["doc_id"]: c.get("/v1/documents/" + quote(d["doc_id"], safe="/"), headers=ADMIN).json()
                  for d in stored}
        tampered = ggus.replace(b"dCache", b"TAMPERED")
        jobs = [c.post("/v1/ingest", data={"folder": "tickets/x"}, files=[("files", ("t.csv", tampered))],
                       headers=JIRAIN),
                c.post("/v1/ingest", data={"folder": "tickets/y"}, files=[("files", ("new.csv", ggus))],
                       headers=JIRAIN)]
        for job in jobs:
            done = _wait(c, job.json()["id"])
            assert done["status"] == "failed", done
            assert "may not write it" in done["report"]["files"][0]["reason"] and done["submitted_by"] == "jira-ingest"
        after = {d: c.get("/v1/documents/" + quote(d, safe="/"), headers=ADMIN).json() for d in before}
        assert after == before and c.get("/v1/documents", headers=ADMIN).json()["total"] == len(before)
        own = c.post("/v1/ingest", data={"folder": "tickets/y"}, files=[("files", ("j.json", jira))], headers=JIRAIN)
        assert _wait(c, own.json()["id"])["status"] == "succeeded"
        listed = c.get("/v1/ingest", headers=JIRAIN).json()
        assert {j["id"] for j in listed["jobs"]} == {own.json()["id"]} | {j.json()["id"] for j in jobs}
        assert c.get(f"/v1/ingest/{first.json()['id']}", headers=JIRAIN).status_code == 404
        assert c.get("/v1/ingest", headers=ADMIN).json()["total"] == 4


# -- feedback --------------------------------------------------------------------------------------------------
def _rating(question: str, doc_id: str | None, history: list | None = None) -> dict:
    sources = [{"n": 1, "doc_id": doc_id, "title": "t", "cited": True}] if doc_id else []
    quotes = [{"literal": "systemctl restart", "kind": "command", "n": 1, "doc_id": doc_id}] if doc_id else []
    return {"rating": "up", "question": question, "answer": "It was restarted [1].", "sources": sources,
            "quotes": quotes, "history": history or [], "not_found": not doc_id}


def test_feedback_lists_and_exports_only_ratings_made_under_the_same_scope(client):
    """A rating's sources are what its client sent: an admin's question about a secret, naming
    only an ops document, must not reach the ops key."""
    ops_doc, sec_doc = "logbooks/operations.elog#2", "tickets/security/jira_export.json#OPS-107"
    follow_up = [{"role": "user", "content": "about OPS-107?"}, {"role": "assistant", "content": "the fix"}]
    posted = {"admin on ops doc": (ADMIN, _rating("admin on ops doc", ops_doc)),
              "sec on sec doc": (SEC, _rating("sec on sec doc", sec_doc)),
              "sec not found": (SEC, _rating("sec not found", None)),
              "admin follow-up": (ADMIN, _rating("admin follow-up", ops_doc, follow_up)),
              "admin on sec doc": (ADMIN, _rating("admin on sec doc", sec_doc)),
              "admin: vault token ZEBRA-SECRET-42?": (ADMIN, _rating("admin: vault token ZEBRA-SECRET-42?", ops_doc))}
    for headers, body in posted.values():
        assert client.post("/v1/feedback", json=body, headers=headers).status_code == 201
    seen = {"ops": set(), "sec": {"sec on sec doc", "sec not found"}, "admin": set(posted)}
    for name, headers in (("ops", OPS), ("sec", SEC), ("admin", ADMIN)):
        page = client.get("/v1/feedback", headers=headers).json()
        assert {f["question"] for f in page["feedback"]} == seen[name] and page["total"] == len(seen[name]), name
        assert "scope" not in json.dumps(page)
        exported = client.get("/v1/feedback/export", headers=headers).text.splitlines()
        assert {json.loads(line)["question"] for line in exported} == seen[name] - {"admin follow-up"}, name


# -- metrics -----------------------------------------------------------------------------------------------------
def test_metrics_labels_carry_no_document_ids(client):
    docs = all_documents(client)
    for d in docs[:3]:
        client.get(doc_url(d["doc_id"]), headers=OPS)
    metrics = client.get("/metrics").text
    assert 'route="/v1/documents/{doc_id:path}"' in metrics
    for d in docs:
        assert d["doc_id"] not in metrics and quote(d["doc_id"], safe="") not in metrics
    assert "operations.elog" not in metrics and "OPS-107" not in metrics


# -- the keys file --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, named", [
    ('[[keys]]\nname = "a"\nkey = "k"\ndoc_types = ["wiki"]\n', "keys.0.doc_types.0"),
    ('[[keys]]\nname = "a"\n', "keys.0: Value error, key 'a': give exactly one of 'key' and 'key_sha256'"),
    ('[[keys]]\nname = "a"\nkey = "k"\nkey_sha256 = "' + "0" * 64 + '"\n', "exactly one of"),
    ('[[keys]]\nname = "a"\nkey_sha256 = "not-hex"\n', "keys.0.key_sha256"),
    ('[[keys]]\nname = "a"\nkey = "k"\nsources = ["../etc"]\n', "keys.0.sources"),
    ('[[keys]]\nname = "a"\nkey = "k"\nsources = ["/abs"]\n', "keys.0.sources"),
    ('[[keys]]\nname = "a"\nkey = "k"\nread = ["x"]\n', "keys.0.read: Extra inputs are not permitted"),
    ('[[keys]]\nname = "a"\nkey = "k1"\n[[keys]]\nname = "a"\nkey = "k2"\n', "key names must be unique: ['a']"),
    ('[[keys]]\nname = "a"\nkey = "k"\n[[keys]]\nname = "b"\nkey = "k"\n', "keys ['a', 'b'] have the same secret"),
    ('[[keys]]\nname = "a"\nkey = "k"\ningest = "maybe"\n', "keys.0.ingest"),
    ('[[keys]\nname = "a"\n', "cannot read it"),
    ('', "keys: Field required"),
])
def test_a_bad_keys_file_names_the_file_and_the_field(tmp_path, text, named):
    path = tmp_path / "keys.toml"
    path.write_text(text)
    with pytest.raises(KeysFileError) as err:
        load_keys_file(path)
    assert str(path) in str(err.value) and named in str(err.value), str(err.value)
    with pytest.raises(ValueError, match="keys file"):
        Settings(keys_file=path, _env_file=None)


def test_keys_file_in_yaml_and_a_bad_one_stops_the_command_line(tmp_path, clean_copilot_env):
    from typer.testing import CliRunner

    from copilot.cli.main import app

    good = tmp_path / "keys.yaml"
    good.write_text("keys:\n  - name: ops\n    key: ops-key\n    doc_types: [elog]\n    sources: [logbooks]\n")
    entry = load_keys_file(good).keys[0]
    assert (entry.name, entry.doc_types, entry.sources, entry.ingest) == ("ops", ["elog"], ["logbooks"], False)
    result = CliRunner().invoke(app, ["config"], env={"COPILOT_KEYS_FILE": str(good)})
    assert result.exit_code == 0 and "ops-key" not in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("keys:\n  - name: ops\n    key: k\n    delete: sometimes\n")
    result = CliRunner().invoke(app, ["config"], env={"COPILOT_KEYS_FILE": str(bad)})
    assert result.exit_code == 2 and "keys.0.delete" in result.output and "bad.yaml" in result.output
    missing = CliRunner().invoke(app, ["config"], env={"COPILOT_KEYS_FILE": str(tmp_path / "none.toml")})
    assert missing.exit_code == 2 and "none.toml" in missing.output


def test_a_flat_key_that_is_also_in_the_keys_file_is_refused(tmp_path):
    path = tmp_path / "keys.toml"
    path.write_text(KEYS_TOML)
    with pytest.raises(ValueError, match="key 'sec' is also one of api_keys"):
        Settings(keys_file=path, api_keys=["sec-key"], _env_file=None)


def test_unknown_and_missing_keys_answer_as_before(client):
    assert client.get("/v1/documents").status_code == 401
    assert client.get("/v1/documents", headers={"Authorization": "Bearer nope"}).status_code == 403
    assert client.post("/v1/ingest", json={"path": "x"}, headers={"Authorization": "Bearer nope"}).status_code == 403


# -- answers (the embedded model) ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_answer_routes_cite_chat_footers_and_draft_only_within_the_scope(tmp_path, scoped_store, embedded_engine,
                                                                        sse_events, restore_logging):
    from copilot.access import Access

    keys = tmp_path / "keys.toml"
    keys.write_text(KEYS_TOML)
    settings = Settings(data_dir=tmp_path / "app", keys_file=keys, max_new_tokens=12, min_support=0.0,
                        _env_file=None)
    chat = {"model": "opscopilot", "max_tokens": 12,
            "messages": [{"role": "user", "content": "How was the dc-pool-07 domain restarted? See OPS-107."}]}
    with TestClient(create_app(settings, CopilotService(settings, scoped_store, embedded_engine))) as c:
        for name, (headers, reads) in READS.items():
            ask = c.post("/v1/ask", json={"question": chat["messages"][0]["content"]}, headers=headers).json()
            assert ask["sources"] and all(reads(s) for s in ask["sources"]), name
            readable_ids = {s["doc_id"] for s in ask["sources"]}
            assert all(q["doc_id"] in readable_ids for q in ask["quotes"])
            with c.stream("POST", "/v1/ask", json={"question": "What caused the FTS outage?", "stream": True},
                          headers=headers) as r:
                events = dict(sse_events(r.iter_lines()))
            assert all(reads(s) for s in events["sources"]["sources"] + events["done"]["sources"]), name
            completion = c.post("/v1/chat/completions", json=chat, headers=headers).json()
            assert completion["sources"] and all(reads(s) for s in completion["sources"]), name
            footer = completion["choices"][0]["message"]["content"].split("\n\nSources:\n")[-1]
            shown = {line.split(" — ")[-1].split(",")[0] for line in footer.splitlines() if line.startswith("[")}
            assert shown and shown <= {s["source"] for s in completion["sources"]}, footer
            response = c.post("/v1/responses", json={"model": "opscopilot", "input": chat["messages"][0]["content"],
                                                     "max_output_tokens": 12}, headers=headers).json()
            assert all(reads(s) for s in response["sources"]), name
        r = c.post("/v1/completions", json={"model": "opscopilot", "prompt": "The disk", "max_tokens": 8}, headers=OPS)
        assert r.status_code == 200, r.text
        # a filter outside the key's scope: no source, and the answer says why (not "the store is empty")
        outside = c.post("/v1/ask", json={"question": "What caused the FTS outage?",
                                          "filters": {"source": "postmortems/2026-01-fts-outage.md"}}, headers=OPS)
        assert outside.status_code == 200 and outside.json()["sources"] == []
        assert "that your API key may read matches the filters" in outside.json()["answer"], outside.json()["answer"]
        assert "empty" not in outside.json()["answer"]
    ops_partition = Access("ops", frozenset({"elog", "shiftlog"}), ("logbooks",)).partition
    sec_partition = Access("sec", frozenset({"jira"}), ("tickets/security",)).partition
    assert {ops_partition, sec_partition} <= set(embedded_engine.core.history.partitions())
