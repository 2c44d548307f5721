"""The eval code on tiny inputs: report shapes, plots, a broken verifier and a missing loop
stop caught, and the loop stop applied alike to our modes, the reference and the anchors."""

from __future__ import annotations

import json

import pytest
import torch

import decoding.request
from decoding import SpeculativeEngine
from decoding.planning.policy import CostModel
from decoding.stopping import LoopDetector, StopChecker
from evals.cli import _loop_span
from evals.exactness import compare, failing_divergences, reference, run_exactness
from evals.harness import Case
from evals.latency import LoopStop, latency_modes, run_hf, run_latency
from evals.questions import Question, load_questions, quick_subset
from evals.report import exactness_markdown, latency_markdown, latency_plots, retrieval_markdown
from evals.retrieval_eval import run_retrieval

SPAN = 4  # the tiny models' greedy outputs loop within 40 tokens at this span (both cases)
LOOP_TOKENS = 40
COSTS = CostModel(verify_ms=(10.0, 10.5, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0), draft_step_ms=1.0)


@pytest.fixture
def tiny_cases(tiny_models, torch_one_thread):
    """Two prompts for the tiny target (run on one torch thread: much faster for tiny models)."""
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
    base = ["off", "ngram", "draft_model", "auto"]
    assert report["modes"] == base + [f"{m}@{v}" for m in base for v in ("prefix", "again")]
    assert report["exact"] == {m: len(cases) for m in report["modes"]}
    for case, row in zip(cases, report["cases"]):  # the solo modes reuse nothing; @again reuses it all
        assert row["modes"]["auto@again"]["reused_tokens"] == len(case.prompt_ids)
        assert row["modes"]["auto@prefix"]["reused_tokens"] in (0, len(case.prompt_ids) // 2)
    assert report["divergences"] == []
    json.dumps(report)
    assert report["loop_span"] == 0 and set(report["reference_finish"]) <= {"length", "eos"}
    md = exactness_markdown(report)
    assert "| auto | 2/2 | 0 |" in md and "loop stop off" in md and "Contract checked" in md
    assert "| auto@again | 2/2 | 0 |" in md and "Prefix reuse:" in md


def test_the_batched_exactness_modes_hold_each_answer_to_its_solo_greedy(tiny_engine, tiny_cases):
    _, cases = tiny_cases
    report = run_exactness(tiny_engine, cases * 2, max_new_tokens=12, batch_sizes=(2, 3), loop_span=SPAN,
                           prefix_reuse=False)
    assert report["modes"][4:] == ["off@b2", "ngram@b2", "draft_model@b2", "auto@b2",
                                   "off@b3", "ngram@b3", "draft_model@b3", "auto@b3"]
    assert report["exact"] == {m: 4 for m in report["modes"]} and report["divergences"] == []
    assert max(c["modes"]["auto@b3"]["max_batch_size"] for c in report["cases"]) >= 2
    assert "| auto@b3 | 4/4 |" in exactness_markdown(report)


def test_exactness_with_the_loop_stop_checks_the_cut_reference(tiny_engine, tiny_cases, tiny_models):
    _, cases = tiny_cases
    report = run_exactness(tiny_engine, cases, max_new_tokens=LOOP_TOKENS, loop_span=SPAN, prefix_reuse=False)
    modes = ["off", "ngram", "draft_model", "auto"]
    assert report["divergences"] == [] and report["exact"] == {m: 2 for m in modes}
    assert report["loop_span"] == SPAN and report["reference_finish"] == {"repetition": 2}
    assert report["loop_stopped"] == {m: 2 for m in modes}
    for case, row in zip(cases, report["cases"]):
        # the reference is plain greedy cut by a brute-force re-statement of the loop stop
        ids, _, reason = tiny_models.expected("small", case.prompt_ids, LOOP_TOKENS, loop_span=SPAN)
        assert (row["reference_finish"], row["reference_tokens"]) == (reason, len(ids))
        assert len(ids) < row["reference_generated"] < LOOP_TOKENS
        assert all(m["finish_reason"] == "repetition" and m["new_tokens"] == len(ids) for m in row["modes"].values())
    md = exactness_markdown(report)
    assert f"span {SPAN} tokens" in md and "repetition 2 (loop-cut)" in md and "| auto | 2/2 | 2 |" in md
    row = report["cases"][1]
    assert f"| t1 | repetition, {row['reference_tokens']} ({row['reference_generated']}) | ✓ | ✓ | ✓ | ✓ |" in md


def test_a_missing_loop_stop_is_a_stop_divergence(tiny_engine, tiny_cases, monkeypatch):
    _, cases = tiny_cases
    checker = decoding.request.StopChecker
    monkeypatch.setattr(decoding.request, "StopChecker",  # the engine ignores loop_span
                        lambda tok, eos, stops, budget, loop_span=0: checker(tok, eos, stops, budget))
    report = run_exactness(tiny_engine, cases, max_new_tokens=LOOP_TOKENS, modes=["off", "ngram"], loop_span=SPAN,
                           prefix_reuse=False)
    assert report["exact"] == {"off": 0, "ngram": 0} and len(report["divergences"]) == 4
    for d in report["divergences"]:
        row = next(c for c in report["cases"] if c["id"] == d["question_id"])
        assert (d["kind"], d["margin"]) == ("stop", None)
        assert (d["reference_finish"], d["got_finish"]) == ("repetition", "length")
        assert d["position"] == row["reference_tokens"] and d["reference_token"] is None and d["got_token"] is not None
    assert failing_divergences(report, allow_near_ties=float("inf")) == report["divergences"]  # never a near-tie
    assert "| t0 | off | stop |" in exactness_markdown(report)


def test_a_token_divergence_cut_away_by_a_loop_stop_is_still_reported(tiny_engine, tiny_cases):
    _, cases = tiny_cases
    case = cases[0]
    ref = reference(tiny_engine, case.prompt_ids, LOOP_TOKENS, SPAN)
    assert ref.finish_reason == "repetition" and len(ref.token_ids) + 3 < ref.decided
    # A decoder whose token after the kept ids differed, and whose own loop stop then cut to fewer ids.
    pos = len(ref.token_ids) + 1
    committed = ref.raw[:pos] + [(ref.raw[pos] + 1) % 60] + ref.raw[pos + 1:ref.decided]
    div = compare(tiny_engine, case, "ngram", ref, ref.token_ids[:-2], "repetition", committed)
    assert (div.kind, div.position) == ("token", pos)
    assert (div.reference_token, div.got_token) == (ref.raw[pos], committed[pos])
    assert div.margin is not None and div.margin >= 0
    # Past the reference's stop decision a different token explains nothing: the loop stop was missed.
    missed = ref.raw[:ref.decided] + [(ref.raw[ref.decided] + 1) % 60]
    div = compare(tiny_engine, case, "ngram", ref, ref.token_ids[:-2], "repetition", missed)
    assert (div.kind, div.position, div.margin) == ("stop", len(ref.token_ids) - 2, None)
    assert compare(tiny_engine, case, "ngram", ref, list(ref.token_ids), "repetition", committed) is None


@pytest.mark.parametrize("loop_span", [0, SPAN])
def test_broken_verifier_is_caught_as_divergence(tiny_engine, tiny_cases, monkeypatch, loop_span):
    _, cases = tiny_cases

    def accept_everything(draft_tokens, target_logits):
        return draft_tokens + [int(target_logits[len(draft_tokens)].argmax())], len(draft_tokens)

    monkeypatch.setattr(decoding.request, "verify_greedy", accept_everything)
    report = run_exactness(tiny_engine, cases, max_new_tokens=12, modes=["off", "ngram", "draft_model"],
                           loop_span=loop_span)
    assert report["exact"]["off"] == len(cases)  # nothing drafted, nothing to break
    assert report["exact"]["ngram"] + report["exact"]["draft_model"] < 2 * len(cases)
    div = report["divergences"][0]
    assert div["mode"] in ("ngram", "draft_model") and div["reference_token"] != div["got_token"]
    assert div["kind"] == "token"
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
    oracle = report["oracle"]  # ours_auto against the hindsight bound of its drafter
    assert [r["id"] for r in oracle["per_question"]] == [c.question.id for c in cases]
    assert all(r["oracle_speedup"] >= 1.0 and r["share"] > 0 for r in oracle["per_question"])
    assert "Against its own bound" in latency_markdown(report)
    assert report["ttft_ratio"]["over"] == "hf_greedy" and report["ttft_ratio"]["modes"]["hf_greedy"]["median"] == 1.0
    assert "TTFT ÷ hf_greedy's on the same prompt" in latency_markdown(report)
    paths = latency_plots(report, tmp_path)
    assert [p.name for p in paths] == ["speedup.png", "tau_hist.png", "acceptance_by_position.png",
                                       "speedup_vs_copied.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_the_policy_replays_over_the_recorded_greedy_answers(tiny_engine, tiny_cases):
    from decoding import Budget, GenerationConfig
    from evals.policy_replay import Recorded, ReplayTarget, record, replay_policy
    from evals.report import policy_markdown

    _, cases = tiny_cases
    answers = record(tiny_engine, cases, 12, 0)
    assert [a.id for a in answers] == ["t0", "t1"] and all(len(a.answer_ids) >= 2 for a in answers)
    target = ReplayTarget(tiny_engine.target)  # plain greedy over the replay gives each answer back
    plain = SpeculativeEngine(target, costs=COSTS)
    for a in answers:
        target.expect(a.prompt_ids, a.answer_ids)
        assert plain.generate(a.prompt_ids, GenerationConfig(budget=Budget(max_new_tokens=12)),
                              a.context_ids).token_ids == a.answer_ids
    result = replay_policy(tiny_engine.target, answers, COSTS, 12)
    assert [q["id"] for q in result["questions"]] == ["t0", "t1"]
    for q in result["questions"]:  # no schedule beats the hindsight one
        assert q["oracle_speedup"] >= 1.0 and 0 < q["policy_share"] <= 1.0 + 1e-9
        assert 0 < q["calibrated_share"] <= 1.0 + 1e-9
    md = policy_markdown({**result, "hardware": {"device": "cpu"}, "max_new_tokens": 12, "repeats": 2})
    assert "| t0 |" in md and "Median share of the bound: policy" in md
    with pytest.raises(ValueError, match="nothing to replay"):
        replay_policy(tiny_engine.target, [Recorded("x", [1, 2], [], [3])], COSTS, 12)


def test_ttft_is_held_against_the_anchor_question_by_question():
    from evals.latency import ttft_ratios

    # a short and a long prompt: each mode within 2 % of the anchor on its own prompt, while the
    # medians over all runs (1,000 vs 4,100 ms here) would read a 4x gap
    rows = [{"modes": {"ours": {"ttft_ms": 1020.0}, "anchor": {"ttft_ms": 1000.0}}},
            {"modes": {"ours": {"ttft_ms": 3920.0}, "anchor": {"ttft_ms": 4000.0}}},
            {"modes": {"ours": {"ttft_ms": 4100.0}, "anchor": {"ttft_ms": 4100.0}}}]
    ratio = ttft_ratios(rows, "anchor")
    assert ratio == {"over": "anchor", "modes": {"ours": {"median": 1.0, "max": 1.02},
                                                 "anchor": {"median": 1.0, "max": 1.0}}}
    assert ttft_ratios(rows, "absent") == {"over": "absent", "modes": {}}


def test_the_hindsight_schedule_drafts_what_is_accepted_where_it_pays():
    from decoding.drafters.ngram import NGramDrafter
    from decoding.planning.policy import CostModel
    from evals.oracle import accepted_lengths, hindsight_schedule

    # a passage holds the answer's middle: the drafter proposes it once the answer reaches it;
    # the first token is the prefill's (no position of its own)
    assert accepted_lengths(NGramDrafter(), [1, 2, 3, 4, 5, 6, 7], [[9, 3, 4, 5, 6]], [3, 4, 5, 6, 8],
                            num_speculative_tokens=4) == [3, 2, 1, 0]
    linear = CostModel((10.0, 14, 18, 22, 26, 30, 34, 38, 42))
    assert hindsight_schedule([0, 0, 3, 2, 1, 0, 0], linear) == (52.0, [0, 0, 3, 0])  # 4 passes for 7 tokens
    assert hindsight_schedule([8, 7, 6, 5, 4, 3, 2, 1, 0], linear) == (42.0, [8])
    steep = CostModel((10.0, 25, 40, 55))  # a 2-row pass costs 2.5 steps: drafting one token never pays
    assert hindsight_schedule([1, 0, 1, 0], steep) == (40.0, [0, 0, 0, 0])


def test_latency_with_the_loop_stop_counts_the_tokens_users_get(tiny_engine, tiny_cases, tiny_models):
    _, cases = tiny_cases
    report = run_latency(tiny_engine, cases, max_new_tokens=LOOP_TOKENS, loop_span=SPAN)
    assert report["loop_span"] == SPAN
    assert all(report[k][m] == len(cases) for k in ("loop_stopped", "exact_vs_greedy", "runs") for m in report["modes"])
    assert all(report["loop_cut_tokens"][m] > 0 for m in report["modes"])
    for case, row in zip(cases, report["per_question"]):
        ids, _, _ = tiny_models.expected("small", case.prompt_ids, LOOP_TOKENS, loop_span=SPAN)
        assert all((m["tokens"], m["finish_reason"]) == (len(ids), "repetition") for m in row["modes"].values())
    assert report["tau"]["hf_greedy"] < 1  # passes spent on the cut-away repeats buy the user nothing
    report.update(hardware={"device": "cpu"}, max_new_tokens=LOOP_TOKENS, repeats=1)
    md = latency_markdown(report, plots=False)
    assert f"span {SPAN} tokens" in md and "| loop-stopped |" in md and "= 2 per mode" in md
    assert next(line for line in md.splitlines() if line.startswith("| ours_auto |")).endswith("| 2 |")


def test_anchors_stop_at_the_loop_and_are_cut_like_the_reference(tiny_engine, tiny_cases):
    _, cases = tiny_cases
    for case in cases:
        ref = reference(tiny_engine, case.prompt_ids, LOOP_TOKENS, SPAN)
        greedy = run_hf(tiny_engine, "hf_greedy", case, LOOP_TOKENS, SPAN)
        # generate() stopped on the token that completed the loop: one decode pass per id up to it
        assert (greedy.tokens, greedy.finish_reason, greedy.generated) == (ref.token_ids, "repetition", ref.decided)
        assert greedy.passes == ref.decided - 1 and len(greedy.itl_ms) == len(ref.token_ids) - 1
        for mode in ("hf_pld_3", "hf_assisted"):
            run = run_hf(tiny_engine, mode, case, LOOP_TOKENS, SPAN)
            assert (run.tokens, run.finish_reason, run.generated) == (ref.token_ids, "repetition", ref.decided)
            assert run.passes <= greedy.passes  # each verified block holds >= 1 id, up to the same stop


def test_loop_stop_criterion_fires_on_the_block_completing_the_loop():
    prompt, unit = [90, 91, 92], [1, 2, 3, 4, 5]
    output = [7, 8] + unit * 4
    detector = LoopDetector(3)
    fire = next(t for t in range(1, len(output) + 1) if detector.push(output[:t]))
    for block in (1, 2, 4, 7):
        crit, seq, calls = LoopStop(len(prompt), 3), list(prompt), []
        for i in range(0, len(output), block):
            seq += output[i:i + block]
            done = crit(torch.tensor([seq]), None)
            assert done.dtype == torch.bool and done.shape == (1,)
            calls.append((len(seq) - len(prompt), bool(done)))
            if done:
                break
        ended = calls[-1][0]
        assert calls[-1][1] and ended >= fire and ended - block < fire  # the first call that saw the token
        assert crit.detector.cut == detector.cut == 2 + len(unit)  # keeps one copy of the unit
        checker = StopChecker(None, frozenset(), (), len(output), 3)
        checker.accept(output[:ended])
        assert checker.output == output[:crit.detector.cut] and checker.generated == fire


def test_eval_loop_span_defaults_to_the_service_setting():
    from copilot.config import Settings
    from evals.harness import EvalSetup, service_loop_span

    settings = Settings(_env_file=None)
    assert service_loop_span(settings) == (settings.loop_span if settings.loop_stop else 0)
    assert service_loop_span(settings.model_copy(update={"loop_stop": False})) == 0
    assert service_loop_span(settings.model_copy(update={"loop_stop": True, "loop_span": 20})) == 20
    setup = EvalSetup(None, None, None, loop_span=20)
    assert _loop_span(setup, None) == 20 and _loop_span(setup, 0) == 0 and _loop_span(setup, 7) == 7


def test_saved_cases_replay_on_the_engine_alone(tiny_engine, tiny_cases, tiny_models, tmp_path):
    """`copilot eval cases` → `exactness --cases`: the replayed cases are the saved ones, and
    the replay engine (no store) loads the target the file names and checks exactness."""
    from evals.harness import EvalSetup, load_cases, replay_setup, save_cases

    _, cases = tiny_cases
    path = tmp_path / "cases.json"
    save_cases(cases, path, EvalSetup(None, None, None, replay_engine=tiny_engine, loop_span=SPAN), 12)
    meta, loaded = load_cases(path)
    assert loaded == cases
    assert meta["target_model"] == tiny_engine.target.name and meta["loop_span"] == SPAN
    setup = replay_setup({**meta, "target_model": str(tiny_models.path("small"))}, device="cpu", dtype="float32")
    assert setup.service is None and setup.loop_span == SPAN
    report = run_exactness(setup.engine, loaded, max_new_tokens=meta["max_new_tokens"], loop_span=setup.loop_span,
                           prefix_reuse=False)
    assert report["divergences"] == [] and report["exact"]["ngram"] == len(cases)


@pytest.mark.parametrize("content", ["not json", '{"meta": {"format": 99}, "cases": []}', '{"cases": []}'])
def test_a_bad_cases_file_is_named(tmp_path, content):
    from evals.harness import load_cases

    path = tmp_path / "cases.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="not an eval cases file"):
        load_cases(path)


def test_latency_without_a_draft_model_times_the_ngram_policy_once(tiny_engine, tiny_cases):
    _, cases = tiny_cases
    engine = SpeculativeEngine(tiny_engine.target, costs=tiny_engine.core.costs)
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
    report = run_retrieval(sample_service.searcher.retriever, quick_subset(load_questions(), 6))
    assert set(report["recall"]) == {"dense", "bm25", "hybrid"}
    for r in report["recall"].values():
        assert 0.0 <= r["@1"] <= r["@5"] <= r["@10"] <= 1.0
    assert report["recall"]["hybrid"]["@10"] >= 0.8
    assert "hybrid" in retrieval_markdown(report)


@pytest.mark.parametrize("argv, says", [(["--sets", "{tmp}"], "holds questions.jsonl and corpus/"),
                                         (["--sets", "evals/data/site8", "--tokens", "0"], "--tokens must be 1")])
def test_the_short_tail_check_refuses_a_folder_that_is_not_a_question_set(argv, says, tmp_path, monkeypatch, capsys):
    from evals import short_tails

    argv = [a.format(tmp=tmp_path) for a in argv]
    monkeypatch.setattr("sys.argv", ["short_tails", *argv, "--out", str(tmp_path / "out.json")])
    with pytest.raises(SystemExit) as exit_info:
        short_tails.main()
    assert exit_info.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()
