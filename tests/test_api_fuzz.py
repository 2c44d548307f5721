"""No 500 from any route: schemathesis fuzzes every operation of the app's OpenAPI document
(valid and invalid requests) against a real uvicorn on 127.0.0.1.

The app runs the real embedded models over a small store of its own (two files of the
sample corpus, so uploads and deletes the fuzzer sends never touch the shared sample
store), with budgets kept tiny (answers of at most 2 tokens, prompts of at most 256) so
the generation routes answer in well under a second. Bounded: a few examples per
operation and mode, derandomized (the same requests in every run).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode

from copilot.api.app import create_app
from copilot.api.server import ServerThread
from copilot.config import Settings
from copilot.service import CopilotService

pytestmark = pytest.mark.slow

#: Examples per operation and generation mode (about 15 operations × 2 modes).
EXAMPLES = 5
SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "evals" / "data" / "corpus"
CORPUS_FILES = ("tickets/ggus_export.csv", "shiftlogs/shift-2026-01-20.log")


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory, embedded_engine, embedder):
    """A real uvicorn serving the app over its own small store, with tiny budgets."""
    from ingestion.pipeline import ingest_paths
    from ingestion.stores.chunk_store import ChunkStore


    corpus = tmp_path_factory.mktemp("fuzz-corpus")
    for rel in CORPUS_FILES:
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_CORPUS / rel, corpus / rel)
    data_dir = tmp_path_factory.mktemp("fuzz-data")
    store = ChunkStore(data_dir, embedder=embedder)
    ingest_paths([corpus], store, progress=False)
    settings = Settings(data_dir=data_dir, max_new_tokens=1, max_new_tokens_cap=2, max_prompt_tokens=256,
                        max_sources=2, max_upload_bytes=4096, max_upload_files=3, _env_file=None)
    service = CopilotService(settings, store, embedded_engine)
    with ServerThread(create_app(settings, service)) as server:
        yield server


def _operations(server: ServerThread):
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    ops = [result.ok() for result in schema.get_all_operations()]
    assert len(ops) >= 12, [op.label for op in ops]
    return ops


def _fuzz(op: schemathesis.APIOperation, base_url: str, session: requests.Session, seen: dict[str, set[int]],
          failures: list[str]) -> None:
    """Send ``op`` its valid and invalid generated cases; record each status code in ``seen``
    and each 5xx other than 503 in ``failures`` (with a curl command that reproduces it)."""
    strategy = st.one_of(op.as_strategy(GenerationMode.POSITIVE), op.as_strategy(GenerationMode.NEGATIVE))

    @settings(max_examples=2 * EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck), print_blob=False)
    @given(case=strategy)
    def run(case) -> None:
        response = case.call(base_url=base_url, session=session, timeout=60)
        seen.setdefault(op.label, set()).add(response.status_code)
        if response.status_code >= 500 and response.status_code != 503:
            failures.append(f"{op.label} -> {response.status_code}: {response.text[:300]}\n"
                            f"  reproduce: {case.as_curl_command()}")
        # every answer, errors included, names its request id
        assert response.headers.get("x-request-id"), op.label

    run()


def test_no_route_answers_500(fuzz_server):
    ops = _operations(fuzz_server)
    seen: dict[str, set[int]] = {}
    failures: list[str] = []
    with requests.Session() as session:
        for op in ops:
            _fuzz(op, fuzz_server.url, session, seen, failures)
    assert not failures, "\n".join(failures)
    assert set(seen) == {op.label for op in ops}, seen  # every operation was called
    assert fuzz_server.server.started  # still serving
    assert requests.get(fuzz_server.url + "/healthz", timeout=10).status_code == 200
