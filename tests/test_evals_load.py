"""`copilot eval load` end to end against a real uvicorn (paced stand-in engine: fast, deterministic)."""

from __future__ import annotations

import asyncio

import pytest
from test_api_operations import PacedEngine, _settings

from copilot.api.app import create_app
from copilot.api.server import ServerThread
from copilot.service import CopilotService
from evals.load import LoadArgs, load_markdown, load_plot, run_load

pytestmark = pytest.mark.slow


def test_the_load_eval_reports_every_cell_the_goals_and_the_overload(sample_service, embedded_target,
                                                                     tmp_path_factory, tmp_path):
    engine = PacedEngine(embedded_target, step_s=0.005)
    settings = _settings(tmp_path_factory, max_batch=2, queue_size=1, retry_after_s=1)
    app = create_app(settings, CopilotService(settings, sample_service.store, engine))
    args = LoadArgs(levels=(1, 2), modes=("adaptive", "off"), questions=2, max_new_tokens=6, overload_clients=4,
                    overload_s=2.0, burst=6, admitted=1, admitted_tokens=20, newcomers=1, newcomer_every_s=0.1,
                    request_timeout=60)
    questions = ["How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?",
                 "What was done about the full disk on the xrootd node?"]
    with ServerThread(app) as server:
        report = asyncio.run(run_load(server.url, questions, args))
    assert set(report["cells"]) == {"1", "2"} and set(report["cells"]["2"]) == {"adaptive", "off"}
    cell = report["cells"]["2"]["adaptive"]
    assert cell["answers"] == 2 and cell["tokens_per_s"] > 0 and cell["identical_to_solo"] == "2/2"
    assert report["goals"]["identical_to_solo"] == "8/8"
    arriving = report["newcomers"]
    assert arriving["statuses"] == [200] and arriving["gaps"] >= 10 and arriving["itl_ms_p95"] >= arriving["itl_ms_p50"]
    over = report["overload"]
    assert over["http_5xx_other"] == 0 and over["http_503_without_retry_after"] == 0 and over["ok"] > 0
    assert report["goals"]["overload_first_retry_admitted"] == over["first_retries_admitted_share"]
    assert sum(report["burst"]["statuses"].values()) == 6 and set(report["burst"]["statuses"]) <= {"200", "503"}
    md = load_markdown(report)
    assert "## Goals" in md and "newcomers arrive" in md and "| 2 | " in md and "identical to solo" in md
    assert load_plot(report, tmp_path / "load.png").stat().st_size > 0
