"""Operating the API safely: reads need a key when keys are configured (unless
``public_reads``), CORS, request ids on every response and in every log line, JSON logs,
the Prometheus process collector. The real app over a cheap service (``light_app``)."""

from __future__ import annotations

import json
import logging

import pytest
from fastapi.testclient import TestClient

from copilot.api import logs

KEY = {"Authorization": "Bearer k1"}
DOC = "/v1/documents/tickets%2Fjira_export.json%23OPS-107"
QUESTION = {"question": "What was the resolution of OPS-107?"}


@pytest.fixture(autouse=True)
def _logging(restore_logging):
    yield


# -- reads need a key ---------------------------------------------------------------------------------
def test_documents_and_search_need_a_key_when_keys_are_configured(light_app):
    """The issue's row: GET /v1/documents and /v1/documents/{id} answered full chunk text without a key."""
    with TestClient(light_app(api_keys=["k1", "k2"])) as c:
        for method, path, body in (("GET", "/v1/documents", None), ("GET", DOC, None),
                                   ("POST", "/v1/search", QUESTION), ("POST", "/v1/ask", QUESTION),
                                   ("POST", "/v1/chat/completions", {"model": "opscopilot", "messages": [
                                       {"role": "user", "content": "hi"}]}), ("GET", "/v1/models", None)):
            r = c.request(method, path, json=body)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (path, r.text)
            assert "text" not in r.text and "chunks" not in r.text
            r = c.request(method, path, json=body, headers={"Authorization": "Bearer nope"})
            assert r.status_code == 403, path
        page = c.get("/v1/documents", headers=KEY)
        assert page.status_code == 200 and page.json()["total"] > 0
        doc = c.get(DOC, headers={"Authorization": "Bearer k2"})
        assert doc.status_code == 200 and doc.json()["chunks"][0]["text"]
        r = c.post("/v1/search", json=QUESTION, headers=KEY)
        assert r.status_code == 200 and r.json()["sources"][0]["doc_id"].endswith("#OPS-107")
        assert c.post("/v1/ask", json=QUESTION, headers=KEY).status_code == 503  # authorised; no model here
        # liveness, readiness, metrics and the page stay open
        for path in ("/healthz", "/metrics", "/", "/openapi.json"):
            assert c.get(path).status_code == 200, path
        assert c.get("/readyz").status_code == 503  # no model: not ready, but no key asked


def test_public_reads_opens_reads_not_writes(light_app):
    with TestClient(light_app(api_keys=["k1"], public_reads=True)) as c:
        assert c.get("/v1/documents").status_code == 200
        assert c.get(DOC).status_code == 200
        assert c.post("/v1/search", json=QUESTION).status_code == 200
        assert c.get("/v1/models").status_code == 200
        assert c.post("/v1/ask", json=QUESTION).status_code == 503  # passed auth
        assert c.delete(DOC).status_code == 401
        assert c.post("/v1/ingest", json={"path": "x"}).status_code == 401
    with TestClient(light_app(api_keys=["k1"], public_reads=True, require_key_for_ask=True)) as c:
        assert c.get("/v1/documents").status_code == 200
        assert c.post("/v1/ask", json=QUESTION).status_code == 401
        assert c.post("/v1/chat/completions", json={"model": "opscopilot", "messages": [
            {"role": "user", "content": "hi"}]}).json()["error"]["type"] == "authentication_error"


def test_without_keys_everything_is_open(light_app):
    with TestClient(light_app()) as c:
        assert c.get("/v1/documents").status_code == 200
        assert c.post("/v1/search", json=QUESTION).status_code == 200


# -- CORS ------------------------------------------------------------------------------------------------
def test_cors_is_off_by_default(light_app):
    with TestClient(light_app()) as c:
        r = c.get("/healthz", headers={"Origin": "https://ops.example"})
        assert "access-control-allow-origin" not in r.headers
        r = c.options("/v1/ask", headers={"Origin": "https://ops.example", "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in r.headers


def test_cors_origins(light_app, monkeypatch):
    monkeypatch.setenv("COPILOT_CORS_ORIGINS", "https://ops.example, https://wiki.example")
    from copilot.config import Settings

    assert Settings(_env_file=None).cors_origins == ["https://ops.example", "https://wiki.example"]
    with TestClient(light_app(cors_origins=["https://ops.example", "https://wiki.example"], api_keys=["k1"])) as c:
        r = c.options("/v1/ask", headers={"Origin": "https://wiki.example", "Access-Control-Request-Method": "POST",
                                          "Access-Control-Request-Headers": "authorization, content-type"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://wiki.example"
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        r = c.options("/v1/ask", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
        r = c.get("/v1/documents", headers={"Origin": "https://ops.example", **KEY})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://ops.example"
        assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
        r = c.get("/v1/documents", headers={"Origin": "https://ops.example"})  # errors carry CORS headers too
        assert r.status_code == 401 and r.headers["access-control-allow-origin"] == "https://ops.example"


# -- request ids ---------------------------------------------------------------------------------------------
def test_every_response_has_a_request_id(light_app):
    with TestClient(light_app(api_keys=["k1"], max_body_bytes=2048)) as c:
        responses = [c.get("/healthz"), c.get("/nope"), c.get("/v1/documents"), c.post("/v1/ask", json={}),
                     c.post("/v1/ask", content=b"x" * 5000, headers={"content-type": "application/json"}),
                     c.post("/v1/ask", json=QUESTION, headers=KEY), c.get("/static/app.js")]
        assert [r.status_code for r in responses] == [200, 404, 401, 401, 413, 503, 200]
        ids = [r.headers["x-request-id"] for r in responses]
        assert len(set(ids)) == len(ids) and all(len(i) == 32 for i in ids)
        with c.stream("POST", "/v1/ask", json={**QUESTION, "stream": True}, headers=KEY) as r:
            assert r.headers["x-request-id"]


@pytest.mark.parametrize("given,kept", [("req-42.a:b/c", True), ("a" * 128, True), ("a" * 129, False),
                                        ("two words", False), ("", False), ("é", False), ("<script>", False)])
def test_a_sane_client_request_id_is_kept(light_app, given, kept):
    with TestClient(light_app()) as c:
        r = c.get("/healthz", headers={"X-Request-Id": given.encode("utf-8")})
    assert (r.headers["x-request-id"] == given) is kept
    assert logs.sane_request_id(r.headers["x-request-id"])


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_log_lines_carry_the_request_id_as_json(light_app, capsys):
    app = light_app(log_format="json")

    @app.get("/v1/test-log", include_in_schema=False)
    def logging_route():  # a route of this test that logs, as handlers do
        logging.getLogger("copilot.test").warning("inside the handler")
        return {"ok": True}

    @app.get("/v1/test-boom", include_in_schema=False)
    def failing_route():  # an unexpected error: logged with its id, answered 500 naming it
        raise RuntimeError("boom")

    with TestClient(app, raise_server_exceptions=False) as c:
        capsys.readouterr()
        r = c.get("/v1/test-log", headers={"X-Request-Id": "trace-1"})
        assert r.headers["x-request-id"] == "trace-1"
        boom = c.get("/v1/test-boom")
        logging.getLogger("copilot.test").warning("outside any request")
    lines = _json_lines(capsys.readouterr().err)
    inside = [x for x in lines if x["message"] == "inside the handler"]
    assert inside and inside[0]["request_id"] == "trace-1" and inside[0]["level"] == "WARNING"
    assert set(inside[0]) >= {"time", "level", "logger", "message", "request_id"}
    boom_id = boom.headers["x-request-id"]
    assert boom.status_code == 500 and boom_id in boom.json()["detail"]
    failed = [x for x in lines if x["request_id"] == boom_id and x["level"] == "ERROR"]
    assert failed and "RuntimeError: boom" in failed[0]["exception"]
    assert [x["request_id"] for x in lines if x["message"] == "outside any request"] == ["-"]


def test_text_logs_carry_the_request_id(light_app, capsys):
    app = light_app()

    @app.get("/v1/test-log", include_in_schema=False)
    def logging_route():
        logging.getLogger("copilot.test").warning("inside the handler")
        return {"ok": True}

    with TestClient(app) as c:
        capsys.readouterr()
        c.get("/v1/test-log", headers={"X-Request-Id": "trace-2"})
    line = next(x for x in capsys.readouterr().err.splitlines() if "inside the handler" in x)
    assert "[trace-2]" in line and "WARNING copilot.test" in line


def test_uvicorn_access_lines_carry_the_request_id(light_app, capsys):
    """Under a real uvicorn, its access log goes through the same handler, with the id."""
    import httpx

    from copilot.api.server import ServerThread

    with ServerThread(light_app(log_format="json"), log_level="info") as server:
        capsys.readouterr()
        r = httpx.get(server.url + "/healthz", headers={"X-Request-Id": "trace-3"})
        assert r.headers["x-request-id"] == "trace-3"
    access = [x for x in _json_lines(capsys.readouterr().err) if x["logger"] == "uvicorn.access"]
    assert any(x["request_id"] == "trace-3" and "/healthz" in x["message"] for x in access), access


# -- metrics ---------------------------------------------------------------------------------------------------
def test_process_collector_on_metrics(light_app):
    with TestClient(light_app()) as c:
        text = c.get("/metrics").text
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                 "process_start_time_seconds", "python_info", "python_gc_collections_total"):
        assert f"\n{name}" in text, name
    assert "copilot_http_requests_total" in text
