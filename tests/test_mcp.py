"""The MCP server (issue 45, item 2): the official SDK's own client against a real uvicorn on
127.0.0.1 (streamable HTTP at ``/mcp``) and against ``copilot mcp`` over stdio. The tools return
what the routes return for the same request, under the same keys and scopes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path
from urllib.parse import quote

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import HashEmbedder  # noqa: E402

from copilot.api.app import create_app  # noqa: E402
from copilot.api.server import ServerThread  # noqa: E402
from copilot.config import Settings  # noqa: E402
from copilot.service import CopilotService  # noqa: E402
from ingestion.pipeline import ingest_paths  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "evals" / "data" / "corpus"
KEYS_TOML = f"""
[[keys]]
name = "ops"
key_sha256 = "{hashlib.sha256(b'ops-key').hexdigest()}"
doc_types = ["elog", "shiftlog"]

[[keys]]
name = "admin"
key = "admin-key"
ingest = true
delete = true
"""
OPS, ADMIN = "ops-key", "admin-key"
QUESTION = "How was the dc-pool-07 domain restarted?"


def call(url: str, key: str | None, tool: str, arguments: dict):
    """One tool call through the SDK's client over streamable HTTP (a fresh connection)."""
    async def go():
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
            async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
                return await client.call_tool(tool, arguments)
    return asyncio.run(go())


def list_tools(url: str, key: str):
    async def go():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
                return (await client.list_tools()).tools
    return asyncio.run(go())


def structured(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content if result.structured_content is not None else json.loads(result.content[0].text)


@pytest.fixture(scope="module")
def light_server(tmp_path_factory):
    """The real app over the sample corpus (HashEmbedder, no language model), with scoped keys."""
    base = tmp_path_factory.mktemp("mcp")
    store = ChunkStore(base / "data", embedder=HashEmbedder())
    ingest_paths([CORPUS], store, progress=False)
    (base / "keys.toml").write_text(KEYS_TOML)
    settings = Settings(data_dir=base / "app", keys_file=base / "keys.toml", _env_file=None)
    with ServerThread(create_app(settings, CopilotService(settings, store, None))) as server:
        yield server


def test_tools_are_listed_with_their_arguments(light_server):
    tools = {t.name: t for t in list_tools(light_server.url, ADMIN)}
    assert set(tools) == {"search", "ask", "get_document"}
    assert tools["ask"].input_schema["required"] == ["question"]
    assert {"question", "max_sources", "filters"} <= set(tools["search"].input_schema["properties"])
    assert tools["ask"].output_schema is not None  # structured: the AskResponse model


def test_search_and_get_document_return_what_the_routes_return(light_server):
    url = light_server.url
    got = structured(call(url, ADMIN, "search", {"question": QUESTION, "max_sources": 3}))
    api = httpx.post(url + "/v1/search", json={"question": QUESTION, "max_sources": 3},
                     headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert got["sources"] == api["sources"]
    doc_id = got["sources"][0]["doc_id"]
    document = structured(call(url, ADMIN, "get_document", {"doc_id": doc_id}))
    api_doc = httpx.get(url + "/v1/documents/" + quote(doc_id, safe=""),
                        headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert json.loads(json.dumps(document)) == api_doc


def test_filters_are_the_routes_filters(light_server):
    jira = {"question": "restart", "filters": {"doc_types": ["jira"]}}
    got = structured(call(light_server.url, ADMIN, "search", jira))
    assert got["sources"] and {s["doc_type"] for s in got["sources"]} == {"jira"}
    bad = call(light_server.url, ADMIN, "search", {"question": "restart", "filters": {"doc_types": ["nope"]}})
    assert bad.is_error and "doc_types" in bad.content[0].text


def test_a_scoped_key_sees_only_its_documents_in_every_tool(light_server):
    url = light_server.url
    for question in (QUESTION, "What was the resolution of OPS-107?", "FTS outage root cause"):
        got = structured(call(url, OPS, "search", {"question": question, "max_sources": 10}))
        assert got["sources"], question
        assert {s["doc_type"] for s in got["sources"]} <= {"elog", "shiftlog"}, question
    outside = call(url, OPS, "get_document", {"doc_id": "tickets/jira_export.json#OPS-107"})
    assert outside.is_error and "no document" in outside.content[0].text
    unknown = call(url, OPS, "get_document", {"doc_id": "tickets/jira_export.json#OPS-999"})
    assert unknown.content[0].text.replace("999", "107") == outside.content[0].text  # cannot tell which
    inside = structured(call(url, ADMIN, "get_document", {"doc_id": "tickets/jira_export.json#OPS-107"}))
    assert inside["doc_id"] == "tickets/jira_export.json#OPS-107"


def test_keys_are_checked_before_mcp_reads_the_request(light_server):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    missing = httpx.post(light_server.url + "/mcp", json=body, headers=headers)
    assert missing.status_code == 401 and "missing API key" in missing.json()["error"]["message"]
    wrong = httpx.post(light_server.url + "/mcp", json=body, headers={**headers, "Authorization": "Bearer nope"})
    assert wrong.status_code == 403 and wrong.json()["error"]["code"] == "invalid_api_key"


def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(light_server):
    url = light_server.url
    unknown = call(url, ADMIN, "search", {"query": QUESTION})
    assert unknown.is_error and "unknown argument(s) ['query']" in unknown.content[0].text
    missing = call(url, ADMIN, "ask", {})
    assert missing.is_error and "question" in missing.content[0].text
    for bad in ("many", "3", 0, -1, 101):  # as /v1/search takes it: a JSON integer 1..100
        assert call(url, ADMIN, "search", {"question": QUESTION, "max_sources": bad}).is_error, bad
    assert httpx.get(url + "/mcp", headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 405  # stateless
    empty = call(url, ADMIN, "search", {"question": " "})
    assert empty.is_error
    no_model = call(url, ADMIN, "ask", {"question": QUESTION})
    assert no_model.is_error and no_model.content[0].text  # the reason, not a crash
    assert structured(call(url, ADMIN, "search", {"question": QUESTION}))["sources"]


@pytest.mark.slow
def test_ask_returns_what_v1_ask_returns(sample_service, tmp_path):
    """The same question through MCP and through ``POST /v1/ask``: the same answer, sources,
    citations, quotes and checks (the engine is exact, so greedy text is identical)."""
    settings = Settings(data_dir=tmp_path, max_new_tokens=24, max_sources=2, _env_file=None)
    service = CopilotService(settings, sample_service.store, sample_service.models.engine)
    questions = [json.loads(line)["question"] for line in (REPO / "evals/data/questions.jsonl").open()][:4]
    questions.append("When was the Kubernetes cluster upgraded to 1.31?")  # unanswerable: "not found"
    with ServerThread(create_app(settings, service)) as server:
        for question in questions:
            mcp = structured(call(server.url, None, "ask", {"question": question}))
            api = httpx.post(server.url + "/v1/ask", json={"question": question}, timeout=120).json()
            for field in ("answer", "sources", "cited", "supported", "quotes", "unverified", "not_found",
                          "destructive"):
                assert mcp[field] == api[field], (question, field)


@pytest.mark.slow
def test_stdio_server_answers_through_copilot_mcp(sample_service, tmp_path):
    """``copilot mcp`` over stdin/stdout, started by the SDK's client as Claude Desktop starts it,
    with the key it is given (keys are configured); without one it exits with the reason."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(sample_service.store.data_dir, data, ignore=shutil.ignore_patterns("*.lock"))
    (tmp_path / "keys.toml").write_text(KEYS_TOML)
    env = {**os.environ, "COPILOT_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1", "COPILOT_MAX_NEW_TOKENS": "8",
           "COPILOT_KEYS_FILE": str(tmp_path / "keys.toml")}
    command = [sys.executable, "-c", "from copilot.cli.main import app; app()", "mcp"]
    params = StdioServerParameters(command=command[0], args=command[1:] + ["--api-key", OPS], env=env, cwd=str(REPO))

    async def go():
        async with Client(params, read_timeout_seconds=300) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            found = await client.call_tool("search", {"question": QUESTION, "max_sources": 5})
            outside = await client.call_tool("get_document", {"doc_id": "tickets/jira_export.json#OPS-107"})
            return tools, found, outside
    tools, found, outside = asyncio.run(go())
    assert tools == {"search", "ask", "get_document"}
    assert {s["doc_type"] for s in structured(found)["sources"]} <= {"elog", "shiftlog"}  # the key's scope
    assert outside.is_error

    import subprocess
    refused = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
    assert refused.returncode == 2 and "--api-key" in refused.stderr and not refused.stdout
