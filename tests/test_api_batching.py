"""Many operators at once: the batch scheduler behind a real uvicorn.

Real engine (SmolLM2-135M, the sample store): answers asked together equal the same
questions asked alone. Paced stand-in engine (test_api_operations.PacedEngine): admission
order, heartbeats while queued, a disconnect mid-batch, Retry-After from the drain rate.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from answering import ask as ask_alone
from interleaved import InterleavedBatch
from pydantic import ValidationError
from test_api_operations import QUESTION, PacedEngine, _settings, _wait

from copilot.api.app import create_app
from copilot.api.server import ServerThread
from copilot.config import Settings
from copilot.service import CopilotService
from copilot.serving.scheduler import BatchScheduler

pytestmark = pytest.mark.slow

QUESTIONS = ["How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?",
             "What was done about the full disk on the xrootd node?",
             "Why did the transfers to the tape endpoint time out?",
             "Which certificate expired and how was it renewed?"]


def test_answers_asked_together_equal_the_same_questions_asked_alone(sample_service, tmp_path_factory):
    alone = {}
    for q in QUESTIONS:
        alone[q] = ask_alone(sample_service, q, max_new_tokens=24).text
    settings = _settings(tmp_path_factory, max_new_tokens=24, max_batch=4, max_sources=None)
    service = CopilotService(settings, sample_service.store, sample_service.models.engine)
    with ServerThread(create_app(settings, service)) as server, ThreadPoolExecutor(len(QUESTIONS)) as pool:
        def ask(q: str) -> dict:
            r = httpx.post(server.url + "/v1/ask", json={"question": q, "max_new_tokens": 24}, timeout=300)
            assert r.status_code == 200, r.text
            return r.json()

        got = dict(zip(QUESTIONS, pool.map(ask, QUESTIONS)))
    for q in QUESTIONS:
        assert got[q]["answer"] == alone[q], q
    assert max(g["stats"].get("max_batch_size", 0) for g in got.values()) >= 2


@pytest.fixture()
def paced_app(sample_service, embedded_target, tmp_path_factory):
    """``(max_batch, **settings) -> (server, app, engine)`` with a paced engine behind a real uvicorn."""
    opened = []

    def make(max_batch: int = 4, step_s: float = 0.01, **overrides):
        engine = PacedEngine(embedded_target, step_s=step_s)
        settings = _settings(tmp_path_factory, max_batch=max_batch, **overrides)
        app = create_app(settings, CopilotService(settings, sample_service.store, engine))
        server = ServerThread(app).__enter__()
        opened.append((server, engine))
        return server, app, engine

    yield make
    for server, engine in opened:
        engine.gate.set()
        server.__exit__(None, None, None)


def test_a_long_answer_does_not_starve_a_short_one(paced_app):
    server, app, engine = paced_app(max_batch=2, step_s=0.02)
    finished: list[str] = []
    with ThreadPoolExecutor(2) as pool:
        def ask(name: str, n: int) -> None:
            r = httpx.post(server.url + "/v1/ask", json={"question": QUESTION, "max_new_tokens": n}, timeout=60)
            assert r.status_code == 200
            finished.append(name)

        long = pool.submit(ask, "long", 150)
        _wait(engine.started.is_set, what="the long answer to start")
        short = pool.submit(ask, "short", 3)
        short.result(timeout=30)
        assert finished == ["short"]  # it shared the rounds, it did not wait for the long one
        long.result(timeout=60)


def test_a_queued_stream_gets_heartbeats_before_its_first_event(paced_app):
    server, app, engine = paced_app(max_batch=1, heartbeat_s=0.2)
    engine.gate.clear()  # the first question holds the only batch slot
    with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=server.url, timeout=30) as c:
        first = pool.submit(c.post, "/v1/ask", json={"question": QUESTION, "max_new_tokens": 2})
        _wait(engine.started.is_set, what="the first answer to start")
        gaps, pings = [], 0
        with c.stream("POST", "/v1/ask", json={"question": QUESTION, "max_new_tokens": 2, "stream": True}) as r:
            assert r.status_code == 200
            last = time.monotonic()
            for line in r.iter_lines():
                now = time.monotonic()
                gaps.append(now - last)
                last = now
                if line.startswith(":"):
                    pings += 1
                    if pings == 3:
                        engine.gate.set()  # let both answers run
                if line.startswith("event: done"):
                    break
        assert pings >= 3 and max(gaps) < 2.0
        assert first.result().status_code == 200


def test_a_client_leaving_mid_batch_leaves_the_others_whole(paced_app, sse_events):
    server, app, engine = paced_app(max_batch=3, step_s=0.02)
    with ThreadPoolExecutor(2) as pool, httpx.Client(base_url=server.url, timeout=60) as c:
        others = [pool.submit(c.post, "/v1/ask", json={"question": QUESTION, "max_new_tokens": 40}) for _ in range(2)]
        with c.stream("POST", "/v1/ask", json={"question": QUESTION, "max_new_tokens": 1000, "stream": True}) as r:
            for event, _ in sse_events(r.iter_lines()):
                if event == "delta":
                    break  # leave after the first token
        results = [f.result(timeout=60) for f in others]
    assert all(r.status_code == 200 and r.json()["stats"]["new_tokens"] == 40 for r in results)
    _wait(lambda: "cancelled" in engine.finished, what="the left answer to be cancelled")


def test_questions_arriving_together_all_join_while_the_first_prefills(paced_app):
    """max_batch 4, queue 1: four simultaneous questions fit (free batch slots count as room); a
    sixth is refused."""
    server, app, engine = paced_app(max_batch=4, queue_size=1)
    engine.gate.clear()  # the first question holds the scheduler in its prefill
    with ThreadPoolExecutor(6) as pool, httpx.Client(base_url=server.url, timeout=30) as c:
        payload = {"question": QUESTION, "max_new_tokens": 2}
        first = pool.submit(c.post, "/v1/ask", json=payload)
        _wait(engine.started.is_set, what="the first answer to start")
        others = [pool.submit(c.post, "/v1/ask", json=payload) for _ in range(4)]
        _wait(lambda: app.state.scheduler.depth == 4, what="four more to wait")
        refused = c.post("/v1/ask", json=payload)
        assert refused.status_code == 503 and refused.headers["retry-after"]
        engine.gate.set()
        assert [f.result().status_code for f in [first, *others]] == [200] * 5


@pytest.mark.parametrize("value", [0, -1])
def test_max_batch_below_one_is_a_settings_error(value, tmp_path):
    with pytest.raises(ValidationError, match="max_batch"):
        Settings(data_dir=tmp_path, max_batch=value, _env_file=None)


def test_the_scheduler_refuses_a_batch_size_below_one():
    with pytest.raises(ValueError, match="max_batch"):
        BatchScheduler(lambda: InterleavedBatch(None), max_batch=0)


def test_a_hundred_requests_at_once_get_answers_or_503s_never_5xx(paced_app):
    server, app, engine = paced_app(max_batch=8, step_s=0.002, queue_size=8)
    with ThreadPoolExecutor(100) as pool:
        statuses = list(pool.map(lambda _: httpx.post(server.url + "/v1/ask", timeout=120,
                                                      json={"question": QUESTION, "max_new_tokens": 4}).status_code,
                                 range(100)))
    assert set(statuses) <= {200, 503} and statuses.count(200) >= 8
    assert threading.active_count() < 200


def test_the_openai_sdk_gets_in_on_its_own_retry_after_a_503(paced_app):
    """An unmodified openai client refused with 503 waits the Retry-After and resends the same
    request, which takes the place reserved for it while the queue stays full."""
    server, app, engine = paced_app(max_batch=1, step_s=0.05, queue_size=1, retry_after_s=1)
    body = {"question": QUESTION, "max_new_tokens": 30}
    with ThreadPoolExecutor(2) as pool:
        busy = [pool.submit(httpx.post, server.url + "/v1/ask", json=body, timeout=60) for _ in range(2)]
        _wait(lambda: app.state.scheduler.depth == 1)  # one decodes, one waits: the queue is full
        with openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=2, timeout=60) as client:
            raw = client.chat.completions.with_raw_response.create(
                model="opscopilot", max_tokens=4,
                messages=[{"role": "user", "content": QUESTION}])
        assert [f.result().status_code for f in busy] == [200, 200]
    assert raw.retries_taken == 1 and raw.parse().choices[0].message.content
    assert app.state.scheduler.reservations.used == 1
