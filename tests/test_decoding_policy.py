"""The cost-aware drafter policy, calibration and per-request statistics."""

from __future__ import annotations

import json
import random

import pytest

from decoding import GenerationConfig, SpeculativeEngine
from decoding.drafter import Draft
from decoding.policy import AcceptanceTable, CostModel, DrafterPolicy, PolicyConfig, expected_tokens
from decoding.stats import DrafterStats, GenerationStats

pytestmark = pytest.mark.usefixtures("torch_one_thread")

# Measured shape on the project's CPU: k tokens cost ~1.1x a step at k=2, 1.6x at 4, 1.9x at 8.
CPU_COSTS = CostModel(verify_ms=(30.0, 33.0, 40.0, 48.0, 50.0, 52.0, 54.0, 56.0, 57.0), draft_step_ms=8.0)


def ngram_draft(n_tokens: int, match_length: int, unanimous: bool = True) -> Draft:
    return Draft(list(range(n_tokens)), None, match_length, unanimous)


def failing(table: AcceptanceTable, state: tuple, rounds: int = 30) -> None:
    for _ in range(rounds):
        table.update(state, 4, 0)


def test_expected_tokens():
    assert expected_tokens(0.0, 0.9, 5) == 1.0
    assert expected_tokens(0.9, 0.9, 0) == 1.0
    for a in (0.1, 0.5, 0.9):  # α₁ = αₙ = α is Leviathan et al.'s (1 - α^(γ+1)) / (1 - α)
        assert expected_tokens(a, a, 4) == pytest.approx((1 - a**5) / (1 - a))
    assert expected_tokens(0.5, 1.0, 4) == pytest.approx(3.0)
    assert all(expected_tokens(0.6, 0.8, g + 1) > expected_tokens(0.6, 0.8, g) for g in range(16))


def test_cost_model_extrapolates_linearly():
    costs = CostModel(verify_ms=(10.0, 12.0, 14.0))
    assert costs.verify(1) == 10.0 and costs.verify(3) == 14.0
    assert costs.verify(5) == pytest.approx(18.0)


@pytest.mark.parametrize("bad", [dict(prior_strength=0.0), dict(decay=1.5), dict(recovery=-0.1), dict(prior_first=2.0),
                                 dict(long_match=0), dict(min_gain=float("nan"))])
def test_policy_config_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="invalid PolicyConfig"):
        PolicyConfig(**bad)


@pytest.mark.parametrize("verify,step", [((), None), ((0.0, 1.0), None), ((1.0, float("nan")), None), ((1.0,), -1.0)])
def test_cost_model_rejects_bad_costs(verify, step):
    with pytest.raises(ValueError, match="finite positive"):
        CostModel(verify, step)


def test_table_counts_first_and_later_positions():
    table = AcceptanceTable(PolicyConfig(decay=1.0, recovery=1.0, prior_strength=1e-9))
    state = ("ngram", "4+", True, False)
    approx = lambda *v: pytest.approx(v, abs=1e-6)  # noqa: E731
    table.update(state, 4, 4)  # all accepted: first 1/1, later 3/3
    assert table.alphas(state) == approx(1.0, 1.0)
    table.update(state, 4, 1)  # first accepted, the second rejected: later 3/4
    assert table.alphas(state) == approx(1.0, 0.75)
    table.update(state, 4, 0)  # first rejected: later positions were never tested
    assert table.alphas(state) == approx(2 / 3, 0.75)
    table.update(state, 1, 1)  # a one-token draft tests no later position
    assert table.alphas(state) == approx(0.75, 0.75)
    snap = table.snapshot()
    assert snap == {"ngram:4+:unanimous": {"alpha_first": 0.75, "alpha_next": 0.75, "rounds": 4.0}}


def test_unvisited_states_drift_back_to_the_prior():
    cfg = PolicyConfig(recovery=0.9)
    table = AcceptanceTable(cfg)
    bad, other = ("draft_model", False), ("ngram", "2", True, False)
    failing(table, bad, 10)
    assert table.alphas(bad)[0] < 0.1
    for _ in range(100):
        table.update(other, 2, 2)
    assert table.alphas(bad)[0] == pytest.approx(cfg.prior_first, abs=0.01)


def test_plain_decoding_when_acceptance_is_low():
    policy = DrafterPolicy(CPU_COSTS)
    failing(policy.table, policy.ngram_state(ngram_draft(8, 4)))
    failing(policy.table, policy.draft_model_state())
    decision = policy.choose(ngram_draft(8, 4), True, 8)
    assert decision.drafter is None and decision.gamma == 0 and "plain" in decision.reason


def test_no_drafter_available_means_plain():
    policy = DrafterPolicy(CPU_COSTS)
    assert policy.choose(None, False, 8).drafter is None
    assert policy.choose(Draft([]), False, 8).drafter is None
    assert policy.choose(ngram_draft(8, 4), True, 0).drafter is None  # no room to draft
    only_dm = DrafterPolicy(CPU_COSTS, drafters=frozenset({"draft_model"}))
    assert only_dm.choose(ngram_draft(8, 4), False, 8).drafter is None  # n-gram not allowed, no draft model


def test_long_match_picks_the_ngram_drafter():
    policy = DrafterPolicy(CPU_COSTS)
    decision = policy.choose(ngram_draft(8, 5), True, 8)
    assert decision.drafter == "ngram" and decision.gamma >= 1 and "4+-gram match (unanimous)" in decision.reason


def test_falls_back_to_the_draft_model_then_returns_on_a_long_match():
    policy = DrafterPolicy(CPU_COSTS)
    assert policy.choose(ngram_draft(8, 2), True, 8).drafter in ("ngram", "draft_model")
    for _ in range(20):  # short n-gram matches keep failing
        policy.choose(ngram_draft(4, 2), True, 8)
        policy.update("ngram", ngram_draft(4, 2), 0)
    assert policy.table.alphas(("ngram", "2", True, False))[0] < 0.1
    assert policy.choose(ngram_draft(8, 2), True, 8).drafter == "draft_model"
    assert policy.choose(ngram_draft(8, 2), False, 8).drafter is None  # no draft model: plain
    # A long match reappears: its own state was untouched by the short failures.
    assert policy.choose(ngram_draft(8, 6), True, 8).drafter == "ngram"


def test_ambiguous_and_continuing_matches_are_separate_states():
    policy = DrafterPolicy(CPU_COSTS)
    assert policy.ngram_state(ngram_draft(8, 3, unanimous=False)) == ("ngram", "3", False, False)
    policy.choose(ngram_draft(8, 4), False, 8)
    policy.update("ngram", ngram_draft(8, 4), 8)  # accepted in full: the next round continues a copied span
    assert policy.ngram_state(ngram_draft(8, 4)) == ("ngram", "4+", True, True)
    policy.update(None, None, 0)  # a plain step ends the span
    assert policy.ngram_state(ngram_draft(8, 4)) == ("ngram", "4+", True, False)


def test_acceptance_persists_across_requests(scripted_engine, tiny_models):
    """The engine's table outlives a request: a drafter that failed before starts benched."""
    small = tiny_models.load("small")
    prompt = small.tokenizer.encode("the disk is full")
    ref = tiny_models.greedy("small", prompt, 30)
    engine = scripted_engine(small, lambda out: [(t + 1) % 50 for t in ref[len(out):]], costs=CPU_COSTS)
    config = GenerationConfig(max_new_tokens=30, drafting="ngram", eos_token_ids=())
    first = engine.generate(prompt, config)
    second = engine.generate(prompt, config)
    assert first.token_ids == second.token_ids == ref
    assert first.stats.drafters["ngram"].proposed > second.stats.drafters.get("ngram", DrafterStats()).proposed
    assert engine.acceptance.snapshot()["ngram:4+:unanimous"]["alpha_first"] < 0.2


@pytest.mark.parametrize("seed", range(30))
def test_gamma_maximises_expected_tokens_per_cost(seed):
    rng = random.Random(seed)
    verify = [rng.uniform(5, 15)]
    for _ in range(rng.randint(1, 11)):
        verify.append(verify[-1] + rng.uniform(0, 8))
    costs = CostModel(tuple(verify), rng.choice([None, rng.uniform(0.1, 10)]))
    a1, an = rng.uniform(0, 1), rng.uniform(0, 1)
    cfg = PolicyConfig(min_gain=1.0, prior_first=a1, prior_next=an)
    policy = DrafterPolicy(costs, AcceptanceTable(cfg))
    gamma_max = rng.randint(1, 10)
    n_draft = rng.randint(1, 12)
    use_dm = costs.draft_step_ms is not None and rng.random() < 0.5

    def rate(g, step):
        return expected_tokens(a1, an, g) / (costs.verify(g + 1) + g * step)

    decision = policy.choose(None if use_dm else ngram_draft(n_draft, 2), use_dm, gamma_max)
    step = costs.draft_step_ms if use_dm else 0.0
    g_max = gamma_max if use_dm else min(gamma_max, n_draft)
    best_g = max(range(1, g_max + 1), key=lambda g: rate(g, step))
    if rate(best_g, step) > 1.0 / costs.verify(1):
        assert decision.drafter == ("draft_model" if use_dm else "ngram")
        assert rate(decision.gamma, step) == pytest.approx(rate(best_g, step))
    else:
        assert decision.drafter is None


def test_steep_costs_choose_short_drafts_flat_costs_long_ones():
    cfg = PolicyConfig(prior_first=0.6, prior_next=0.6)
    flat = DrafterPolicy(CostModel(verify_ms=(10.0,) * 9), AcceptanceTable(cfg))
    steep = DrafterPolicy(CostModel(verify_ms=(10.0, 11.0, 16.0, 22.0, 28.0, 34.0, 40.0, 46.0, 52.0)),
                          AcceptanceTable(cfg))
    assert flat.choose(ngram_draft(8, 4), False, 8).gamma == 8
    assert steep.choose(ngram_draft(8, 4), False, 8).gamma <= 2


# -- engine level -----------------------------------------------------------------------------------
def test_switches_are_recorded_with_reasons(scripted_target, tiny_models, byte_token_ids):
    """Output that first copies a passage and then stops copying: the policy starts with the
    n-gram drafter and leaves it when matches stop paying; every switch has a reason."""
    tok = tiny_models.load("large").tokenizer
    copied = tok.encode(" restart the xrootd service on the disk node and clean the tmp pool")
    fresh = [(37 * i) % 900 + 100 for i in range(60)]
    prompt = tok.encode("question: how was it fixed?")
    target = scripted_target(tok, prompt, copied + fresh)
    engine = SpeculativeEngine(target, tiny_models.load("large_trunc"), costs=CPU_COSTS, min_ngram=1,
                               draft_min_confidence=0.0)
    result = engine.generate(prompt, GenerationConfig(max_new_tokens=len(copied) + 60, eos_token_ids=()),
                             contexts=[copied, fresh[:3]])
    assert result.token_ids == copied + fresh
    switches = result.stats.switches
    assert switches[0]["from"] == "start" and switches[0]["to"] == "ngram" and "gram match" in switches[0]["reason"]
    assert any(s["from"] == "ngram" for s in switches[1:])
    assert all(s["reason"] and s["from"] != s["to"] for s in switches)
    assert all(s["from"] in ("start", "plain", "ngram", "draft_model") for s in switches)
    assert all(s["to"] in ("plain", "ngram", "draft_model") for s in switches)
    # at_token counts emitted tokens: the n-gram drafter copied the passage before the first switch away
    at = [s["at_token"] for s in switches]
    assert at == sorted(at) and at[0] == 1 and at[1] >= len(copied) // 2 and at[-1] < len(result.token_ids)
    assert result.stats.drafters["ngram"].alpha > 0.5


def test_plain_decoding_when_speculation_never_pays(tiny_models):
    small = tiny_models.load("small")
    engine = SpeculativeEngine(small, tiny_models.load("small_trunc"),
                               costs=CostModel(verify_ms=(1.0, 5.0, 9.0, 13.0), draft_step_ms=5.0))
    prompt = small.tokenizer.encode("the disk is full the disk is full the disk is")
    result = engine.generate(prompt, GenerationConfig(max_new_tokens=20, eos_token_ids=()))
    assert result.token_ids == tiny_models.greedy("small", prompt, 20)
    assert result.stats.drafters == {} and result.stats.tau == 1.0
    assert [(s["from"], s["to"]) for s in result.stats.switches] == [("start", "plain")]


def test_calibration_at_load(tiny_models):
    """Without ``costs`` the engine measures them; the policy then works on those numbers."""
    small = tiny_models.load("small")
    engine = SpeculativeEngine(small, tiny_models.load("small_trunc"), max_speculative_tokens=3)
    costs = engine.costs
    assert len(costs.verify_ms) == 4 and all(c > 0 for c in costs.verify_ms)
    assert list(costs.verify_ms) == sorted(costs.verify_ms)
    assert costs.draft_step_ms is not None and costs.draft_step_ms > 0
    prompt = small.tokenizer.encode("restart xrootd now")
    ref = tiny_models.greedy("small", prompt, 30)
    result = engine.generate(prompt, GenerationConfig(max_new_tokens=30, eos_token_ids=()), contexts=[ref[5:20]])
    assert result.token_ids == ref
    assert SpeculativeEngine(small).costs.draft_step_ms is None


def test_stats_are_consistent_and_serialisable(tiny_models):
    small = tiny_models.load("small")
    engine = SpeculativeEngine(small, tiny_models.load("small_noisy"), costs=CPU_COSTS, draft_min_confidence=0.0)
    prompt = small.tokenizer.encode("café ✓ the ticket is fixed")
    result = engine.generate(prompt, GenerationConfig(max_new_tokens=30, eos_token_ids=()),
                             contexts=[tiny_models.greedy("small", prompt, 30)[4:]])
    s = result.stats
    assert s.new_tokens == 30 and s.decode_tokens == 29 and sum(s.block_sizes) == 29
    assert s.target_passes == len(s.block_sizes) and s.tau == pytest.approx(29 / s.target_passes)
    assert s.prefill_ms > 0 and s.ttft_ms >= s.prefill_ms and s.total_ms >= s.decode_ms
    for name, d in s.drafters.items():
        assert name in ("ngram", "draft_model") and 0 <= d.accepted <= d.proposed
    assert sum(p for p, _ in s.accepted_by_position) == sum(d.proposed for d in s.drafters.values())
    assert sum(a for _, a in s.accepted_by_position) == sum(d.accepted for d in s.drafters.values())
    out = json.loads(json.dumps(s.to_dict()))
    assert out["tau"] == round(s.tau, 3) and out["finish_reason"] == "length"
    assert all("alpha" in d for d in out["drafters"].values())


def test_stats_record_round():
    s = GenerationStats()
    s.record_round("ngram", 4, 2, 3)
    s.record_round(None, 0, 0, 1)
    s.record_round("ngram", 2, 2, 3)
    assert s.drafters["ngram"].alpha == pytest.approx(4 / 6) and s.tau == pytest.approx(7 / 3)
    assert s.accepted_by_position == [[2, 2], [2, 2], [1, 0], [1, 0]]
