"""Strict request types and clean error parameters (issue 23, item 9): numbers and flags are
taken as JSON writes them (``max_tokens: "10"`` and ``true`` are 400s naming the field), NaN and
±Infinity are "must be a finite number", a union's failed alternatives give one error, and
``param`` never carries a pydantic validator tag. The real app over the light store."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

CHAT = '{"model": "opscopilot", "messages": [{"role": "user", "content": "How was OPS-107 fixed?"}]'
ASK = '{"question": "How was OPS-107 fixed?"'


@pytest.fixture(scope="module")
def client(light_store, tmp_path_factory):
    from copilot.api.app import create_app
    from copilot.config import Settings
    from copilot.service import CopilotService

    settings = Settings(data_dir=tmp_path_factory.mktemp("strict"), _env_file=None)
    with TestClient(create_app(settings, CopilotService(settings, light_store, None))) as c:
        yield c


def _post(client, url: str, head: str, extra: str):
    """POST raw JSON (``NaN``, ``1e999`` and lone surrogates sent as the client wrote them)."""
    return client.post(url, content=(head + ", " + extra + "}").encode(), headers={"content-type": "application/json"})


@pytest.mark.parametrize("url, head, extra, param, message", [
    ("/v1/chat/completions", CHAT, '"max_tokens": "10"', "max_tokens", "max_tokens must be an integer, got a string"),
    ("/v1/chat/completions", CHAT, '"max_tokens": true', "max_tokens", "max_tokens must be an integer, got a boolean"),
    ("/v1/chat/completions", CHAT, '"max_tokens": 10.0', "max_tokens", "must be an integer, got a number"),
    ("/v1/chat/completions", CHAT, '"use_context": "no"', "use_context", "use_context must be true or false"),
    ("/v1/chat/completions", CHAT, '"max_sources": true', "max_sources", "must be an integer, got a boolean"),
    ("/v1/chat/completions", CHAT, '"temperature": "0.5"', "temperature", "temperature must be a number"),
    ("/v1/chat/completions", CHAT, '"stream": 1', "stream", "stream must be true or false, got an integer"),
    ("/v1/chat/completions", CHAT, '"seed": "7"', "seed", "seed must be an integer"),
    ("/v1/chat/completions", CHAT, '"suppress_tokens": [1, "2"]', "suppress_tokens.1", "must be an integer"),
    ("/v1/completions", '{"model": "opscopilot", "prompt": "hi"', '"max_tokens": "10"', "max_tokens",
     "must be an integer"),
    ("/v1/responses", '{"model": "opscopilot", "input": "hi"', '"max_output_tokens": true', "max_output_tokens",
     "must be an integer"),
    ("/v1/embeddings", '{"model": "all-MiniLM-L6-v2", "input": "hi"', '"truncate": "yes"', "truncate",
     "must be true or false"),
    ("/v1/ask", ASK, '"max_new_tokens": "10"', "max_new_tokens", "must be an integer"),
    ("/v1/ask", ASK, '"stream": "false"', "stream", "must be true or false"),
    ("/v1/search", ASK, '"max_sources": "3"', "max_sources", "must be an integer"),
])
def test_numbers_and_flags_of_another_json_type_are_400s_naming_the_field(client, url, head, extra, param, message):
    r = _post(client, url, head, extra)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and message in err["message"] and err["code"] == "invalid_type", err


@pytest.mark.parametrize("url, head, extra, param", [
    ("/v1/chat/completions", CHAT, '"temperature": NaN', "temperature"),
    ("/v1/chat/completions", CHAT, '"temperature": 1e999', "temperature"),
    ("/v1/chat/completions", CHAT, '"top_p": -Infinity', "top_p"),
    ("/v1/chat/completions", CHAT, '"frequency_penalty": NaN', "frequency_penalty"),
    ("/v1/responses", '{"model": "opscopilot", "input": "hi"', '"temperature": NaN', "temperature"),
    ("/v1/ask", ASK, '"temperature": NaN', "temperature"),
    ("/v1/ask", ASK, '"repetition_penalty": Infinity', "repetition_penalty"),
    ("/v1/ask", ASK, '"logit_bias": {"5": NaN}', "logit_bias"),
])
def test_nan_and_infinity_are_not_finite_numbers(client, url, head, extra, param):
    r = _post(client, url, head, extra)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"] == f"{param} must be a finite number", err
    assert "≤" not in err["message"] and "less than" not in err["message"]


def test_valid_numbers_still_pass_validation(client):
    """An integer is a number (``temperature: 1``); a request that validates reaches the model
    (503 here: the light app has none). Query parameters stay strings that parse."""
    for extra in ('"temperature": 1', '"temperature": 0.5, "top_p": 1, "max_tokens": 8, "use_context": false',
                  '"seed": 7, "stream": false, "logit_bias": {"5": -100}'):
        r = _post(client, "/v1/chat/completions", CHAT, extra)
        assert r.status_code == 503, (extra, r.text)
    assert _post(client, "/v1/ask", ASK, '"temperature": 1, "max_sources": 2').status_code == 503
    assert client.get("/v1/documents", params={"limit": "10", "offset": "0"}).status_code == 200
    assert client.get("/v1/documents?limit=ten").json()["error"]["param"] == "limit"


@pytest.mark.parametrize("url, head, extra, param", [
    ("/v1/chat/completions", CHAT, r'"stop": "\ud800"', "stop"),
    ("/v1/chat/completions", CHAT, r'"stop": ["a", "\ud800"]', "stop"),
    ("/v1/completions", '{"model": "opscopilot", "prompt": "hi"', r'"stop": "\ud800"', "stop"),
    ("/v1/chat/completions", '{"model": "opscopilot"', r'"messages": [{"role": "user", "content": "\ud800"}]',
     "messages.0.content"),
    ("/v1/chat/completions", CHAT, r'"tool_choice": {"a": "\ud800"}', "tool_choice"),
    ("/v1/chat/completions", CHAT, r'"metadata": {"k": "\ud800"}', "metadata.k"),
    ("/v1/responses", '{"model": "opscopilot"', r'"input": [{"role": "user", "content": "\ud800"}]', "input"),
    ("/v1/embeddings", '{"model": "all-MiniLM-L6-v2"', r'"input": ["a", "\ud800"]', "input"),
])
def test_a_surrogate_names_the_field_with_one_clear_error(client, url, head, extra, param):
    r = _post(client, url, head, extra)
    assert r.status_code == 400, r.text
    body = r.json()
    err = body["error"]
    assert err["param"] == param, err
    assert "surrogate" in err["message"] and "valid list" not in err["message"] and ";" not in err["message"], err
    assert "function-after" not in r.text and "list[" not in r.text and "Value error" not in r.text
    assert len(body["detail"]) == 1
    assert body["detail"][0]["loc"] == ["body", *(int(p) if p.isdigit() else p for p in param.split("."))]


def test_error_messages_never_show_the_servers_folders(light_app, tmp_path):
    """Whole kind: any /v1 error whose message names a server folder (a model or settings file,
    the data dir, the home folder) shows the folder's name instead."""
    from pathlib import Path

    from fastapi import HTTPException

    app = light_app()  # its data dir is tmp_path

    def boom():
        raise HTTPException(500, f"generation failed: OSError: cannot open {tmp_path}/models/qwen/config.json "
                                 f"or {Path.home()}/.cache/x.bin")

    app.add_api_route("/v1/boom", boom)
    with TestClient(app) as c:
        message = c.get("/v1/boom").json()["error"]["message"]
    assert str(tmp_path) not in message and str(Path.home()) not in message
    assert "<model cache>/qwen/config.json" in message and "<home>/.cache/x.bin" in message, message


@pytest.mark.parametrize("extra, message", [
    ('"num_speculative_tokens": 33', "num_speculative_tokens"),
    ('"num_speculative_tokens": 0', "num_speculative_tokens"),
    ('"speculation": "greedy"', "speculation"),
])
def test_the_gamma_ceiling_and_the_speculation_mode_are_checked_at_the_door(client, extra, message):
    """One bound for γ (1..32, ``decoding.config.NUM_SPECULATIVE_TOKENS_RANGE``) and the modes of
    ``SpeculationMode``: outside them a 400 naming the field; at the bound the request validates."""
    r = _post(client, "/v1/ask", ASK, extra)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == message
    assert _post(client, "/v1/ask", ASK, '"num_speculative_tokens": 32, "speculation": "table"').status_code == 503
