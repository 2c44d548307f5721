"""The ask API through the real app, over the sample corpus and the embedded models."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from copilot.answer.question import GenerationParams, QuestionRequest
from copilot.api.app import create_app

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(sample_service):
    with TestClient(create_app(sample_service.settings, sample_service)) as c:
        yield c


def test_healthz(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_ask_cites_the_expected_entry(client):
    r = client.post("/v1/ask", json={"question": "How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?",
                                     "max_new_tokens": 24})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"]
    docs = [s["doc_id"] for s in body["sources"]]
    assert any("SRM_AUTHORIZATION_FAILURE" in s["snippet"] or "FNAL" in s["snippet"] for s in body["sources"]), docs
    assert [s["n"] for s in body["sources"]] == list(range(1, len(docs) + 1))
    stats = body["stats"]
    assert stats["new_tokens"] <= 24 and stats["target_passes"] >= 1 and "tau" in stats


def test_question_naming_a_ticket_finds_it_first(client):
    r = client.post("/v1/ask", json={"question": "What was the resolution of OPS-107?", "max_new_tokens": 8})
    assert r.status_code == 200, r.text
    assert r.json()["sources"][0]["doc_id"].endswith("#OPS-107")


def test_stream_deltas_match_the_final_answer(client):
    payload = {"question": "Which command restarted the dCache pool on dc-pool-07?", "max_new_tokens": 24}
    whole = client.post("/v1/ask", json=payload).json()
    with client.stream("POST", "/v1/ask", json={**payload, "stream": True}) as r:
        assert r.status_code == 200
        events, event = [], None
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                events.append((event, json.loads(line.split(":", 1)[1])))
    text = "".join(d["text"] for e, d in events if e == "delta")
    assert events[-1][0] == "done"
    assert text == whole["answer"]
    assert events[-1][1]["sources"] == whole["sources"]


@pytest.mark.parametrize("payload,code", [
    ({"question": ""}, 400),
    ({"question": "x", "top_k": 0}, 400),
    ({"question": "x", "max_new_tokens": 10**6}, 400),
    ({"question": "x", "unknown": 1}, 400),
    ({"question": "x" * 5000}, 400),
    ({"question": "x", "seed": 2**64}, 400),
    ('{"question": "x", "temperature": NaN}', 400),
    ('{"question": "x", "max_new_tokens": 1e400}', 400),
    ('{"question": "\\ud800"}', 400),
    ('{"question": "x", "history": [{"role": "user", "content": "\\ud800"}]}', 400),
])
def test_bad_requests_get_a_reason(client, payload, code):
    if isinstance(payload, str):  # raw JSON that json= cannot produce (NaN, lone surrogates)
        r = client.post("/v1/ask", content=payload, headers={"content-type": "application/json"})
    else:
        r = client.post("/v1/ask", json=payload)
    assert r.status_code == code, r.text
    assert r.json()["detail"]


@pytest.mark.parametrize("payload,field", [
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"repetition_penalty": -1.2}, "repetition_penalty"),
    ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size"),
    ({"min_new_tokens": -3}, "min_new_tokens"),
    ({"logit_bias": {"49152": 5}}, "logit_bias"),  # one past SmolLM2's vocabulary
    ({"logit_bias": {"7": 101}}, "logit_bias"),
    ({"logit_bias": {"seven": 1}}, "logit_bias"),
    ({"suppress_tokens": [10**9]}, "suppress_tokens"),
    ({"bad_words_ids": [[1, 10**9]]}, "bad_words_ids"),
    ({"frequency_penalty": 2.5}, "frequency_penalty"),
])
def test_generation_settings_out_of_range_are_a_400_naming_the_field(client, payload, field):
    r = client.post("/v1/ask", json={"question": "How was the FNAL link fixed?", **payload})
    assert r.status_code == 400, r.text
    assert field in str(r.json()["detail"])


def test_generation_settings_reach_the_engine(client, sample_service):
    """Every setting is honoured (the engine applies them exactly as generate() does: tests/
    test_decoding_settings.py) — here: they arrive, and a suppressed token never appears."""
    tok = sample_service.models.engine.target.tokenizer
    plain = client.post("/v1/ask", json={"question": "How was the FNAL link fixed?", "max_new_tokens": 24}).json()
    first = tok(plain["answer"], add_special_tokens=False)["input_ids"][0]
    body = {"question": "How was the FNAL link fixed?", "max_new_tokens": 24, "repetition_penalty": 1.3,
            "no_repeat_ngram_size": 3, "suppress_tokens": [first], "logit_bias": {str(first): -50},
            "presence_penalty": 0.5}
    r = client.post("/v1/ask", json=body)
    assert r.status_code == 200, r.text
    settings = r.json()["stats"]["generation_settings"]
    assert settings["repetition_penalty"] == 1.3 and settings["no_repeat_ngram_size"] == 3
    assert first not in tok(r.json()["answer"], add_special_tokens=False)["input_ids"]
    chat = client.post("/v1/chat/completions", json={"model": "opscopilot", "max_tokens": 16, "frequency_penalty": 1.0,
                                                     "messages": [{"role": "user", "content": "FNAL link fix?"}]})
    assert chat.status_code == 200 and chat.json()["stats"]["generation_settings"]["frequency_penalty"] == 1.0


def test_huge_document_offset_is_a_400(client):
    r = client.get("/v1/documents", params={"offset": 2**64})
    assert r.status_code == 400 and r.json()["detail"]


def test_citations_map_to_the_numbered_sources_of_the_prompt(client, sample_service):
    question = "Which command restarted the dCache pool on dc-pool-07?"
    r = client.post("/v1/ask", json={"question": question, "max_new_tokens": 0, "top_k": 4})
    assert r.status_code == 200, r.text
    sources = r.json()["sources"]
    asked = QuestionRequest(question, max_sources=4, generation=GenerationParams(max_new_tokens=0))
    prepared = sample_service.prepare(sample_service.question(asked))
    assert [s["doc_id"] for s in sources] == [x.doc_id for x in prepared.prompt.sources]
    assert len({s["doc_id"] for s in sources}) == len(sources)  # one entry per document
    prompt = sample_service.models.engine.target.tokenizer.decode(prepared.prompt.input_ids)
    # Source n is "[n] " + its document header, the n-th block of the prompt.
    positions = [prompt.index(f"[{x.n}] {x.header}") for x in prepared.prompt.sources]
    assert positions == sorted(positions)
    for s in sources:
        assert 1 <= len(s["highlights"]) <= 3 and s["chunks"] and s["url"].startswith("/v1/documents/")
        assert client.get(s["url"]).json()["doc_id"] == s["doc_id"]


@pytest.mark.parametrize("filters,check", [
    ({"doc_types": ["elog"]}, lambda s: s["doc_type"] == "elog"),
    ({"source": "tickets/jira_export.json"}, lambda s: s["source"] == "tickets/jira_export.json"),
    ({"ticket_key": "OPS-105"}, lambda s: s["doc_id"] == "tickets/jira_export.json#OPS-105"),
    ({"since": "2026-01-27", "until": "2026-01-28"}, lambda s: "2026-01-27" <= s["created"][:10] <= "2026-01-28"),
    ({"doc_types": ["jira"], "since": "2026-01-27T00:00:00Z"}, lambda s: s["doc_type"] == "jira"
     and s["created"][:10] >= "2026-01-27"),
    # compact dates are dates (were epoch seconds in 1970, so every day matched)
    ({"since": "20260127"}, lambda s: s["created"][:10] >= "2026-01-27"),
    ({"since": "20260127", "until": "202601281200"}, lambda s: "2026-01-27" <= s["created"][:16] <= "2026-01-28T12:00"),
])
def test_filters_through_the_api(client, filters, check):
    r = client.post("/v1/ask", json={"question": "pool disk certificate transfer failures", "max_sources": 8,
                                     "max_new_tokens": 0, "filters": filters})
    assert r.status_code == 200, r.text
    sources = r.json()["sources"]
    assert sources and all(check(s) for s in sources), sources


def test_bad_filters_are_400(client):
    for filters in ({"doc_types": ["spreadsheet"]}, {"since": "yesterday"},
                    {"since": "2026-02-01", "until": "2026-01-01"},
                    {"colour": "red"}, {"since": "1737331200"}, {"until": 1737331200}):
        r = client.post("/v1/ask", json={"question": "x", "filters": filters})
        assert r.status_code == 400 and r.json()["detail"], filters
    for field in ("source", "ticket_key"):  # a lone surrogate: was a 500 "Invalid where clause"
        for stream in ("false", "true"):
            raw = f'{{"question": "x", "stream": {stream}, "filters": {{"{field}": "\\ud800"}}}}'
            r = client.post("/v1/ask", content=raw, headers={"content-type": "application/json"})
            assert r.status_code == 400 and "surrogate" in r.text, (field, r.text)


def test_max_sources_larger_than_the_collection(client, sample_service):
    r = client.post("/v1/ask", json={"question": "pool", "max_sources": 100, "max_new_tokens": 0})
    assert r.status_code == 200, r.text
    sources = r.json()["sources"]
    assert 0 < len(sources) <= sample_service.store.manifest.count() < 100
    assert [s["n"] for s in sources] == list(range(1, len(sources) + 1))


def test_sse_wire_format(client, sse_events):
    with client.stream("POST", "/v1/ask", json={"question": "What was the resolution of OPS-107?",
                                                "max_new_tokens": 6, "max_sources": 2, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = list(sse_events(r.iter_lines()))
    kinds = [e for e, _ in events]
    assert kinds[0] == "sources" and kinds[-1] == "done" and set(kinds[1:-1]) <= {"delta"}
    done = events[-1][1]
    assert done["sources"][0]["doc_id"].endswith("#OPS-107")
    assert [s["doc_id"] for s in events[0][1]["sources"]] == [s["doc_id"] for s in done["sources"]]
    assert done["answer"] == "".join(d["text"] for e, d in events if e == "delta")
    assert all(1 <= n <= len(done["sources"]) for n in done["cited"])
    assert done["not_found"] is False and isinstance(done["quotes"], list) and isinstance(done["unverified"], list)
    for lit in done["quotes"]:  # each quote points at its source's chunk
        assert (1 <= lit["n"] <= len(done["sources"])
                and lit["chunk_id"].startswith(done["sources"][lit["n"] - 1]["doc_id"]))
    stats = done["stats"]
    assert stats["new_tokens"] <= 6 and stats["finish_reason"] in ("eos", "length", "repetition")
    assert "queue_ms" in stats
    assert "retrieval_ms" in stats and "ttft_ms" in stats


@pytest.fixture()
def empty_client(tmp_path, embedded_engine, embedder):
    from copilot.config import Settings
    from copilot.service import CopilotService
    from ingestion.stores.chunk_store import ChunkStore

    settings = Settings(data_dir=tmp_path, _env_file=None)
    service = CopilotService(settings, ChunkStore(tmp_path, embedder=embedder), embedded_engine)
    with TestClient(create_app(settings, service)) as c:
        yield c


def test_empty_store_answers_that_there_is_no_context(empty_client, sse_events):
    from copilot.answer.prompting import no_context_answer

    NO_CONTEXT_ANSWER = no_context_answer(store_empty=True, filtered=False, scoped=False)
    assert "the document store is empty." in NO_CONTEXT_ANSWER
    r = empty_client.post("/v1/ask", json={"question": "How was the FNAL link fixed?"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"] == NO_CONTEXT_ANSWER and body["sources"] == []
    assert body["stats"]["no_context"] is True
    with empty_client.stream("POST", "/v1/ask", json={"question": "anything?", "stream": True}) as r:
        events = list(sse_events(r.iter_lines()))
    assert "".join(d["text"] for e, d in events if e == "delta") == NO_CONTEXT_ANSWER
    assert events[-1][0] == "done" and events[-1][1]["sources"] == []
    r = empty_client.post("/v1/chat/completions", json={"model": "opscopilot",
                                                       "messages": [{"role": "user", "content": "anything?"}]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == NO_CONTEXT_ANSWER
    assert r.json()["choices"][0]["finish_reason"] == "stop" and r.json()["usage"]["completion_tokens"] > 0
    assert empty_client.get("/v1/documents").json()["total"] == 0
    assert empty_client.get("/readyz").json()["chunks"] == 0


def test_no_budget_is_retrieval_only(client):
    """Issue 46: ``max_new_tokens`` 0 once answered with a labelled extract saying "the model gave no
    answer of its own"; with no budget there is no model answer to judge: an empty answer and its sources."""
    question = "Which command restarted the dCache pool on dc-pool-07?"
    body = client.post("/v1/ask", json={"question": question, "max_new_tokens": 0}).json()
    assert body["answer"] == "" and body["sources"] and body["sources"][0]["highlights"]
    assert not body["not_found"] and body["quotes"] == [] and body["stats"].get("added") is None


def test_a_long_earlier_turn_does_not_refuse_a_short_follow_up(client):
    """Issue 46: the question limit applies to what the user typed, not to the follow-up rewritten with
    an earlier turn of 4,100 characters (history allows 20,000): was a 400 "the question has 4134
    characters; the limit is 4000"."""
    earlier = "Which command restarted the dCache pool on dc-pool-07? " + "context " * 510
    history = [{"role": "user", "content": earlier}, {"role": "assistant", "content": "systemctl restart [1]"}]
    r = client.post("/v1/ask", json={"question": "and the token?", "history": history, "max_new_tokens": 0})
    assert r.status_code == 200, r.text
    assert r.json()["sources"]
    too_long = client.post("/v1/ask", json={"question": "x" * 4001, "max_new_tokens": 0})
    assert too_long.status_code == 400 and "limit is 4000" in too_long.text
