"""``copilot ask``, ``search`` and ``documents list`` (issue #22): ``--json`` prints the body the API
returns for the same request; ``copilot ask`` exits 0 once it has answered (it aborted with
"terminate called without an active exception", exit 134)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from copilot.cli.main import app

runner = CliRunner()
REPO_ROOT = Path(__file__).resolve().parents[1]
TICKETS = REPO_ROOT / "evals" / "data" / "corpus" / "tickets"
COPILOT = str(Path(sys.executable).with_name("copilot"))


# no COPILOT_* variable or .env file from the developer's shell leaks in (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("clean_copilot_env")


@pytest.fixture
def ticket_store(tmp_path, monkeypatch):
    """The sample tickets ingested into COPILOT_DATA_DIR with the model-free HashEmbedder, which
    the commands' stores use too."""
    sys.path.insert(0, str(REPO_ROOT / "tests" / "fixtures" / "ingestion"))
    from ingestion_helpers import HashEmbedder

    import ingestion.embedding
    from ingestion.pipeline import ingest_paths
    from ingestion.stores.chunk_store import ChunkStore

    embedder = HashEmbedder()
    monkeypatch.setattr(ingestion.embedding, "Embedder", lambda *a, **k: embedder)
    store = ChunkStore(tmp_path / "data", embedder=embedder)
    ingest_paths([TICKETS], store, progress=False)
    yield store
    store.close()


def test_search_json_is_the_search_response(ticket_store):
    from copilot.api.schemas.search import SearchResponse

    result = runner.invoke(app, ["search", "OPS-109 postgres standby", "--max-sources", "2", "--json"])
    assert result.exit_code == 0, result.output
    body = SearchResponse.model_validate_json(result.stdout)  # the body POST /v1/search returns
    assert [s.n for s in body.sources] == [1, 2]
    first = body.sources[0]
    assert first.doc_id == "jira_export.json#OPS-109" and first.key == "OPS-109"
    assert first.title == "Rebuild PostgreSQL standby pg-chimera-02" and first.score > 0 and first.highlights
    assert body.retrieval_ms >= 0


def test_search_text_lists_sources_and_refuses_bad_input(ticket_store):
    result = runner.invoke(app, ["search", "OPS-109", "--max-sources", "1"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("[1] jira_export.json#OPS-109  Rebuild PostgreSQL standby pg-chimera-02")
    result = runner.invoke(app, ["search", "OPS-109", "--doc-type", "elog", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["sources"] == []
    result = runner.invoke(app, ["search", "x", "--since", "not a date"])
    assert result.exit_code == 2 and "invalid filter" in result.output
    result = runner.invoke(app, ["search", "  "])
    assert result.exit_code == 2 and "empty" in result.output


def test_documents_list_json_is_the_document_page(ticket_store):
    from copilot.api.schemas.documents import DocumentPage

    result = runner.invoke(app, ["documents", "list", "--json", "--limit", "2", "--offset", "1"])
    assert result.exit_code == 0, result.output
    page = DocumentPage.model_validate_json(result.stdout)  # the body GET /v1/documents returns
    assert (page.total, page.offset, page.limit, len(page.documents)) == (ticket_store.manifest.count(), 1, 2, 2)
    assert all(d.n_chunks >= 1 and d.source in ("jira_export.json", "ggus_export.csv") for d in page.documents)
    assert page.documents[0].doc_id.startswith("ggus_export.csv#")


@pytest.mark.slow
def test_ask_json_is_the_ask_response(monkeypatch, sample_service):
    from copilot.api.schemas.ask import AskResponse
    from copilot.service import CopilotService

    monkeypatch.setattr(CopilotService, "from_settings", classmethod(lambda cls, settings, **kw: sample_service))
    result = runner.invoke(app, ["ask", "What was the resolution of OPS-107?", "--max-new-tokens", "8",
                                 "--max-sources", "2", "--json"])
    assert result.exit_code == 0, result.output
    body = AskResponse.model_validate_json(result.stdout)  # the body POST /v1/ask returns, nothing streamed
    assert "destructive" in json.loads(result.stdout)  # every field of the route's body, built the same way
    assert body.sources[0].doc_id == "tickets/jira_export.json#OPS-107" and len(body.sources) <= 2
    assert body.answer and body.stats["new_tokens"] <= 8 and "finish_reason" in body.stats
    assert body.cited == [s.n for s in body.sources if s.cited] or not body.cited


@pytest.mark.slow
def test_ask_exits_0_after_answering(tmp_path, embedder):
    """The real command in a fresh process, with ``draft_model = auto`` on the CPU (whose
    background derived:int4 build outlived the command and aborted it at exit)."""
    from ingestion.pipeline import ingest_paths
    from ingestion.stores.chunk_store import ChunkStore

    store = ChunkStore(tmp_path / "data", embedder=embedder)  # the embedding model the command loads too
    ingest_paths([TICKETS], store, progress=False)
    store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COPILOT_")}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", COPILOT_DATA_DIR=str(tmp_path / "data"),
               COPILOT_TARGET_MODEL="HuggingFaceTB/SmolLM2-135M-Instruct")
    proc = subprocess.run([COPILOT, "ask", "What was the resolution of OPS-107?", "--max-new-tokens", "8"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert "terminate called" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[1] jira_export.json#OPS-107" in proc.stdout
