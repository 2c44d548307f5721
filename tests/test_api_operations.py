"""Operating the API: auth, body limits, prompt limits, queue full, client disconnect, metrics.

A paced stand-in engine (real tokenizer and prompt building, one fake token every few
milliseconds, honouring cancellation) keeps these tests fast and deterministic; the
real engine runs in test_api_ask.py and test_api_openai.py.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi.testclient import TestClient
from interleaved import StreamOnly

from copilot.api.app import create_app
from copilot.api.server import ServerThread
from copilot.config import Settings
from copilot.service import CopilotService
from decoding.engine import GenerationResult, StreamEvent
from decoding.stats import DrafterStats, GenerationStats

pytestmark = pytest.mark.slow

QUESTION = "How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?"
POLL_WAIT_S = 0.6  # > question_job.POLL_S: long enough for a disconnect check


class PacedEngine(StreamOnly):
    """Engine stand-in: waits for ``gate``, then emits one token every ``step_s`` seconds up to
    the budget, polling ``cancel`` before each; records each run's finish reason."""

    def __init__(self, target, step_s: float = 0.0) -> None:
        self.target = target
        self.step_s = step_s
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.finished: list[str] = []

    def resolve(self, config):
        return None

    def stream(self, prompt_ids, config, contexts=(), cancel=None, settings=None):
        self.started.set()
        t0 = time.perf_counter()
        reason, out = "length", []
        deadline = time.monotonic() + 30
        while not self.gate.wait(0.01) and time.monotonic() < deadline:
            if cancel is not None and cancel():
                reason = "cancelled"
                break
        while reason != "cancelled" and len(out) < config.budget.max_new_tokens:
            if cancel is not None and cancel():
                reason = "cancelled"
                break
            time.sleep(self.step_s)
            out.append(42)
            yield StreamEvent(" ok", [42])
        stats = GenerationStats(prompt_tokens=len(prompt_ids), new_tokens=len(out),
                                target_passes=max(1, len(out) // 2), decode_tokens=len(out),
                                total_ms=(time.perf_counter() - t0) * 1000, finish_reason=reason,
                                drafters={"ngram": DrafterStats(rounds=2, proposed=8, accepted=6)})
        self.finished.append(reason)
        yield StreamEvent("", [], GenerationResult(out, " ok" * len(out), reason, stats))


def _settings(tmp_path_factory, **overrides) -> Settings:
    base = dict(data_dir=tmp_path_factory.mktemp("ops-data"), max_new_tokens=4, max_new_tokens_cap=1000,
                max_sources=2, _env_file=None)
    return Settings(**{**base, **overrides})


@pytest.fixture()
def make_app(sample_service, embedded_target, tmp_path_factory):
    """``(engine=None, **settings) -> (app, engine)`` over the sample store."""

    def make(engine=None, **overrides):
        engine = engine or PacedEngine(embedded_target)
        service = CopilotService(_settings(tmp_path_factory, **overrides), sample_service.store, engine)
        return create_app(service.settings, service), engine

    return make


def _wait(predicate, timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


# -- auth -----------------------------------------------------------------------------------------
def test_keys_required_for_ingest_delete_and_reads(make_app):
    app, _ = make_app(api_keys=["k1", "k2"])
    with TestClient(app) as c:
        r = c.post("/v1/ingest", json={"path": "x"})
        assert r.status_code == 401 and "missing API key" in r.json()["detail"]
        assert r.headers["www-authenticate"] == "Bearer"
        r = c.post("/v1/ingest", json={"path": "x"}, headers={"Authorization": "Basic azE6"})
        assert r.status_code == 401 and "Bearer" in r.json()["detail"]
        r = c.post("/v1/ingest", json={"path": "x"}, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 403 and r.json()["detail"] == "invalid API key"
        r = c.post("/v1/ingest", json={"path": "x"}, headers={"Authorization": "Bearer k2"})
        assert r.status_code == 403 and "COPILOT_INGEST_ROOT" in r.json()["detail"]  # authorised, but disabled
        assert c.delete("/v1/documents/a%23b").status_code == 401
        assert c.delete("/v1/documents/a%23b", headers={"Authorization": "Bearer nope"}).status_code == 403
        assert c.delete("/v1/documents/a%23b", headers={"Authorization": "Bearer k1"}).status_code == 404
        assert c.get("/v1/ingest/abc").status_code == 401
        # answers quote stored documents: reads too, unless public_reads
        assert c.post("/v1/ask", json={"question": QUESTION}).status_code == 401
        assert c.post("/v1/ask", json={"question": QUESTION}, headers={"Authorization": "Bearer k1"}).status_code == 200
        assert c.get("/v1/models").status_code == 401
        assert c.get("/v1/documents").status_code == 401
    app, _ = make_app(api_keys=["k1", "k2"], public_reads=True)
    with TestClient(app) as c:
        assert c.post("/v1/ask", json={"question": QUESTION}).status_code == 200
        assert c.get("/v1/models").status_code == 200
        assert c.get("/v1/documents").status_code == 200
        assert c.delete("/v1/documents/a%23b").status_code == 401


def test_require_key_for_ask(make_app):
    app, _ = make_app(api_keys=["k1"], require_key_for_ask=True, public_reads=True)
    with TestClient(app) as c:
        assert c.post("/v1/ask", json={"question": QUESTION}).status_code == 401
        assert c.post("/v1/ask", json={"question": QUESTION},
                      headers={"Authorization": "Bearer k0"}).status_code == 403
        assert c.post("/v1/ask", json={"question": QUESTION},
                      headers={"Authorization": "Bearer k1"}).status_code == 200
        r = c.get("/v1/models")
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert c.get("/healthz").status_code == 200 and c.get("/metrics").status_code == 200
        assert c.get("/v1/documents").status_code == 200  # public reads; asking still needs the key


# -- limits ---------------------------------------------------------------------------------------
def test_body_limits_answer_413_with_a_reason(make_app):
    app, _ = make_app(max_body_bytes=2048, max_upload_bytes=4096, api_keys=["k"])
    big = json.dumps({"question": "x" * 3000})
    with TestClient(app) as c:
        r = c.post("/v1/ask", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and "2048 bytes" in r.json()["detail"]

        def chunked():  # no Content-Length: the streamed bytes are counted
            yield b'{"question": "'
            for _ in range(10):
                yield b"y" * 500
            yield b'"}'

        r = c.post("/v1/ask", content=chunked(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and "2048 bytes" in r.json()["detail"]
        r = c.post("/v1/ingest", files=[("files", ("big.log", b"z" * 5000))], headers={"Authorization": "Bearer k"})
        assert r.status_code == 413 and "4096 bytes" in r.json()["detail"] and "upload" in r.json()["detail"]
        # the JSON limit still applies to JSON sent to the upload path
        r = c.post("/v1/ingest", content=json.dumps({"path": "p" * 3000}),
                   headers={"content-type": "application/json", "Authorization": "Bearer k"})
        assert r.status_code == 413
        assert c.get("/healthz").status_code == 200  # the server is fine afterwards


def test_question_over_the_prompt_budget_is_413_over_the_length_limit_400(make_app):
    app, _ = make_app(max_prompt_tokens=256, max_question_chars=3000)
    long_question = "Why did the transfer from site A to site B fail again this morning? " * 30  # ~2,000 chars
    with TestClient(app) as c:
        r = c.post("/v1/ask", json={"question": long_question})
        assert r.status_code == 413 and "prompt tokens" in r.json()["detail"] and "256" in r.json()["detail"]
        r = c.post("/v1/ask", json={"question": "x" * 3001})
        assert r.status_code == 400 and "3000" in r.json()["detail"]
        r = c.post("/v1/ask", json={"question": "x", "max_new_tokens": 1001})
        assert r.status_code == 400 and "cap 1000" in r.json()["detail"]


def test_history_is_trimmed_to_fit(make_app):
    app, _ = make_app(max_prompt_tokens=512)
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: " + "words " * 60}
               for i in range(20)]
    with TestClient(app) as c:
        r = c.post("/v1/ask", json={"question": "and the FNAL link?", "history": history})
        assert r.status_code == 200, r.text
        assert r.json()["stats"]["prompt_tokens"] <= 512


# -- queue, disconnect, metrics (real uvicorn) ------------------------------------------------------
@pytest.fixture()
def paced_server(make_app, embedded_target):
    engine = PacedEngine(embedded_target, step_s=0.01)
    app, _ = make_app(engine, queue_size=1, retry_after_s=3, max_batch=1)  # one at a time: the queue fills
    with ServerThread(app) as server:
        yield server, app, engine
    engine.gate.set()


def test_full_queue_answers_503_with_retry_after(paced_server):
    server, app, engine = paced_server
    engine.gate.clear()  # the first request holds the scheduler
    payload = {"question": QUESTION, "max_new_tokens": 3}
    with httpx.Client(base_url=server.url, timeout=30) as c, ThreadPoolExecutor(2) as pool:
        first = pool.submit(c.post, "/v1/ask", json=payload)
        _wait(engine.started.is_set, what="the first generation to start")
        second = pool.submit(c.post, "/v1/ask", json=payload)
        _wait(lambda: app.state.scheduler.depth == 1, what="the second request to queue")
        r = c.post("/v1/ask", json=payload)
        assert r.status_code == 503, r.text
        assert int(r.headers["retry-after"]) >= 3 and "queue is full" in r.json()["detail"]
        r = c.post("/v1/chat/completions",
                   json={"model": "opscopilot", "messages": [{"role": "user", "content": QUESTION}]})
        assert r.status_code == 503 and r.headers["retry-after"] and r.json()["error"]["code"] == "server_overloaded"
        assert "copilot_queue_depth 1.0" in c.get("/metrics").text
        engine.gate.set()
        assert first.result().status_code == 200 and second.result().status_code == 200
        metrics = c.get("/metrics").text
    assert "copilot_queue_rejections_total 2.0" in metrics
    assert 'copilot_http_requests_total{method="POST",route="/v1/ask",status="503"} 1.0' in metrics


def test_stream_disconnect_cancels_generation(paced_server, sse_events):
    server, app, engine = paced_server
    with httpx.Client(base_url=server.url, timeout=30) as c:
        with c.stream("POST", "/v1/ask", json={"question": QUESTION, "max_new_tokens": 1000, "stream": True}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            for event, data in sse_events(r.iter_lines()):
                if event == "sources":
                    continue  # sent before the answer starts
                assert event == "delta" and data["text"]
                break  # close after the first token
        _wait(lambda: engine.finished == ["cancelled"], what="the generation to be cancelled")
        _wait(lambda: 'copilot_generations_total{finish_reason="cancelled"} 1.0' in c.get("/metrics").text,
              what="the cancelled metric")


def test_non_streaming_disconnect_cancels_generation(paced_server):
    server, app, engine = paced_server
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/ask", json={"question": QUESTION, "max_new_tokens": 1000}, timeout=1.0)
    _wait(lambda: engine.finished == ["cancelled"], what="the generation to be cancelled")


def test_client_leaving_while_queued_never_reaches_the_model(paced_server):
    server, app, engine = paced_server
    engine.gate.clear()
    with httpx.Client(base_url=server.url, timeout=30) as c, ThreadPoolExecutor(1) as pool:
        first = pool.submit(c.post, "/v1/ask", json={"question": QUESTION, "max_new_tokens": 2})
        _wait(engine.started.is_set, what="the first generation to start")
        with pytest.raises(httpx.ReadTimeout):  # queued behind the first, then gives up
            c.post("/v1/ask", json={"question": QUESTION, "max_new_tokens": 2, "stream": True}, timeout=0.75)
        _wait(lambda: app.state.scheduler.depth == 1, what="the second request to be queued")
        time.sleep(POLL_WAIT_S)  # the server notices the disconnect while the request waits
        engine.gate.set()
        assert first.result().status_code == 200
        _wait(lambda: 'copilot_generations_total{finish_reason="cancelled"} 1.0' in c.get("/metrics").text,
              what="the queued job to be dropped")
    assert engine.finished == ["length"]  # only the first request ran the engine


def test_metrics_after_traffic(paced_server):
    server, app, engine = paced_server
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert c.post("/v1/ask", json={"question": QUESTION, "max_new_tokens": 4}).status_code == 200
        with c.stream("POST", "/v1/ask", json={"question": QUESTION, "max_new_tokens": 4, "stream": True}) as r:
            list(r.iter_lines())
        assert c.get("/v1/documents?limit=1").status_code == 200
        assert c.get("/nope").status_code == 404
        r = c.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    for needle in ('copilot_http_requests_total{method="POST",route="/v1/ask",status="200"} 2.0',
                   'copilot_http_requests_total{method="GET",route="/v1/documents",status="200"} 1.0',
                   'copilot_http_requests_total{method="GET",route="unmatched",status="404"} 1.0',
                   'copilot_http_request_duration_seconds_count{method="POST",route="/v1/ask"} 2.0',
                   'copilot_ttft_seconds_count{endpoint="ask"} 2.0',
                   "copilot_generated_tokens_total 8.0",
                   'copilot_generations_total{finish_reason="length"} 2.0',
                   'copilot_speculation_tau_count{drafter="ngram"} 2.0',
                   'copilot_speculation_alpha_count{drafter="ngram"} 2.0',
                   'copilot_speculation_tau_count{drafter="all"} 2.0',
                   'copilot_draft_tokens_accepted_total{drafter="ngram"} 12.0',
                   "copilot_queue_depth 0.0"):
        assert needle in text, needle


def test_engine_failure_is_a_500_with_a_reason(make_app, embedded_target, sse_events):
    class Broken(PacedEngine):
        def stream(self, *a, **k):
            raise RuntimeError("boom")
            yield  # pragma: no cover

    app, _ = make_app(Broken(embedded_target))
    with TestClient(app) as c:
        r = c.post("/v1/ask", json={"question": QUESTION})
        assert r.status_code == 500 and "boom" in r.json()["detail"]
        with c.stream("POST", "/v1/ask", json={"question": QUESTION, "stream": True}) as r:
            events = list(sse_events(r.iter_lines()))
        assert events[-1][0] == "error" and "boom" in events[-1][1]["detail"]
        assert c.post("/v1/ask", json={"question": QUESTION}).status_code == 500  # the scheduler survives


def test_a_multi_prompt_completion_refused_by_a_full_queue_leaves_nothing_queued(make_app, embedded_target):
    """Its prompts already queued are cancelled with it: the queue is free for the next client."""
    engine = PacedEngine(embedded_target, step_s=0.3)
    app, _ = make_app(engine, queue_size=1, max_batch=2)
    payload = {"question": QUESTION, "max_new_tokens": 12}  # two answers hold both batch slots for seconds
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as c, \
            ThreadPoolExecutor(2) as pool:
        running = [pool.submit(c.post, "/v1/ask", json=payload) for _ in range(2)]
        _wait(lambda: app.state.scheduler.batch_size == 2, what="two answers in the batch")
        r = c.post("/v1/completions", json={"model": "opscopilot", "prompt": ["a", "b"], "max_tokens": 2})
        assert r.status_code == 503 and r.json()["error"]["code"] == "server_overloaded", r.text
        assert all(f.result().status_code == 200 for f in running)
        _wait(lambda: app.state.scheduler.depth == 0 and app.state.scheduler.batch_size == 0,
              what="the queue and the batch to empty")
        assert len(engine.finished) == 2  # the queued prompt "a" never ran
        r = c.post("/v1/completions", json={"model": "opscopilot", "prompt": ["a", "b"], "max_tokens": 2})
        assert r.status_code == 200 and len(r.json()["choices"]) == 2
