"""The eval code on tiny inputs: report shapes, plots, and a broken verifier caught."""

from __future__ import annotations

import json

import pytest
import torch

import decoding.engine
from decoding import SpeculativeEngine
from decoding.policy import CostModel
from evals.exactness import failing_divergences, run_exactness
from evals.harness import Case
from evals.latency import latency_modes, run_latency
from evals.questions import Question, load_questions, quick_subset
from evals.report import exactness_markdown, latency_markdown, latency_plots, retrieval_markdown
from evals.retrieval_eval import run_retrieval

COSTS = CostModel(verify_ms=(10.0, 10.5, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0), draft_step_ms=1.0)


@pytest.fixture
def tiny_cases(tiny_models):
    target = tiny_models.load("small")
    tok = target.tokenizer
    texts = ["the disk is full; restart xrootd now. the disk is full;", "café ✓ the ticket is fixed. café"]
    cases = []
    for i, text in enumerate(texts):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        cases.append(Case(Question(f"t{i}", text, "", ""), ids, [ids[: len(ids) // 2]]))
    return target, cases


@pytest.fixture
def tiny_engine(tiny_models, tiny_cases):
    target, _ = tiny_cases
    return SpeculativeEngine(target, tiny_models.load("small_noisy"), costs=COSTS)


def test_exactness_report_shape(tiny_engine, tiny_cases):
    _, cases = tiny_cases
    report = run_exactness(tiny_engine, cases, max_new_tokens=12)
    assert set(report) >= {"cases", "modes", "exact", "divergences"}
    assert report["modes"] == ["off", "ngram", "draft_model", "auto"]
    assert report["exact"] == {m: len(cases) for m in report["modes"]}
    assert report["divergences"] == []
    json.dumps(report)
    assert "| auto | 2/2 |" in exactness_markdown(report)


def test_broken_verifier_is_caught_as_divergence(tiny_engine, tiny_cases, monkeypatch):
    _, cases = tiny_cases

    def accept_everything(draft_tokens, target_logits):
        return draft_tokens + [int(target_logits[len(draft_tokens)].argmax())], len(draft_tokens)

    monkeypatch.setattr(decoding.engine, "verify_greedy", accept_everything)
    report = run_exactness(tiny_engine, cases, max_new_tokens=12, modes=["off", "ngram", "draft_model"])
    assert report["exact"]["off"] == len(cases)  # nothing drafted, nothing to break
    assert report["exact"]["ngram"] + report["exact"]["draft_model"] < 2 * len(cases)
    div = report["divergences"][0]
    assert div["mode"] in ("ngram", "draft_model") and div["reference_token"] != div["got_token"]
    assert div["margin"] is not None and div["margin"] >= 0
    assert failing_divergences(report, None) == report["divergences"]
    assert failing_divergences(report, allow_near_ties=float("inf")) == []


def test_latency_report_shape_and_plots(tiny_engine, tiny_cases, tmp_path):
    _, cases = tiny_cases
    report = run_latency(tiny_engine, cases, max_new_tokens=8)
    for key in ("speedup", "tau", "alpha", "tokens_per_s"):
        assert set(report[key]) == set(report["modes"])
    assert report["speedup"]["hf_greedy"] == {"median": 1.0, "min": 1.0}
    assert {"hf_pld_3", "hf_pld_5", "hf_pld_10", "hf_assisted", "ours_ngram", "ours_auto"} <= set(report["modes"])
    assert all(v == len(cases) for v in report["exact_vs_greedy"].values())
    report.update(hardware={"device": "cpu"}, max_new_tokens=8, repeats=1)
    assert "ours_auto" in latency_markdown(report) and "speedup.png" in latency_markdown(report)
    assert "speedup.png" not in latency_markdown(report, plots=False)  # printed without --report: no dead links
    paths = latency_plots(report, tmp_path)
    assert [p.name for p in paths] == ["speedup.png", "tau_hist.png", "acceptance_by_position.png",
                                       "speedup_vs_copied.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_latency_without_a_draft_model_times_the_ngram_policy_once(tiny_engine, tiny_cases):
    _, cases = tiny_cases
    engine = SpeculativeEngine(tiny_engine.target, costs=tiny_engine.costs)
    assert latency_modes(engine) == ["hf_greedy", "hf_pld_3", "hf_pld_5", "hf_pld_10", "ours_auto"]
    report = run_latency(engine, cases[:1], max_new_tokens=4)
    assert report["aliases"] == {"ours_ngram": "ours_auto"} and "policy_states" in report
    report.update(hardware={"device": "cpu"}, max_new_tokens=4, repeats=1)
    md = latency_markdown(report)
    assert "| ours_ngram | = ours_auto" in md and "Default policy (ours_auto): median decode speedup" in md
    with pytest.raises(ValueError, match="unknown latency modes"):
        run_latency(engine, cases[:1], max_new_tokens=4, modes=["ours_fast"])
    with pytest.raises(ValueError, match="need a draft model"):
        run_latency(engine, cases[:1], max_new_tokens=4, modes=["hf_assisted"])


def test_questions_file_and_quick_subset():
    qs = load_questions()
    assert len(qs) >= 20
    assert len(quick_subset(qs, 4)) == 4
    assert Question("x", "", "", "logbooks/operations.elog#4").matches("logbooks/operations.elog#4")
    assert Question("x", "", "", "postmortems/a.md").matches("postmortems/a.md#a")
    assert not Question("x", "", "", "logbooks/operations.elog#4").matches("logbooks/operations.elog#41")


def test_bad_questions_file_names_the_line(tmp_path):
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"id": "a", "question": "ok"}\n{"id": "b"\n')
    with pytest.raises(ValueError, match=":2:"):
        load_questions(bad)


@pytest.mark.slow
def test_retrieval_eval_on_sample_corpus(sample_service):
    report = run_retrieval(sample_service.retriever, quick_subset(load_questions(), 6))
    assert set(report["recall"]) == {"dense", "bm25", "hybrid"}
    for r in report["recall"].values():
        assert 0.0 <= r["@1"] <= r["@5"] <= r["@10"] <= 1.0
    assert report["recall"]["hybrid"]["@10"] >= 0.8
    assert "hybrid" in retrieval_markdown(report)
