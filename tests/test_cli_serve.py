"""``copilot serve`` flags with vLLM's names (issue #22): each overrides its setting, checked
against the app it launches under a real uvicorn on 127.0.0.1."""

from __future__ import annotations

import httpx
import pytest
from typer.testing import CliRunner

from copilot.cli.main import app

runner = CliRunner()


# no COPILOT_* variable or .env file from the developer's shell leaks in (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("clean_copilot_env", "restore_logging")


@pytest.fixture
def serve_once(monkeypatch, light_store):
    """``(args, check) -> CliRunner result``: runs ``copilot serve ARGS``; the app it launches
    (over :func:`light_store`, no language model) is served by a real uvicorn with the host,
    port and root path the command passes, ``check(url)`` runs against it, then it stops."""
    import copilot.api.server
    from copilot.api.server import ServerThread
    from copilot.service import CopilotService

    def from_settings(cls, settings, **kw):
        run.settings = settings
        return CopilotService(settings, light_store, None)

    monkeypatch.setattr(CopilotService, "from_settings", classmethod(from_settings))

    def run(args: list[str], check) -> object:
        def serve_briefly(app_, sock, root_path: str = "", **kw) -> int:
            host, port = sock.getsockname()[:2]
            sock.close()  # the command bound it; the server thread binds the same address again
            with ServerThread(app_, host=host, port=port, root_path=root_path) as server:
                check(server.url)
            return 0

        monkeypatch.setattr(copilot.api.server, "serve", serve_briefly)
        return runner.invoke(app, ["serve", *args])

    return run


def test_serve_flags_override_the_environment_under_uvicorn(serve_once, monkeypatch):
    from copilot.api.server import free_port

    monkeypatch.setenv("COPILOT_API_KEYS", "env-key")
    monkeypatch.setenv("COPILOT_MODEL_ALIAS", "env-alias")
    monkeypatch.setenv("COPILOT_CORS_ORIGINS", "https://env.example")
    port = free_port()
    seen: dict = {}

    def check(url: str) -> None:
        seen["no key"] = httpx.get(url + "/v1/models", timeout=30).status_code
        seen["env key"] = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer env-key"},
                                    timeout=30).status_code
        models = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer k2"}, timeout=30)
        seen["models"] = [m["id"] for m in models.json()["data"]]
        preflight = {"Origin": "https://ops.example", "Access-Control-Request-Method": "POST"}
        seen["cors"] = httpx.options(url + "/v1/ask", headers=preflight, timeout=30).headers
        seen["env cors"] = httpx.options(url + "/v1/ask", headers={**preflight, "Origin": "https://env.example"},
                                         timeout=30).headers
        seen["servers"] = httpx.get(url + "/openapi.json", timeout=30).json().get("servers")

    result = serve_once(["--host", "127.0.0.1", "--port", str(port), "--api-key", "k1", "--api-key", "k2",
                         "--served-model-name", "ops-model", "--allowed-origins", '["https://ops.example"]',
                         "--root-path", "/copilot", "--max-model-len", "1024"], check)
    assert result.exit_code == 0, result.output
    assert serve_once.settings.max_model_len == 1024
    assert f"http://127.0.0.1:{port}" in result.stdout
    assert (seen["no key"], seen["env key"]) == (401, 403)  # --api-key replaced COPILOT_API_KEYS
    assert seen["models"][0] == "ops-model" and "env-alias" not in seen["models"]
    assert seen["cors"]["access-control-allow-origin"] == "https://ops.example"
    assert "access-control-allow-origin" not in seen["env cors"]
    assert seen["servers"] == [{"url": "/copilot"}]


def test_serve_allowed_origins_comma_separated_and_settings_kept_without_flags(serve_once, monkeypatch):
    monkeypatch.setenv("COPILOT_MODEL_ALIAS", "env-alias")
    seen: dict = {}

    def check(url: str) -> None:
        seen["models"] = [m["id"] for m in httpx.get(url + "/v1/models", timeout=30).json()["data"]]
        for origin in ("https://a.example", "https://b.example"):
            headers = {"Origin": origin, "Access-Control-Request-Method": "GET"}
            seen[origin] = httpx.options(url + "/v1/models", headers=headers, timeout=30).status_code

    result = serve_once(["--port", "0", "--allowed-origins", "https://a.example, https://b.example"], check)
    assert result.exit_code == 2 and "--port" in result.output  # 0 is no port: refused before anything starts
    from copilot.api.server import free_port

    result = serve_once(["--port", str(free_port()), "--allowed-origins", "https://a.example, https://b.example"],
                        check)
    assert result.exit_code == 0, result.output
    assert seen["models"][0] == "env-alias"  # no --served-model-name: the setting stands
    assert seen["https://a.example"] == seen["https://b.example"] == 200


@pytest.mark.parametrize("args, reason", [
    (["--allowed-origins", "[not json"], "not a JSON list"),
    (["--allowed-origins", "[1, 2]"], "expected a JSON list of strings"),
    (["--api-key", " "], "an API key cannot be blank"),
    (["--port", "70000"], "--port"),
    (["--max-model-len", "100"], "--max-model-len"),
])
def test_serve_refuses_bad_flag_values_with_exit_2(args, reason):
    result = runner.invoke(app, ["serve", *args])
    assert result.exit_code == 2, result.output
    assert reason in result.output


@pytest.mark.slow
def test_serve_stopped_during_the_background_draft_build_exits_cleanly(tmp_path):
    """Ctrl-C while ``/readyz`` says "derived:int4: building" (``draft_model = auto`` on the CPU):
    the build is cancelled and joined at shutdown, so the process exits 0 instead of aborting
    with "terminate called without an active exception" (exit 134)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from copilot.api.server import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COPILOT_")}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", COPILOT_DATA_DIR=str(tmp_path / "data"),
               COPILOT_TARGET_MODEL="HuggingFaceTB/SmolLM2-135M-Instruct")
    copilot = str(Path(sys.executable).with_name("copilot"))
    proc = subprocess.Popen([copilot, "serve", "--port", str(port)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not come up"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "terminate called" not in stderr, stderr[-3000:]
    assert proc.returncode == 0, stderr[-3000:]
