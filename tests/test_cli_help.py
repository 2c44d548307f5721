"""``copilot --help`` (issue #22): no heavy import, the usual metavars, the serve flags documented."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from copilot.cli.main import app

runner = CliRunner()

HEAVY = ("torch", "transformers", "chromadb", "sentence_transformers")
HELPS = (["--help"], ["ask", "--help"], ["search", "--help"], ["serve", "--help"], ["ingest", "--help"],
         ["documents", "list", "--help"], ["config", "--help"], ["models", "--help"], ["eval", "--help"],
         ["eval", "latency", "--help"])


def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_help_imports_no_torch_transformers_chromadb_or_sentence_transformers(tmp_path):
    """A fresh interpreter imports the CLI and renders every help page: none of the heavy
    packages is imported (they take the 25 s ``copilot --help`` used to)."""
    script = f"""
import json, sys
from typer.testing import CliRunner
from copilot.cli.main import app
codes = [CliRunner().invoke(app, args).exit_code for args in {list(map(list, HELPS))!r}]
print(json.dumps({{"codes": codes, "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COPILOT_")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**env, "HF_HUB_OFFLINE": "1"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["codes"] == [0] * len(HELPS)
    assert out["heavy"] == []


@pytest.mark.parametrize("args", HELPS, ids=" ".join)
def test_help_shows_the_usual_metavars(args):
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.stdout and "<list[" not in result.stdout, result.stdout
    assert "<int" not in result.stdout and "<str>" not in result.stdout and "<path>" not in result.stdout


def test_help_metavars_flags_paths_and_numbers():
    ingest = _flat(runner.invoke(app, ["ingest", "--help"], env={"COLUMNS": "200"}).stdout)
    assert "paths... PATH... files or folders to ingest" in ingest
    assert "--prune --no-prune delete documents" in ingest  # a flag: no value shown
    assert "--report PATH write the per-file report" in ingest
    assert "--help Show this message" in ingest
    ask = _flat(runner.invoke(app, ["ask", "--help"], env={"COLUMNS": "200"}).stdout)
    assert "question TEXT the question" in ask
    assert "--max-new-tokens INTEGER [x>=0] answer budget" in ask
    assert "--doc-type TEXT only these document types (repeat)" in ask  # one value per use
    assert "--json print the answer" in ask and "--stats print decoding statistics" in ask
    listing = _flat(runner.invoke(app, ["documents", "list", "--help"], env={"COLUMNS": "200"}).stdout)
    assert "--limit INTEGER [1<=x<=1000]" in listing


def test_serve_help_documents_the_vllm_style_flags():
    text = _flat(runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).stdout)
    for flag in ("--host TEXT", "--port INTEGER", "--api-key KEY", "--served-model-name NAME",
                 "--allowed-origins ORIGINS", "--root-path PATH", "--ingest-if-empty PATH"):
        assert flag in text, flag
    assert "COPILOT_API_KEYS" in text and "COPILOT_MODEL_ALIAS" in text and "COPILOT_CORS_ORIGINS" in text
