"""``POST /v1/feedback``, ``GET /v1/feedback`` and ``GET /v1/feedback/export``: the real app over
a real store of its own (empty, model-free embedder; no language model), on SQLite and on a
shared PostgreSQL; the export is read back with the eval's own question-set loader."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from copilot.api.app import create_app
from copilot.config import Settings
from copilot.service import CopilotService
from evals.questions import load_questions
from ingestion.stores.chunk_store import ChunkStore

KEY = {"Authorization": "Bearer k1"}
MISSING = object()  # a field left out of the body
QUESTION = "How was the dc-pool-07 domain restarted once the RAID rebuild had finished?"
COMMAND = "systemctl restart dcache@dc-pool-07Domain.service"
THUMBS_UP = {
    "rating": "up", "reason": "the exact command",
    "question": QUESTION, "answer": f"Restarted with `{COMMAND}` [1].",
    "sources": [{"n": 1, "doc_id": "logbooks/operations.elog#2", "title": "dc-pool-07 back", "cited": True},
                {"n": 2, "doc_id": "logbooks/operations.elog#1", "title": "dc-pool-07 disk failure"}],
    "quotes": [{"literal": COMMAND, "kind": "code", "n": 1, "doc_id": "logbooks/operations.elog#2"}],
    "settings": {"max_sources": 3, "max_new_tokens": 64, "filters": {"doc_types": ["elog"], "since": "2026-01-01"}}}


@pytest.fixture(autouse=True)
def _logging(restore_logging):
    yield


@pytest.fixture
def make_app(tmp_path):
    """``(store_kwargs=None, **settings) -> app``: the real app over an empty store in ``tmp_path``
    (embedded with the model-free ``HashEmbedder``)."""
    sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
    from ingestion_helpers import HashEmbedder

    def make(store_kwargs: dict | None = None, **overrides):
        settings = Settings(**{"data_dir": tmp_path / "data", "_env_file": None, **overrides})
        folder = tmp_path / f"store-{len(list(tmp_path.glob('store-*')))}"
        store = ChunkStore(folder, embedder=HashEmbedder(), **(store_kwargs or {}))
        return create_app(settings, CopilotService(settings, store, None))

    return make


@pytest.fixture
def client(make_app):
    with TestClient(make_app()) as c:
        yield c


def test_a_rating_is_stored_with_question_answer_sources_and_settings(client):
    r = client.post("/v1/feedback", json=THUMBS_UP)
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["id"].startswith("fb-") and made["created"]
    down = {**THUMBS_UP, "rating": "down", "reason": None, "quotes": []}
    assert client.post("/v1/feedback", json=down).status_code == 201

    page = client.get("/v1/feedback").json()
    assert page["total"] == 2 and [f["rating"] for f in page["feedback"]] == ["down", "up"]  # newest first
    stored = page["feedback"][1]
    assert stored["id"] == made["id"] and stored["created"] == made["created"]
    assert stored["question"] == QUESTION and stored["answer"] == THUMBS_UP["answer"]
    assert stored["reason"] == "the exact command" and stored["settings"] == THUMBS_UP["settings"]
    assert [s["doc_id"] for s in stored["sources"]] == ["logbooks/operations.elog#2", "logbooks/operations.elog#1"]
    assert stored["quotes"][0]["literal"] == COMMAND
    assert stored["model"] == client.app.state.settings.target_model
    only_up = client.get("/v1/feedback", params={"rating": "up", "limit": 1}).json()
    assert only_up["total"] == 1 and only_up["feedback"][0]["id"] == made["id"]
    assert client.get("/v1/feedback", params={"offset": 2}).json()["feedback"] == []


@pytest.mark.parametrize("change, param, reason", [
    ({"rating": "meh"}, "rating", "'up' or 'down'"),
    ({"rating": MISSING}, "rating", "Field required"),
    ({"question": ""}, "question", "at least 1 character"),
    ({"answer": MISSING}, "answer", "Field required"),
    ({"answer": 42}, "answer", "valid string"),
    ({"reason": "x" * 2001}, "reason", "at most 2000"),
    ({"reason": "\ud800"}, "reason", "unpaired UTF-16 surrogate"),
    ({"history": [{"role": "system", "content": "be brief"}]}, "history.0.role", "'user' or 'assistant'"),
    ({"sources": [{"n": 0, "doc_id": "a#1"}]}, "sources.0.n", "greater than or equal to 1"),
    ({"sources": [{"n": 1, "doc_id": "a#1"}, {"n": 1, "doc_id": "a#2"}], "quotes": []}, None,
     "the numbers [1] appear more than once"),
    ({"quotes": [{"literal": COMMAND, "n": 7, "doc_id": "a#1"}]}, None, "n [7] names no source"),
    ({"settings": "max_sources=3"}, "settings", "valid dictionary"),
    ({"stars": 5}, "stars", "Extra inputs are not permitted"),
])
def test_bad_feedback_is_a_400_naming_the_field_and_why(client, change, param, reason):
    body = {k: v for k, v in {**THUMBS_UP, **change}.items() if v is not MISSING}
    r = client.post("/v1/feedback", content=json.dumps(body), headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and reason in error["message"], error
    assert client.get("/v1/feedback").json()["total"] == 0  # nothing stored


def test_feedback_that_is_not_json_is_refused(client):
    r = client.post("/v1/feedback", content=b"{rating: up", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]


def test_rating_needs_what_asking_needs_and_reading_ratings_needs_a_key(make_app):
    with TestClient(make_app(api_keys=["k1"])) as c:
        for method, path in (("POST", "/v1/feedback"), ("GET", "/v1/feedback"), ("GET", "/v1/feedback/export")):
            body = THUMBS_UP if method == "POST" else None
            r = c.request(method, path, json=body)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", path
            assert c.request(method, path, json=body, headers={"Authorization": "Bearer nope"}).status_code == 403
            assert c.request(method, path, json=body, headers=KEY).status_code in (200, 201), path
    with TestClient(make_app(api_keys=["k1"], public_reads=True)) as c:  # anyone may ask, so anyone may rate
        assert c.post("/v1/feedback", json=THUMBS_UP).status_code == 201
        assert c.get("/v1/feedback").status_code == 401  # other people's questions: a key still
        assert c.get("/v1/feedback/export").status_code == 401
        assert c.get("/v1/feedback", headers=KEY).json()["total"] == 1


def test_the_export_is_a_question_set_the_answers_eval_loads(client, tmp_path):
    explain = {**THUMBS_UP, "question": "Why was dc-pool-07 put in read-only mode?", "quotes": [],
               "answer": "Its disk failed [2].", "sources": [{**THUMBS_UP["sources"][0], "cited": False},
                                                             {**THUMBS_UP["sources"][1], "cited": True}]}
    not_found = {"rating": "up", "question": "What was the resolution of OPS-999?", "not_found": True,
                 "answer": "Not found: no entry names OPS-999.", "sources": THUMBS_UP["sources"][1:]}
    follow_up = {**THUMBS_UP, "question": "And on which host?",
                 "history": [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "..."}]}
    down = {**THUMBS_UP, "rating": "down", "question": "How was the FNAL link fixed?"}
    again = {**THUMBS_UP, "question": "  how was the DC-POOL-07 domain restarted once the RAID rebuild had finished?"}
    ids = [client.post("/v1/feedback", json=b).json()["id"]
           for b in (THUMBS_UP, explain, not_found, follow_up, down, again)]

    r = client.get("/v1/feedback/export")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    assert "feedback-questions.jsonl" in r.headers["content-disposition"]
    path = tmp_path / "feedback-questions.jsonl"
    path.write_bytes(r.content)
    questions = load_questions(path)

    # the 👎 and the follow-up are left out; the question rated twice is there once, as rated last
    assert [q.id for q in questions] == [ids[5], ids[1], ids[2]]
    copy, why, unanswerable = questions
    assert copy.question == again["question"] and copy.kind == "copy" and copy.copy
    assert copy.answer_span == COMMAND and copy.matches("logbooks/operations.elog#2")
    assert why.kind == "explain" and not why.copy and why.source == "logbooks/operations.elog#1"  # the cited one
    assert unanswerable.kind == "unanswerable" and not unanswerable.answerable


def test_an_empty_export_is_an_empty_question_set(client, tmp_path):
    r = client.get("/v1/feedback/export")
    assert r.status_code == 200 and r.content == b""
    (tmp_path / "q.jsonl").write_bytes(r.content)
    assert load_questions(tmp_path / "q.jsonl") == []


def test_every_replica_of_a_shared_store_sees_the_ratings(make_app, postgres_url, pg_collection):
    shared = {"database_url": postgres_url, "collection": pg_collection}
    with TestClient(make_app(shared)) as a, TestClient(make_app(shared)) as b:
        made = a.post("/v1/feedback", json=THUMBS_UP).json()
        listed = b.get("/v1/feedback").json()
        assert listed["total"] == 1 and listed["feedback"][0]["id"] == made["id"]
        assert [q["id"] for q in _lines(b.get("/v1/feedback/export").text)] == [made["id"]]


def test_the_feedback_routes_are_documented(client):
    spec = client.get("/openapi.json").json()
    assert {"post"} <= set(spec["paths"]["/v1/feedback"]) and "get" in spec["paths"]["/v1/feedback/export"]
    schema = spec["components"]["schemas"]["FeedbackRequest"]
    assert schema["description"] and schema["examples"][0]["rating"] == "up"
    assert "application/x-ndjson" in spec["paths"]["/v1/feedback/export"]["get"]["responses"]["200"]["content"]


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
