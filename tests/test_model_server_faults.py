"""A broken external model server (``COPILOT_TARGET_URL``) is the upstream's failure, not ours (issue 46).

A real HTTP server on 127.0.0.1 plays the model server and misbehaves on demand: an error status, a 429
with ``Retry-After``, an HTML page or a plain JSON body where a stream was asked for, a stream cut
mid-answer, an error event mid-stream, a flood that ignores ``max_tokens``, a stall. OpsCopilot runs under
a real uvicorn over the sample corpus (model-free ``HashEmbedder``) and is asked through ``/v1/ask`` and
the ``openai`` SDK: 502 naming the server, 503 with the server's ``Retry-After`` for its 429, never 500;
an answer cut at its budget; no request held past the bound.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import openai
import pytest

from copilot.api.app import create_app
from copilot.api.server import ServerThread
from copilot.config import Settings
from copilot.service import CopilotService
from copilot.serving.remote_target import RemoteEngine

QUESTION = "How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?"
#: The bound on one upstream request in these tests (s): a stall must end well within it.
TIMEOUT_S = 3.0


def _chunk(text: str, finish: str | None = None) -> bytes:
    body = {"id": "c", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class Upstream(BaseHTTPRequestHandler):
    """The model server: ``server.mode`` says how it answers ``POST /v1/completions``."""

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.server.mode == "down":  # type: ignore[attr-defined]
            self.send_error(503)
            return
        self._send(200, "application/json", json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}))

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length", 0)))
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode in ("500", "400"):
            self._send(int(mode), "application/json", json.dumps({"error": {"message": f"upstream {mode}"}}))
        elif mode == "429":
            self._send(429, "application/json", json.dumps({"error": {"message": "busy"}}), {"Retry-After": "7"})
        elif mode == "html":
            self._send(200, "text/html", "<html><body>502 Bad Gateway (proxy)</body></html>")
        elif mode == "plain":
            self._send(200, "application/json", json.dumps({"choices": [{"text": "hi", "finish_reason": "stop"}]}))
        else:
            self._stream(mode)

    def _send(self, status: int, kind: str, body: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body.encode())))
        self.end_headers()
        self.wfile.write(body.encode())

    def _stream(self, mode: str) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        try:
            self.wfile.write(_chunk("Restarted"))
            if mode == "ok":
                self.wfile.write(_chunk(" the door.", "stop") + b"data: [DONE]\n\n")
            elif mode == "error_event":
                self.wfile.write(b'data: {"error": {"message": "model crashed"}}\n\n')
            elif mode == "flood":  # ignores max_tokens; stops by itself, or when the client hangs up
                for _ in range(100_000):
                    self.wfile.write(_chunk(" more"))
            elif mode == "stall":  # nothing more for longer than the bound, then ends
                time.sleep(TIMEOUT_S * 3)
            elif mode == "trickle":  # endless: a token every 0.2 s until the client hangs up (10 min at most)
                for _ in range(3000):
                    self.wfile.write(_chunk(" and"))
                    self.wfile.flush()
                    time.sleep(0.2)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture(scope="module")
def upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    server.mode = "ok"  # type: ignore[attr-defined]
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def front(upstream, light_store, embedded_target, tmp_path_factory):
    """OpsCopilot under uvicorn, its target the upstream."""
    url = f"http://127.0.0.1:{upstream.server_address[1]}/v1"
    settings = Settings(data_dir=tmp_path_factory.mktemp("front"), target_url=url, max_new_tokens=24,
                        min_support=0.0, _env_file=None)
    engine = RemoteEngine(url, embedded_target.tokenizer, timeout_s=TIMEOUT_S)
    with ServerThread(create_app(settings, CopilotService(settings, light_store, engine))) as srv:
        yield srv


def _ask(front, **body) -> httpx.Response:
    return httpx.post(front.url + "/v1/ask", json={"question": QUESTION, **body}, timeout=60)


def test_a_healthy_upstream_answers(upstream, front):
    upstream.mode = "ok"
    r = _ask(front)
    assert r.status_code == 200 and r.json()["answer"].startswith("Restarted the door.")


@pytest.mark.parametrize("mode,words", [
    ("500", "answered 500"), ("400", "answered 400"), ("html", "without a finish_reason"),
    ("plain", "without a finish_reason"), ("cut", "without a finish_reason"), ("error_event", "model crashed"),
])
def test_upstream_failures_are_502s_naming_the_server(upstream, front, mode, words):
    upstream.mode = mode
    r = _ask(front)
    assert r.status_code == 502, r.text
    assert words in r.text and f"127.0.0.1:{upstream.server_address[1]}" in r.text
    with openai.OpenAI(base_url=front.url + "/v1", api_key="x", max_retries=0, timeout=60) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": QUESTION}])
    assert caught.value.status_code == 502


def test_an_upstream_429_is_a_503_with_its_retry_after(upstream, front):
    upstream.mode = "429"
    r = _ask(front)
    assert r.status_code == 503 and r.headers["retry-after"] == "7" and "busy (429)" in r.text


def test_a_flooding_upstream_is_cut_at_the_budget(upstream, front):
    upstream.mode = "flood"
    r = _ask(front, max_new_tokens=10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stats"]["finish_reason"] == "length" and body["answer"].count("more") <= 9


def test_a_stalled_upstream_ends_within_the_bound_and_readyz_names_a_down_one(upstream, front):
    upstream.mode = "stall"
    started = time.monotonic()
    r = _ask(front)
    assert r.status_code == 502 and "sent nothing for 3 s" in r.text
    assert time.monotonic() - started < TIMEOUT_S * 3  # no retries multiplied the wait
    upstream.mode = "down"
    ready = httpx.get(front.url + "/readyz", timeout=30)
    assert ready.status_code == 503 and "does not answer" in ready.json()["detail"]
    upstream.mode = "ok"
    assert httpx.get(front.url + "/readyz", timeout=30).status_code == 200


def test_a_client_leaving_during_a_stall_frees_its_batch_slot_at_once(upstream, front):
    upstream.mode = "stall"
    with httpx.stream("POST", front.url + "/v1/ask", json={"question": QUESTION, "stream": True}, timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("event: delta"):
                break  # the first text arrived, then the server stalls: the client leaves
    left = time.monotonic()
    busy = None
    while time.monotonic() - left < TIMEOUT_S - 1:  # before the stall's own bound would end it
        metrics = httpx.get(front.url + "/metrics", timeout=10).text
        busy = next(line for line in metrics.splitlines() if line.startswith("copilot_batch_size "))
        if busy.endswith(" 0.0"):
            break
        time.sleep(0.1)
    assert busy is not None and busy.endswith(" 0.0"), busy
    upstream.mode = "ok"



def test_sigterm_stops_the_server_while_an_endless_upstream_streams(upstream, tmp_path):
    """``copilot serve`` (a real process) holding a request on an upstream that never stops streaming
    exits on SIGTERM within uvicorn's graceful-shutdown bound, instead of only on SIGKILL."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from copilot.api.server import GRACEFUL_SHUTDOWN_S, free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COPILOT_")}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", COPILOT_DATA_DIR=str(tmp_path / "data"),
               COPILOT_TARGET_URL=f"http://127.0.0.1:{upstream.server_address[1]}/v1", COPILOT_MIN_SUPPORT="0")
    corpus = Path(__file__).resolve().parents[1] / "evals" / "data" / "corpus"
    copilot = str(Path(sys.executable).with_name("copilot"))
    proc = subprocess.Popen([copilot, "serve", "--port", str(port), "--ingest-if-empty", str(corpus)], env=env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    upstream.mode = "trickle"
    held: list[object] = []

    def ask() -> None:
        try:
            reply = httpx.post(url + "/v1/ask", json={"question": QUESTION, "stream": True}, timeout=120)
            held.append(reply.status_code)
        except httpx.HTTPError as exc:
            held.append(exc)

    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not come up"
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        asker = threading.Thread(target=ask, daemon=True)
        asker.start()
        time.sleep(3)  # the answer is streaming from the endless upstream
        assert asker.is_alive() and not held
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=GRACEFUL_SHUTDOWN_S + 50)
        assert time.monotonic() - stopped < GRACEFUL_SHUTDOWN_S + 50  # measured: 0.2 s
    finally:
        upstream.mode = "ok"
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled, after shutdown
