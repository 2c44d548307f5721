"""OpenAI-format errors on every ``/v1`` route, as the clients read them: behind a proxy's root
path too, for bodies over the size limit, with ``param`` naming the field as the client wrote
it and a ``code`` on every error (the real app over the light store, no language model)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

CHAT = {"model": "opscopilot", "messages": [{"role": "user", "content": "How was OPS-107 fixed?"}]}


def _error(r) -> dict:
    body = r.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["code"], body
    return body["error"]


@pytest.mark.parametrize("root_path", ["", "/opscopilot"])
def test_every_v1_error_is_openai_shaped_behind_a_root_path_too(light_app, root_path):
    app = light_app(api_keys=["k1"])
    with TestClient(app, root_path=root_path) as c:
        key = {"Authorization": "Bearer k1"}
        assert _error(c.get("/v1/models"))["code"] == "invalid_api_key"
        r = c.get("/v1/models", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 403 and _error(r)["code"] == "invalid_api_key"
        r = c.post("/v1/ingest", json={"path": "x"}, headers=key)  # a valid key, a refused action
        assert r.status_code == 403 and _error(r)["code"] == "permission_denied"
        r = c.get("/v1/no/such", headers=key)
        assert r.status_code == 404 and _error(r)["message"].endswith("/v1/no/such)")
        assert _error(c.get("/v1", headers=key))["code"] == "not_found"
        r = c.post("/v1/chat/completions", json={**CHAT, "n": 2}, headers=key)
        assert r.status_code == 400 and _error(r)["param"] == "n"
        r = c.delete("/v1/models", headers=key)
        assert r.status_code == 405 and _error(r)["code"] == "method_not_allowed"


def test_bodies_over_the_limit_are_openai_shaped(light_app):
    with TestClient(light_app(max_body_bytes=2048)) as c:
        r = c.post("/v1/chat/completions", json={**CHAT, "messages": [{"role": "system", "content": "x" * 5000},
                                                                         *CHAT["messages"]]})
        assert r.status_code == 413 and _error(r)["code"] == "request_too_large"
        assert "the limit is 2048 bytes" in r.json()["error"]["message"]


@pytest.mark.parametrize("body, param", [
    ({**CHAT, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({**CHAT, "stop": [""]}, "stop"),
    ({**CHAT, "messages": [*CHAT["messages"], {"role": "assistant", "content": "hi"}]}, "messages"),
    ({**CHAT, "max_tokens": 0}, "max_tokens"),
    ({**CHAT, "max_sources": 0}, "max_sources"),
    ({**CHAT, "messages": [{"role": "user", "content": ["x"]}]}, "messages.0.content"),
])
def test_param_names_the_field_as_the_client_wrote_it(light_app, body, param):
    with TestClient(light_app()) as c:
        r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and _error(r)["param"] == param, r.text
    assert "function-after" not in r.text and "Value error," not in r.text


def test_malformed_json_and_query_parameters(light_app):
    with TestClient(light_app()) as c:
        r = c.post("/v1/chat/completions", content=b'{"model": "opscopilot", "messages": [',
                   headers={"content-type": "application/json"})
        assert r.status_code == 400 and _error(r)["param"] is None
        r = c.get("/v1/documents?limit=-5")
        assert r.status_code == 400 and _error(r)["param"] == "limit"
        assert r.json()["detail"][0]["loc"] == ["query", "limit"]


@pytest.mark.parametrize("body, message", [
    ({"model": "opscopilot", "input": []}, "input: List should have at least 1 item"),
    ({"model": "opscopilot", "input": [{"role": "assistant", "content": "hi"}]}, "the last message must be"),
])
def test_responses_input_errors_name_the_responses_fields(light_app, body, message):
    with TestClient(light_app()) as c:
        r = c.post("/v1/responses", json=body)
    err = _error(r)
    assert r.status_code == 400 and err["param"] == "input" and message in err["message"], r.text
    assert "ChatCompletionRequest" not in err["message"] and "pydantic.dev" not in err["message"]


def test_too_many_prompts_for_one_batch_is_a_400(light_app):
    with TestClient(light_app(max_batch=4)) as c:
        r = c.post("/v1/completions", json={"model": "opscopilot", "prompt": ["a"] * 5})
    assert r.status_code == 400 and _error(r)["param"] == "prompt" and "at most 4 prompts" in r.text


def test_a_long_unknown_model_id_is_not_echoed_whole(light_app):
    with TestClient(light_app()) as c:
        r = c.get("/v1/models/" + "m" * 20_000)
    assert r.status_code == 404 and _error(r)["code"] == "model_not_found" and len(json.dumps(r.json())) < 5000
