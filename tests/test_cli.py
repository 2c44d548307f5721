"""The ``copilot`` command line through typer's CliRunner: config, documents, ask, serve."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from copilot.cli import app
from ingestion.documents import Document

runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No COPILOT_* variables or .env file from the developer's shell leak in."""
    import os

    for name in list(os.environ):
        if name.startswith("COPILOT_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COPILOT_DATA_DIR", str(tmp_path / "data"))


def _config(env=None) -> dict:
    result = runner.invoke(app, ["config"], env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_config_prints_effective_settings_with_secrets_masked():
    out = _config({"COPILOT_API_KEYS": "sekrit-one, sekrit-two", "COPILOT_TOP_K": "7",
                   "COPILOT_CHROMA_URL": "http://ops:chromapw@chroma.example:8000"})
    assert out["api_keys"] == ["***", "***"] and out["top_k"] == 7
    assert out["chroma_url"] == "http://ops:***@chroma.example:8000"
    text = json.dumps(out)
    assert "sekrit" not in text and "chromapw" not in text
    assert out["max_body_bytes"] > 0 and "ingest_root" in out and "require_key_for_ask" in out


def test_config_file_toml_and_yaml_with_env_precedence(tmp_path):
    toml = tmp_path / "copilot.toml"
    toml.write_text('top_k = 3\nmax_new_tokens = 99\napi_keys = ["from-file"]\nrequire_key_for_ask = true\n')
    out = _config({"COPILOT_CONFIG_FILE": str(toml)})
    assert (out["top_k"], out["max_new_tokens"], out["require_key_for_ask"]) == (3, 99, True)
    assert out["api_keys"] == ["***"]
    out = _config({"COPILOT_CONFIG_FILE": str(toml), "COPILOT_TOP_K": "11"})  # environment wins
    assert (out["top_k"], out["max_new_tokens"]) == (11, 99)
    yaml = tmp_path / "copilot.yaml"
    yaml.write_text("queue_size: 2\nmax_upload_bytes: 4096\n")
    out = _config({"COPILOT_CONFIG_FILE": str(yaml)})
    assert (out["queue_size"], out["max_upload_bytes"]) == (2, 4096)


def test_bad_configuration_exits_2_with_the_reason(tmp_path):
    result = runner.invoke(app, ["config"], env={"COPILOT_CONFIG_FILE": str(tmp_path / "missing.toml")})
    assert result.exit_code == 2 and "does not exist" in result.output
    result = runner.invoke(app, ["config"], env={"COPILOT_TOP_K": "zero"})
    assert result.exit_code == 2 and "top_k" in result.output
    result = runner.invoke(app, ["config"], env={"COPILOT_ANSWER_HISTORY": "-1"})
    assert result.exit_code == 2 and "answer_history" in result.output


@pytest.mark.slow
def test_documents_list_and_delete(tmp_path, monkeypatch, embedder):
    import ingestion.embedding
    from ingestion.store import ChunkStore

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
    assert store.count_documents() == 2
    result = runner.invoke(app, ["documents", "delete", "shift/notes.log#1"])
    assert result.exit_code == 1 and "no document" in result.stderr


@pytest.mark.slow
def test_ask_streams_and_lists_sources(monkeypatch, sample_service):
    from copilot.service import CopilotService

    monkeypatch.setattr(CopilotService, "from_settings", classmethod(lambda cls, settings: sample_service))
    result = runner.invoke(app, ["ask", "What was the resolution of OPS-107?", "--max-new-tokens", "4",
                                 "--top-k", "2", "--stats"])
    assert result.exit_code == 0, result.output
    assert "[1] tickets/jira_export.json#OPS-107" in result.stdout
    assert '"new_tokens"' in result.stdout
    result = runner.invoke(app, ["ask", "disk failure", "--max-new-tokens", "0", "--doc-type", "elog",
                                 "--since", "2026-01-20"])
    assert result.exit_code == 0, result.output
    lines = [l for l in result.stdout.splitlines() if l.startswith("[")]
    assert lines and all(".elog#" in l for l in lines)
    result = runner.invoke(app, ["ask", "x", "--since", "not a date"])
    assert result.exit_code == 2 and "invalid filter" in result.output
    result = runner.invoke(app, ["ask", "x", "--max-new-tokens", "999999"])
    assert result.exit_code == 2 and "cap" in result.output


def test_serve_passes_host_and_port(monkeypatch):
    import uvicorn

    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app_, host, port, **kw: seen.update(app=app_, host=host, port=port))
    result = runner.invoke(app, ["serve", "--host", "127.0.0.1", "--port", "8765"])
    assert result.exit_code == 0, result.output
    assert (seen["host"], seen["port"]) == ("127.0.0.1", 8765)
    assert "http://127.0.0.1:8765" in result.stdout and "curl" in result.stdout
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
    result = runner.invoke(app, ["eval", "latency", "--modes", "hf_greedy,hf_assisted"], env={"COPILOT_DRAFT_MODEL": ""})
    assert result.exit_code == 2 and "need a draft model" in result.output
    result = runner.invoke(app, ["eval", "latency", "--modes", "hf_assisted", "--draft-model", ""],
                           env={"COPILOT_DRAFT_MODEL": "some/draft"})  # an explicit "" means none
    assert result.exit_code == 2 and "need a draft model" in result.output
    result = runner.invoke(app, ["eval", "exactness", "--max-new-tokens", "0"])
    assert result.exit_code == 2


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
