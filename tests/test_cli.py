"""The ``copilot`` command line through typer's CliRunner: config, documents, ask, serve."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from copilot.cli.main import app
from ingestion.documents import Document

runner = CliRunner()


# no COPILOT_* variable or .env file from the developer's shell leaks in (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("clean_copilot_env")


def _config(env=None) -> dict:
    result = runner.invoke(app, ["config"], env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_config_prints_effective_settings_with_secrets_masked():
    out = _config({"COPILOT_API_KEYS": "sekrit-one, sekrit-two", "COPILOT_MAX_SOURCES": "7",
                   "COPILOT_CHROMA_URL": "http://ops:chromapw@chroma.example:8000"})
    assert out["api_keys"] == ["***", "***"] and out["max_sources"] == 7
    assert out["chroma_url"] == "http://ops:***@chroma.example:8000"
    text = json.dumps(out)
    assert "sekrit" not in text and "chromapw" not in text
    assert out["max_body_bytes"] > 0 and "ingest_root" in out and "require_key_for_ask" in out


def test_config_file_toml_and_yaml_with_env_precedence(tmp_path):
    toml = tmp_path / "copilot.toml"
    toml.write_text('max_sources = 3\nmax_new_tokens = 99\napi_keys = ["from-file"]\nrequire_key_for_ask = true\n')
    out = _config({"COPILOT_CONFIG_FILE": str(toml)})
    assert (out["max_sources"], out["max_new_tokens"], out["require_key_for_ask"]) == (3, 99, True)
    assert out["api_keys"] == ["***"]
    out = _config({"COPILOT_CONFIG_FILE": str(toml), "COPILOT_MAX_SOURCES": "11"})  # environment wins
    assert (out["max_sources"], out["max_new_tokens"]) == (11, 99)
    yaml = tmp_path / "copilot.yaml"
    yaml.write_text("queue_size: 2\nmax_upload_bytes: 4096\n")
    out = _config({"COPILOT_CONFIG_FILE": str(yaml)})
    assert (out["queue_size"], out["max_upload_bytes"]) == (2, 4096)


def test_bad_configuration_exits_2_with_the_reason(tmp_path):
    result = runner.invoke(app, ["config"], env={"COPILOT_CONFIG_FILE": str(tmp_path / "missing.toml")})
    assert result.exit_code == 2 and "does not exist" in result.output
    result = runner.invoke(app, ["config"], env={"COPILOT_MAX_SOURCES": "zero"})
    assert result.exit_code == 2 and "max_sources" in result.output
    result = runner.invoke(app, ["config"], env={"COPILOT_ANSWER_HISTORY": "-1"})
    assert result.exit_code == 2 and "answer_history" in result.output


@pytest.mark.parametrize("command", ["latency", "policy", "answers", "retrieval", "cases"])
def test_an_eval_with_a_bad_questions_file_exits_2_with_the_reason(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)  # short relative paths: the error box does not fold them
    extra = ["--out", "cases.json"] if command == "cases" else []
    def said(result):  # the error box's text on one line
        return re.sub(r"[│╭╮╰╯─\s]+", " ", result.output)

    result = runner.invoke(app, ["eval", command, "--questions", "missing.jsonl", *extra])
    assert result.exit_code == 2 and "does not exist" in said(result)
    (tmp_path / "bad.jsonl").write_text('{"id": "q1", "question": "what broke?"}\n{"id": "q2"}\n')
    result = runner.invoke(app, ["eval", command, "--questions", "bad.jsonl", "--corpus", ".", *extra])
    assert result.exit_code == 2 and "bad.jsonl:2: not a question record" in said(result)


@pytest.mark.slow
def test_documents_list_and_delete(tmp_path, monkeypatch, embedder):
    import ingestion.embedding
    from ingestion.stores.chunk_store import ChunkStore

    monkeypatch.setattr(ingestion.embedding, "Embedder", lambda *a, **k: embedder)
    store = ChunkStore(tmp_path / "data", embedder=embedder)
    docs = [Document(f"shift/notes.log#{i}", f"entry {i}: restarted xrootd on host{i}",
                     {"source": "shift/notes.log", "doc_type": "text", "key": str(i), "title": f"note {i}"})
            for i in range(3)]
    store.upsert_documents(docs)
    result = runner.invoke(app, ["documents", "list", "--limit", "2"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("shift/notes.log#0\ttext\t1\tnote 0")
    assert len(result.stdout.splitlines()) == 2 and "2 of 3 documents" in result.stderr
    result = runner.invoke(app, ["documents", "delete", "shift/notes.log#1"])
    assert result.exit_code == 0 and "deleted shift/notes.log#1" in result.stdout
    assert store.manifest.count() == 2
    result = runner.invoke(app, ["documents", "delete", "shift/notes.log#1"])
    assert result.exit_code == 1 and "no document" in result.stderr


@pytest.mark.slow
def test_ask_streams_and_lists_sources(monkeypatch, sample_service):
    from copilot.service import CopilotService

    monkeypatch.setattr(CopilotService, "from_settings", classmethod(lambda cls, settings, **kw: sample_service))
    result = runner.invoke(app, ["ask", "What was the resolution of OPS-107?", "--max-new-tokens", "4",
                                 "--max-sources", "2", "--stats"])
    assert result.exit_code == 0, result.output
    assert "[1] tickets/jira_export.json#OPS-107" in result.stdout
    assert '"new_tokens"' in result.stdout
    result = runner.invoke(app, ["ask", "disk failure", "--max-new-tokens", "0", "--doc-type", "elog",
                                 "--since", "2026-01-20"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.startswith("[")]
    assert lines and all(".elog#" in line for line in lines)
    result = runner.invoke(app, ["ask", "x", "--since", "not a date"])
    assert result.exit_code == 2 and "invalid filter" in result.output
    result = runner.invoke(app, ["ask", "x", "--max-new-tokens", "999999"])
    assert result.exit_code == 2 and "cap" in result.output


def test_serve_passes_host_and_port(monkeypatch):
    import copilot.api.server

    seen = {}

    def bound_then_stopped(app_, sock, **kw) -> int:  # the command binds the socket before serving on it
        seen.update(app=app_, host=sock.getsockname()[0], port=sock.getsockname()[1])
        sock.close()
        return 0

    monkeypatch.setattr(copilot.api.server, "serve", bound_then_stopped)
    port = copilot.api.server.free_port()
    result = runner.invoke(app, ["serve", "--host", "127.0.0.1", "--port", str(port)])
    assert result.exit_code == 0, result.output
    assert (seen["host"], seen["port"]) == ("127.0.0.1", port)
    assert f"http://127.0.0.1:{port}" in result.stdout and "curl" in result.stdout
    assert set(seen["app"].openapi()["paths"]) >= {"/v1/ask", "/v1/chat/completions", "/v1/models", "/v1/ingest",
                                                    "/v1/documents", "/metrics", "/healthz", "/readyz"}


def test_eval_commands_are_reachable():
    result = runner.invoke(app, ["eval", "--help"])
    assert result.exit_code == 0
    assert all(name in result.stdout for name in ("exactness", "latency", "retrieval"))
    result = runner.invoke(app, ["eval", "latency", "--modes", "hf_greedy,ours_fast"])
    assert result.exit_code == 2 and "unknown modes" in result.output  # refused before any model loads
    result = runner.invoke(app, ["eval", "latency", "--modes", " , "])
    assert result.exit_code == 2 and "no modes" in result.output
    result = runner.invoke(app, ["eval", "latency", "--modes", "hf_greedy,hf_assisted"],
                           env={"COPILOT_DRAFT_MODEL": ""})
    assert result.exit_code == 2 and "need a draft model" in result.output
    result = runner.invoke(app, ["eval", "latency", "--modes", "hf_assisted", "--draft-model", ""],
                           env={"COPILOT_DRAFT_MODEL": "some/draft"})  # an explicit "" means none
    assert result.exit_code == 2 and "need a draft model" in result.output
    result = runner.invoke(app, ["eval", "exactness", "--max-new-tokens", "0"])
    assert result.exit_code == 2
    for command in ("latency", "exactness"):  # --subset N: at least one question
        result = runner.invoke(app, ["eval", command, "--subset", "0"])
        assert result.exit_code == 2 and "--subset" in result.output
    result = runner.invoke(app, ["eval", "latency", "--modes", "hf_pld_7_fk"])  # the kernel-matched anchors are named
    assert result.exit_code == 2 and "unknown modes" in result.output and "hf_pld_10_fk" in result.output


@pytest.mark.slow
def test_ingest_command_reports_and_is_idempotent(tmp_path, monkeypatch, embedder):
    import os
    import shutil

    import ingestion.embedding

    monkeypatch.setattr(ingestion.embedding, "Embedder", lambda *a, **k: embedder)
    corpus = tmp_path / "corpus"
    shutil.copytree(os.path.join(os.path.dirname(__file__), os.pardir, "evals", "data", "corpus", "tickets"), corpus)
    report = tmp_path / "report.json"
    result = runner.invoke(app, ["ingest", str(corpus), "--report", str(report)])
    assert result.exit_code == 0, result.output
    assert json.loads(report.read_text())["counts"]["indexed"] == 2
    result = runner.invoke(app, ["ingest", str(corpus)])
    assert result.exit_code == 0 and json.loads(result.stdout)["unchanged"] == 2
    result = runner.invoke(app, ["ingest", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no such file" in result.output


# -- issue #14: one ingest command, its exit codes, special files, a held lock ----------------------
def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_help_documents_the_ingest_exit_codes():
    for args in (["--help"], ["ingest", "--help"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        text = _flat(result.stdout)
        for code in ("0 every file indexed, unchanged or skipped", "1 some files or records failed",
                     "2 bad usage or configuration", "3 another ingest holds the store's lock",
                     "4 the store is unusable or failed mid-run"):
            assert code in text, (args, code)


def _subprocess_env(**extra: str) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("COPILOT_")}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO_ROOT), **extra)
    return env


REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
COPILOT = [str(__import__("pathlib").Path(__import__("sys").executable).parent / "copilot")]
PYTHON_M_INGESTION = [__import__("sys").executable, "-m", "ingestion"]


@pytest.mark.slow
def test_second_concurrent_ingest_says_who_holds_the_lock_in_one_line(tmp_path):
    """Both entry points (one code path, the same settings: env or config file) refuse with exit 3,
    one line naming the holder's pid and host, no traceback, and still write the report."""
    import os
    import socket
    import subprocess

    from ingestion.embedding import Embedder
    from ingestion.stores.chunk_store import ChunkStore

    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "ops.log").write_text("2026-01-20 06:04 [OPS] restarted xrootd on dc-door-02\n")
    data = tmp_path / "data"
    config = tmp_path / "copilot.toml"
    config.write_text(f'data_dir = "{data}"\n')
    store = ChunkStore(data, embedder=Embedder())  # the model is never loaded: nothing is embedded
    runs = [(COPILOT + ["ingest", str(folder), "--report", str(tmp_path / "r1.json")],
             _subprocess_env(COPILOT_DATA_DIR=str(data)), tmp_path / "r1.json"),
            (PYTHON_M_INGESTION + [str(folder), "--report", str(tmp_path / "r2.json")],
             _subprocess_env(COPILOT_CONFIG_FILE=str(config)), tmp_path / "r2.json")]
    with store.ingest_lock():  # the first ingest: this process holds the store's lock
        for cmd, env, report in runs:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
            assert proc.returncode == 3, (cmd, proc.stdout, proc.stderr[-2000:])
            assert "Traceback" not in proc.stderr and "StoreLockedError" not in proc.stderr
            lines = [line for line in proc.stderr.splitlines() if "another ingest" in line]
            assert len(lines) == 1, proc.stderr[-2000:]
            assert f"pid {os.getpid()} on host {socket.gethostname()}" in lines[0] and str(data) in lines[0]
            assert proc.stdout.strip() == ""
            written = json.loads(report.read_text())
            assert "another ingest is running" in written["error"] and written["files"] == []
    assert store.manifest.count() == 0
    store.close()


@pytest.mark.slow
def test_cli_ingest_of_a_folder_with_a_named_pipe_finishes_and_skips_it(tmp_path):
    import os
    import subprocess

    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "ops.log").write_text("2026-01-20 06:04 [OPS] restarted xrootd on dc-door-02\n")
    os.mkfifo(folder / "pipe.log")
    report = tmp_path / "report.json"
    proc = subprocess.run(COPILOT + ["ingest", str(folder), "--report", str(report)], capture_output=True,
                          text=True, timeout=300, env=_subprocess_env(COPILOT_DATA_DIR=str(tmp_path / "data")),
                          cwd=tmp_path)  # a hang would be a TimeoutExpired failure, never a stuck suite
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["skipped"] == 1
    files = {f["source"]: f for f in json.loads(report.read_text())["files"]}
    assert files["ops.log"]["status"] == "indexed"
    assert (files["pipe.log"]["status"], files["pipe.log"]["reason"]) == (
        "skipped", "a named pipe (FIFO), not a regular file: never opened")


def test_models_list_and_bad_model_names(tmp_path):
    env = {"COPILOT_DATA_DIR": str(tmp_path), "COLUMNS": "200"}
    listed = runner.invoke(app, ["models", "list"], env=env)
    assert listed.exit_code == 0, listed.output
    for name in ("embedded:qwen2.5-coder-0.5b-instruct", "embedded:qwen2.5-coder-1.5b-instruct",
                 "embedded:smollm2-135m-instruct"):
        assert name in listed.output
    for args in (["models", "prepare", "embedded:qwen-7b"], ["models", "install", "Qwen/Qwen2.5-7B-Instruct"]):
        bad = runner.invoke(app, args, env=env)
        assert bad.exit_code == 2 and "embedded:qwen2.5-coder-0.5b-instruct" in bad.output, bad.output
