"""The latency eval's anchors (transformers assisted generation with our draft model, prompt
lookup) and the share of the tokens each drafter produced, per mode, on tiny models."""

from __future__ import annotations

import pytest

from decoding import SpeculativeEngine
from decoding.core import EngineConfig
from decoding.planning.policy import CostModel
from evals.harness import Case
from evals.latency import NO_DRAFT_REASON, anchor_produced, run_hf, run_latency
from evals.questions import Question
from evals.report import latency_markdown

COSTS = CostModel(verify_ms=(10.0, 10.5, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0), draft_step_ms=1.0)


@pytest.fixture
def cases(tiny_models, torch_one_thread):
    target = tiny_models.load("small")
    ids = target.tokenizer("the disk is full; restart xrootd now. the disk is", add_special_tokens=False)["input_ids"]
    return target, [Case(Question("t0", "q", "", ""), ids, [ids[: len(ids) // 2]])]


def test_anchor_token_shares():
    assert anchor_produced("hf_greedy", 10, 9) == {"target": 10}
    assert anchor_produced("hf_pld_5", 10, 3) == {"target": 4, "prompt_lookup": 6}
    assert anchor_produced("hf_assisted", 10, 9) == {"target": 10}
    assert anchor_produced("hf_assisted", 3, 0) == {"target": 1, "assistant": 2}
    assert anchor_produced("hf_greedy", 0, 0) == {}


def test_assisted_generation_uses_our_draft_model_and_reports_shares(tiny_models, cases):
    """hf_assisted: a copy of the target as the assistant is a perfect draft, so greedy's ids come out in
    fewer passes, some of them the assistant's; the report shows every mode's shares."""
    from decoding.backends.models import load_model

    target, cs = cases
    # A copy of the target in its own module, so that its forward passes are not counted as the target's.
    twin = load_model(str(tiny_models.path("small")), device="cpu", dtype="float32")
    engine = SpeculativeEngine(target, twin, config=EngineConfig(draft_min_confidence=0.0), costs=COSTS)
    greedy = run_hf(engine, "hf_greedy", cs[0], 24)
    assisted = run_hf(engine, "hf_assisted", cs[0], 24)
    assert assisted.tokens == greedy.tokens and assisted.passes < greedy.passes
    assert assisted.produced["assistant"] > 0 and sum(assisted.produced.values()) == len(assisted.tokens)
    report = run_latency(engine, cs, max_new_tokens=12)
    assert "hf_assisted" in report["modes"] and report["skipped"] == {}
    assert report["exact_vs_greedy"]["hf_assisted"] == 1
    share = report["token_share"]
    assert share["hf_greedy"] == {"target": 1.0}
    assert set(share["ours_draft_model"]) <= {"target", "draft_model"} and "draft_model" in share["ours_draft_model"]
    assert all(sum(s.values()) == pytest.approx(1.0, abs=0.01) for s in share.values())
    report.update(hardware={"device": "cpu"}, max_new_tokens=12, repeats=1)
    md = latency_markdown(report, plots=False)
    assert "Who produced the tokens users get" in md and "| mode | target |" in md
    assert "| hf_assisted |" in md and "assistant" in md and "draft_model" in md


def test_without_a_draft_model_the_draft_modes_are_skipped_with_the_reason(tiny_models, cases):
    target, cs = cases
    engine = SpeculativeEngine(target, costs=COSTS)
    report = run_latency(engine, cs, max_new_tokens=4)
    assert "hf_assisted" not in report["modes"]
    assert report["skipped"] == {"hf_assisted": NO_DRAFT_REASON, "ours_draft_model": NO_DRAFT_REASON}
    report.update(hardware={"device": "cpu"}, max_new_tokens=4, repeats=1)
    md = latency_markdown(report, plots=False)
    assert f"| hf_assisted | skipped: {NO_DRAFT_REASON} |" in md


def test_kernel_matched_prompt_lookup_is_opt_in_and_reported_apart(tiny_models, cases, monkeypatch):
    """hf_pld_5_fk runs transformers' prompt lookup inside few_token_passes (same ids as
    greedy); the goal line compares with transformers' own lookup, a second line with _fk."""
    import evals.latency as latency

    target, cs = cases
    engine = SpeculativeEngine(target, costs=COSTS)
    entered = []
    real = latency.few_token_passes
    monkeypatch.setattr(latency, "few_token_passes", lambda: entered.append(1) or real())
    report = run_latency(engine, cs, max_new_tokens=8, modes=["hf_pld_5", "hf_pld_5_fk", "ours_auto"])
    assert entered and report["exact_vs_greedy"]["hf_pld_5_fk"] == 1
    assert sum(report["token_share"]["hf_pld_5_fk"].values()) == pytest.approx(1.0, abs=0.01)
    report.update(hardware={"device": "cpu"}, max_new_tokens=8, repeats=1)
    md = latency_markdown(report, plots=False)
    assert "vs the best prompt lookup (hf_pld_5," in md
    assert "Against the best prompt lookup with our verification kernels (hf_pld_5_fk," in md
