"""The OpenAI-compatible API with the official ``openai`` client against a real uvicorn on 127.0.0.1,
with the real embedded model; plus client disconnect stopping a real generation."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from copilot.api.app import create_app
from copilot.api.server import ServerThread
from copilot.config import Settings
from copilot.service import CopilotService

pytestmark = pytest.mark.slow

QUESTION = "What was the resolution of OPS-107?"
EXTRA = {"max_sources": 2}  # short prompts keep the real model fast


@pytest.fixture(scope="module")
def server(sample_service, tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("openai-data"), max_new_tokens=8, max_sources=2,
                        api_keys=["sk-test"], require_key_for_ask=True, _env_file=None)
    service = CopilotService(settings, sample_service.store, sample_service.models.engine)
    with ServerThread(create_app(settings, service)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0, timeout=120) as c:
        yield c


def test_models(client, sample_service):
    ids = [m.id for m in client.models.list()]
    assert ids == ["opscopilot", sample_service.settings.target_model]


def test_chat_completion_non_streaming(client):
    resp = client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": QUESTION}],
                                          max_tokens=8, extra_body=EXTRA)
    assert resp.object == "chat.completion" and resp.model == "opscopilot" and resp.id.startswith("chatcmpl-")
    choice = resp.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    extra = resp.model_extra
    assert extra["sources"][0]["doc_id"] == "tickets/jira_export.json#OPS-107" and extra["sources"][0]["n"] == 1
    stats = extra["stats"]
    assert resp.usage.completion_tokens == stats["new_tokens"] <= 8
    assert resp.usage.prompt_tokens == stats["prompt_tokens"] > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    assert (choice.finish_reason == "length") == (stats["finish_reason"] == "length")


def test_chat_completion_streaming_matches(client):
    messages = [{"role": "user", "content": QUESTION}]
    whole = client.chat.completions.create(model="opscopilot", messages=messages, max_tokens=8, extra_body=EXTRA)
    stream = client.chat.completions.create(model="opscopilot", messages=messages, max_tokens=8, extra_body=EXTRA,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content  # greedy: identical
    final = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(final) == 1 and final[0].choices[0].finish_reason == whole.choices[0].finish_reason
    assert final[0].model_extra["sources"] == whole.model_extra["sources"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_sources_reach_standard_clients_as_a_footer(client):
    """Open WebUI and LangChain's ChatOpenAI show only the message content: the sources are
    appended to it (non-streaming, and as the last content delta when streaming)."""
    messages = [{"role": "user", "content": QUESTION}]
    whole = client.chat.completions.create(model="opscopilot", messages=messages, max_tokens=4, extra_body=EXTRA)
    content = whole.choices[0].message.content
    sources = whole.model_extra["sources"]
    footer = "\n\nSources:\n" + "\n".join(
        f"[{s['n']}] {s['title'] or s['key']} — {s['source']}" + (f", {s['created'][:10]}" if s["created"] else "")
        for s in sources)
    assert content.endswith(footer) and "#OPS-107" in sources[0]["doc_id"]
    assert "[1] " in footer and "tickets/jira_export.json" in footer
    chunks = list(client.chat.completions.create(model="opscopilot", messages=messages, max_tokens=4,
                                                 extra_body=EXTRA, stream=True))
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert deltas[-1] == footer and "".join(deltas) == content
    # sent back as history, the footer does not reach the prompt
    answer = content[: -len(footer)]
    follow = [*messages, {"role": "assistant", "content": None}, {"role": "user", "content": "and then?"}]
    with_footer = client.chat.completions.create(model="opscopilot", max_tokens=1, extra_body=EXTRA, messages=[
        *follow[:1], {"role": "assistant", "content": content}, *follow[2:]])
    without = client.chat.completions.create(model="opscopilot", max_tokens=1, extra_body=EXTRA, messages=[
        *follow[:1], {"role": "assistant", "content": answer}, *follow[2:]])
    assert with_footer.usage.prompt_tokens == without.usage.prompt_tokens


def test_sources_footer_can_be_turned_off(sample_service, tmp_path):
    from fastapi.testclient import TestClient

    settings = Settings(data_dir=tmp_path, max_new_tokens=4, max_sources=2, openai_sources_footer=False, _env_file=None)
    service = CopilotService(settings, sample_service.store, sample_service.models.engine)
    with TestClient(create_app(settings, service)) as c:
        body = c.post("/v1/chat/completions", json={"model": "opscopilot", "messages": [
            {"role": "user", "content": QUESTION}]}).json()
    assert "Sources:" not in body["choices"][0]["message"]["content"] and body["sources"]


def test_history_and_system_messages(client):
    resp = client.chat.completions.create(
        model="opscopilot", max_tokens=4, extra_body=EXTRA,
        messages=[{"role": "system", "content": "You are a pirate."},
                  {"role": "user", "content": "Tell me about the dCache pool incident."},
                  {"role": "assistant", "content": "dc-pool-07 lost a disk in slot 14."},
                  {"role": "user", "content": [{"type": "text", "text": QUESTION}]}])
    # the earlier question is shown with its own sources first, numbered across the conversation,
    # then the last user message's: its best document is among them
    sources = resp.model_extra["sources"]
    assert [s["n"] for s in sources] == list(range(1, len(sources) + 1))
    assert any(s["doc_id"].endswith("#OPS-107") for s in sources)
    assert resp.usage.completion_tokens <= 4


def test_openai_errors(client, server):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": QUESTION}])
    with pytest.raises(openai.BadRequestError, match="last message"):
        client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": QUESTION},
                                                                      {"role": "assistant", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="text content"):
        client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://127.0.0.1/x.png"}}]}])
    with pytest.raises(openai.BadRequestError, match="cap"):
        client.chat.completions.create(model="opscopilot", max_tokens=10**6,
                                       messages=[{"role": "user", "content": QUESTION}])
    # parameters the server does not implement: 400 naming them, never silently dropped
    for kwargs, param in (({"n": 2}, "n"), ({"logprobs": True, "top_logprobs": 2}, "logprobs"),
                          ({"tools": [{"type": "function", "function": {"name": "get_ticket", "parameters": {
                              "type": "object", "properties": {}}}}], "tool_choice": "required"}, "tool_choice"),
                          ({"response_format": {"type": "json_object"}}, "response_format")):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": QUESTION}],
                                           **kwargs)
        assert err.value.param == param and err.value.code == "unsupported_parameter", kwargs
        assert param in err.value.message
    with openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0) as bad:
        with pytest.raises(openai.PermissionDeniedError, match="invalid API key"):
            bad.models.list()


def test_client_disconnect_stops_a_real_generation(server):
    headers = {"Authorization": "Bearer sk-test"}

    def cancelled_count(c) -> float:
        for line in c.get("/metrics").text.splitlines():
            if line.startswith('copilot_generations_total{finish_reason="cancelled"}'):
                return float(line.split()[-1])
        return 0.0

    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as c:
        before = cancelled_count(c)
        payload = {"question": "Describe the FTS outage post-mortem in detail.", "max_new_tokens": 200,
                   "max_sources": 2, "stream": True}
        with c.stream("POST", "/v1/ask", json=payload) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data:") and json.loads(line[5:]).get("text"):
                    break  # got the first token: hang up
        deadline = time.monotonic() + 30
        while cancelled_count(c) < before + 1:
            assert time.monotonic() < deadline, "generation was not cancelled after the client disconnected"
            time.sleep(0.05)
        text = c.get("/metrics").text
    # the cancelled generation stopped early: far fewer than 200 tokens were generated in this module
    tokens = float(next(line.split()[-1] for line in text.splitlines()
                        if line.startswith("copilot_generated_tokens_total")))
    assert tokens < 200


def test_not_found_and_checked_literals_reach_openai_clients(client):
    """A ticket no entry has: "not found" in the content (no model run), with the closest
    entries; every answer carries its checked literals as extension fields."""
    r = client.chat.completions.create(model="opscopilot", messages=[
        {"role": "user", "content": "What was the resolution of OPS-999?"}], max_tokens=8, extra_body=EXTRA)
    extra = r.model_extra
    content = r.choices[0].message.content
    assert extra["not_found"] is True and content.startswith("Not found") and "OPS-999" in content
    assert "\n\nSources:\n[1] " in content and extra["stats"]["grounding"]["missing"] == ["OPS-999"]
    ok = client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": QUESTION}],
                                        max_tokens=8, extra_body=EXTRA)
    answer = ok.model_extra
    assert (answer["not_found"] is False and isinstance(answer["quotes"], list)
            and isinstance(answer["unverified"], list))
    text = ok.choices[0].message.content
    for lit in answer["quotes"] + answer["unverified"]:
        assert text[lit["answer_start"]:lit["answer_end"]] == lit["literal"]


def test_the_footer_lists_literals_in_no_source():
    from copilot.api.footer import strip_sources_footer
    from copilot.api.openai_common import sources_footer
    from copilot.api.schemas.sources import SourceOut

    src = SourceOut(n=1, doc_id="a#1", source="a", title="T", url="/v1/documents/a%231", highlights=["x"],
                    snippet="x", score=0.1, chunks=[])
    footer = sources_footer([src], [{"literal": "rm -rf /tmp/x"}, {"literal": "se-99"}, {"literal": "se-99"}])
    assert footer == ("\n\nSources:\n[1] T — a\nNot in the sources — check before running: `rm -rf /tmp/x`, `se-99`")
    assert strip_sources_footer("answer" + footer) == "answer"
