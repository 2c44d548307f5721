"""The cost-aware drafter policy, calibration and per-request statistics."""

from __future__ import annotations

import json
import random

import pytest

from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.core import EngineConfig
from decoding.drafters.base import Offer
from decoding.planning.policy import (
    PLAIN,
    AcceptanceTable,
    CostModel,
    Decision,
    DrafterPolicy,
    PolicyConfig,
    Segment,
    expected_tokens,
    state_name,
)
from decoding.stats import DrafterStats, GenerationStats

pytestmark = pytest.mark.usefixtures("torch_one_thread")

# Measured shape on the project's CPU: k tokens cost ~1.1x a step at k=2, 1.6x at 4, 1.9x at 8.
CPU_COSTS = CostModel(verify_ms=(30.0, 33.0, 40.0, 48.0, 50.0, 52.0, 54.0, 56.0, 57.0), draft_step_ms=8.0)


def ngram_offer(n_tokens: int, match_length: int, unanimous: bool = True) -> Offer:
    """What the n-gram drafter offers for a match of ``match_length`` (long_match 4)."""
    bucket = "4+" if match_length >= 4 else str(match_length)
    agreement = "unanimous" if unanimous else "ambiguous"
    return Offer("ngram", n_tokens, (bucket, agreement), f"{bucket}-gram match ({agreement})", 0.0)


def dm_offer(n_tokens: int = 8, step_ms: float | None = CPU_COSTS.draft_step_ms) -> Offer:
    return Offer("draft_model", n_tokens, (), "draft model", step_ms)


def choose(policy: DrafterPolicy, ngram: Offer | None = None, dm: Offer | None = None, room: int = 8):
    return policy.choose([[o] for o in (ngram, dm) if o is not None], room)


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
                                 dict(min_gain=float("nan")), dict(min_gain=0.0)])
def test_policy_config_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="invalid PolicyConfig"):
        PolicyConfig(**bad)


@pytest.mark.parametrize("verify,step", [((), None), ((0.0, 1.0), None), ((1.0, float("nan")), None), ((1.0,), -1.0)])
def test_cost_model_rejects_bad_costs(verify, step):
    with pytest.raises(ValueError, match="finite positive"):
        CostModel(verify, step)


def test_table_counts_first_and_later_positions():
    table = AcceptanceTable(PolicyConfig(decay=1.0, recovery=1.0, prior_strength=1e-9))
    state = ("ngram", "4+", "unanimous", "")
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
    bad, other = ("draft_model", ""), ("ngram", "2", "unanimous", "")
    failing(table, bad, 10)
    assert table.alphas(bad)[0] < 0.1
    for _ in range(100):
        table.update(other, 2, 2)
    assert table.alphas(bad)[0] == pytest.approx(cfg.prior_first, abs=0.01)


def test_plain_decoding_when_acceptance_is_low():
    policy = DrafterPolicy(CPU_COSTS)
    failing(policy.table, policy.key(ngram_offer(8, 4)))
    failing(policy.table, policy.key(dm_offer()))
    decision = choose(policy, ngram_offer(8, 4), dm_offer())
    assert decision.drafter is None and decision.gamma == 0 and "plain" in decision.reason


def test_no_drafter_available_means_plain():
    policy = DrafterPolicy(CPU_COSTS)
    assert choose(policy).drafter is None
    assert choose(policy, ngram_offer(0, 4)).drafter is None  # nothing to offer
    assert choose(policy, ngram_offer(8, 4), dm_offer(), room=0).drafter is None  # no room to draft
    assert choose(policy, dm=dm_offer(step_ms=None)).drafter is None  # an unmeasured draft model is never chosen
    assert choose(policy, dm=dm_offer(0)).drafter is None  # at the end of the draft's context window


def test_long_match_picks_the_ngram_drafter():
    decision = choose(DrafterPolicy(CPU_COSTS), ngram_offer(8, 5), dm_offer())
    assert decision.drafter == "ngram" and decision.gamma >= 1 and "4+-gram match (unanimous)" in decision.reason


def test_falls_back_to_the_draft_model_then_returns_on_a_long_match():
    policy = DrafterPolicy(CPU_COSTS)
    assert choose(policy, ngram_offer(8, 2), dm_offer()).drafter in ("ngram", "draft_model")
    for _ in range(20):  # short n-gram matches keep failing
        decision = choose(policy, ngram_offer(4, 2))
        policy.update(decision, [4], 0)
    assert policy.table.alphas(("ngram", "2", "unanimous", ""))[0] < 0.1
    assert choose(policy, ngram_offer(8, 2), dm_offer()).drafter == "draft_model"
    assert choose(policy, ngram_offer(8, 2)).drafter is None  # no draft model: plain
    # A long match reappears: its own state was untouched by the short failures.
    assert choose(policy, ngram_offer(8, 6), dm_offer()).drafter == "ngram"


def test_ambiguous_and_continuing_matches_are_separate_states():
    policy = DrafterPolicy(CPU_COSTS)
    assert policy.key(ngram_offer(8, 3, unanimous=False)) == ("ngram", "3", "ambiguous", "")
    decision = choose(policy, ngram_offer(8, 4))
    policy.update(decision, [decision.gamma], decision.gamma)  # accepted in full: the next round continues
    assert policy.key(ngram_offer(8, 4)) == ("ngram", "4+", "unanimous", "continuing")
    assert policy.key(dm_offer()) == ("draft_model", "")  # another drafter does not continue it
    policy.update(PLAIN, [], 0)  # a plain step ends the span
    assert policy.key(ngram_offer(8, 4)) == ("ngram", "4+", "unanimous", "")
    assert state_name(("ngram", "4+", "unanimous", "continuing")) == "ngram:4+:unanimous:continuing"
    assert state_name(("draft_model", "extending")) == "draft_model:extending"


def test_the_draft_model_extends_a_copied_span_that_runs_out():
    """A 2-token n-gram span (its source ends) followed by the draft model: a chained plan
    when the extension is measured to pay, the span alone when it is not."""
    cheap = CostModel(verify_ms=(10.0, 10.2, 10.4, 10.6, 10.8, 11.0, 11.2, 11.4, 11.6), draft_step_ms=0.5)
    policy = DrafterPolicy(cheap, AcceptanceTable(PolicyConfig(prior_first=0.9, prior_next=0.9)))
    span, ext = ngram_offer(2, 4), dm_offer(6, 0.5)
    decision = policy.choose([[span], [dm_offer(8, 0.5)], [span, ext]], 8)
    assert decision.drafter == "ngram+draft_model" and [s.tokens for s in decision.segments][0] == 2
    assert decision.segments[1].key == ("draft_model", "extending") and decision.gamma <= 8
    assert "extending the span before it" in decision.reason
    # The span's first token rejected: the extension was never reached and is not booked.
    policy.update(decision, [2, decision.segments[1].tokens], 0)
    assert ("draft_model", "extending") not in policy.table.counts
    # The span accepted, the extension's first token rejected: booked as a failed extension.
    for _ in range(40):
        policy.update(decision, [2, decision.segments[1].tokens], 2)
    assert policy.table.alphas(("draft_model", "extending"))[0] < 0.1
    assert policy.choose([[span], [span, ext]], 8).drafter == "ngram"


def test_update_books_each_segment_and_the_last_full_drafter():
    policy = DrafterPolicy(CPU_COSTS, AcceptanceTable(PolicyConfig(decay=1.0, recovery=1.0, prior_strength=1e-9)))
    span, ext = ngram_offer(3, 4), dm_offer(4)
    decision = Decision((Segment(span, 3, policy.key(span)), Segment(ext, 4, policy.key(ext, extending=True))), "test")
    policy.update(decision, [3, 4], 5)  # the span in full, 2 of the extension's 4
    assert policy.table.alphas(("ngram", "4+", "unanimous", ""))[0] == pytest.approx(1.0)
    assert policy.table.alphas(("draft_model", "extending")) == pytest.approx((1.0, 0.5))
    assert policy.key(span)[-1] == ""  # the round did not end in full
    policy.update(decision, [3, 2], 5)  # the extension stopped early at 2 and both were accepted
    assert policy.key(dm_offer())[-1] == "continuing"


def test_acceptance_persists_across_requests(scripted_engine, tiny_models):
    """The engine's table outlives a request: a drafter that failed before starts benched."""
    small = tiny_models.load("small")
    prompt = small.tokenizer.encode("the disk is full")
    ref = tiny_models.greedy("small", prompt, 30)
    engine = scripted_engine(small, lambda out: [(t + 1) % 50 for t in ref[len(out):]], costs=CPU_COSTS)
    config = GenerationConfig(budget=Budget(max_new_tokens=30, eos_token_ids=()),
                              speculation=Speculation(drafting="ngram"))
    first = engine.generate(prompt, config)
    second = engine.generate(prompt, config)
    assert first.token_ids == second.token_ids == ref
    assert first.stats.drafters["ngram"].proposed > second.stats.drafters.get("ngram", DrafterStats()).proposed
    assert engine.core.acceptance.snapshot()["ngram:scripted"]["alpha_first"] < 0.2


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
    room = rng.randint(1, 10)
    n_draft = rng.randint(1, 12)
    use_dm = costs.draft_step_ms is not None and rng.random() < 0.5

    def rate(g, step):
        return expected_tokens(a1, an, g) / (costs.verify(g + 1) + g * step)

    offer = dm_offer(room, costs.draft_step_ms) if use_dm else ngram_offer(min(n_draft, room), 2)
    decision = policy.choose([[offer]], room)
    step = costs.draft_step_ms if use_dm else 0.0
    g_max = room if use_dm else min(room, n_draft)
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
    assert choose(flat, ngram_offer(8, 4)).gamma == 8
    assert choose(steep, ngram_offer(8, 4)).gamma <= 2


# -- engine level -----------------------------------------------------------------------------------
def test_switches_are_recorded_with_reasons(scripted_target, tiny_models, byte_token_ids):
    """Output that first copies a passage and then stops copying: the policy starts with the
    n-gram drafter and leaves it when matches stop paying; every switch has a reason."""
    tok = tiny_models.load("large").tokenizer
    copied = tok.encode(" restart the xrootd service on the disk node and clean the tmp pool")
    fresh = [(37 * i) % 900 + 100 for i in range(60)]
    prompt = tok.encode("question: how was it fixed?")
    target = scripted_target(tok, prompt, copied + fresh)
    engine = SpeculativeEngine(target, tiny_models.load("large_trunc"),
                               config=EngineConfig(min_ngram=1, draft_min_confidence=0.0), costs=CPU_COSTS)
    result = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=len(copied) + 60, eos_token_ids=())),
                             contexts=[copied, fresh[:3]])
    assert result.token_ids == copied + fresh
    switches = result.stats.switches
    assert switches[0]["from"] == "start" and switches[0]["to"] == "ngram" and "gram match" in switches[0]["reason"]
    assert any(s["from"] == "ngram" for s in switches[1:])
    assert all(s["reason"] and s["from"] != s["to"] for s in switches)
    plans = ("plain", "ngram", "draft_model", "ngram+draft_model")
    assert all(s["from"] in ("start", *plans) and s["to"] in plans for s in switches)
    # at_token counts emitted tokens: the n-gram drafter copied the passage before the first switch away
    at = [s["at_token"] for s in switches]
    assert at == sorted(at) and at[0] == 1 and at[1] >= len(copied) // 2 and at[-1] < len(result.token_ids)
    assert result.stats.drafters["ngram"].alpha > 0.5
    produced = result.stats.produced
    assert sum(produced.values()) == len(result.token_ids) and produced["ngram"] >= len(copied) // 2
    assert sum(result.stats.token_share.values()) == pytest.approx(1.0)


def test_the_draft_model_continues_past_a_copied_span(tiny_models):
    """Passages hold pieces of the answer; between them the n-gram span runs out mid-round and
    the (here perfect) draft model extends it: chained rounds, output still plain greedy, and
    the tokens each drafter produced add up to the output."""
    small = tiny_models.load("small")
    prompt = small.tokenizer.encode("restart xrootd now")
    ref = tiny_models.greedy("small", prompt, 60)
    cheap = CostModel(verify_ms=tuple(10.0 + 0.1 * i for i in range(12)), draft_step_ms=0.5)
    # Priors that expect every drafter to be right: free span tokens then beat draft-model steps.
    engine = SpeculativeEngine(small, small, EngineConfig(draft_min_confidence=0.0, answer_history=0,
                                                          policy=PolicyConfig(prior_first=0.95, prior_next=0.95)),
                               costs=cheap)
    config = GenerationConfig(budget=Budget(max_new_tokens=60, eos_token_ids=()),
                              speculation=Speculation(num_speculative_tokens=8))
    result = engine.generate(prompt, config, contexts=[ref[0:4], ref[20:24], ref[40:44]])
    assert result.token_ids == ref
    s = result.stats
    assert any(sw["to"] == "ngram+draft_model" and "extending the span before it" in sw["reason"]
               for sw in s.switches), s.switches
    assert s.drafters["ngram"].accepted > 0 and s.drafters["draft_model"].accepted > 0
    assert "draft_model:extending" in engine.core.acceptance.snapshot()
    produced = s.produced
    # One target token per pass plus the prefill's: no stop cut a block here (the budget ends on a bonus token).
    assert sum(produced.values()) == 60 and produced["target"] == s.target_passes + 1
    out = s.to_dict()
    assert out["produced"] == produced and set(out["token_share"]) == set(produced)


def test_plain_decoding_when_speculation_never_pays(tiny_models):
    small = tiny_models.load("small")
    engine = SpeculativeEngine(small, tiny_models.load("small_trunc"), config=EngineConfig(learn_costs=False),
                               costs=CostModel(verify_ms=(1.0, 5.0, 9.0, 13.0), draft_step_ms=5.0))
    prompt = small.tokenizer.encode("the disk is full the disk is full the disk is")
    result = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=20, eos_token_ids=())))
    assert result.token_ids == tiny_models.greedy("small", prompt, 20)
    assert result.stats.drafters == {} and result.stats.tau == 1.0
    assert [(s["from"], s["to"]) for s in result.stats.switches] == [("start", "plain")]
    # the n-gram drafter's declined proposals were measured all the same (off-policy): its states have counts
    assert any(name.startswith("ngram:") for name in engine.core.acceptance.snapshot())


def test_calibration_at_load(tiny_models):
    """Without ``costs`` the engine measures them; the policy then works on those numbers."""
    small = tiny_models.load("small")
    engine = SpeculativeEngine(small, tiny_models.load("small_trunc"), config=EngineConfig(num_speculative_tokens=3))
    costs = engine.core.costs
    assert len(costs.verify_ms) == 4 and all(c > 0 for c in costs.verify_ms)
    assert list(costs.verify_ms) == sorted(costs.verify_ms)
    assert costs.draft_step_ms is not None and costs.draft_step_ms > 0
    prompt = small.tokenizer.encode("restart xrootd now")
    ref = tiny_models.greedy("small", prompt, 30)
    result = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=30,
                                                                    eos_token_ids=())), contexts=[ref[5:20]])
    assert result.token_ids == ref
    assert SpeculativeEngine(small).core.costs.draft_step_ms is None


def test_stats_are_consistent_and_serialisable(tiny_models):
    small = tiny_models.load("small")
    engine = SpeculativeEngine(small, tiny_models.load("small_noisy"), config=EngineConfig(draft_min_confidence=0.0),
                               costs=CPU_COSTS)
    prompt = small.tokenizer.encode("café ✓ the ticket is fixed")
    result = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=30, eos_token_ids=())),
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
    s.record_first()
    s.record_round([("ngram", 4)], 2, 3)
    s.record_round([], 0, 1)
    s.record_round([("ngram", 2)], 2, 3)
    assert s.drafters["ngram"].alpha == pytest.approx(4 / 6) and s.tau == pytest.approx(7 / 3)
    assert s.accepted_by_position == [[2, 2], [2, 2], [1, 0], [1, 0]]
    assert s.produced == {"target": 4, "ngram": 4}
    # A chained round: 3 from the n-gram span, 2 of the draft model's 4, then the target's token;
    # a stop cut the committed block after 4 tokens.
    s.record_round([("ngram", 3), ("draft_model", 4)], 5, 4)
    assert s.drafters["draft_model"].proposed == 4 and s.drafters["draft_model"].accepted == 2
    assert s.produced == {"target": 4, "ngram": 7, "draft_model": 1}
    # An unreached extension counts as proposed, never as accepted.
    s.record_round([("ngram", 3), ("draft_model", 4)], 1, 2)
    assert s.drafters["draft_model"].accepted == 2 and s.produced["target"] == 5
    s.truncate(10)  # a loop stop cut the output to 10 tokens
    assert sum(s.produced.values()) == 10 and s.token_share["target"] == pytest.approx(0.4)


def test_a_drafter_setup_cost_is_priced_once_per_round():
    """A draft model that must first feed tokens (Offer.setup_ms) is chosen only while that
    feed still pays; the same offer without it is chosen."""
    policy = DrafterPolicy(CPU_COSTS)
    policy.table.set_prior("draft_model", 0.95, 0.95)
    cheap = Offer("draft_model", 8, (), "draft model", 8.0)
    costly = Offer("draft_model", 8, (), "draft model", 8.0, setup_ms=500.0)
    assert policy.choose([[cheap]], 8).drafter == "draft_model"
    assert policy.choose([[costly]], 8).drafter is None
    assert (policy._rate([Segment(cheap, 3, ("draft_model", ""))])
            > policy._rate([Segment(costly, 3, ("draft_model", ""))]))


def test_tokens_copied_from_a_passage_are_counted_by_origin():
    """Accepted n-gram tokens remember what they were copied from: a passage (quoted from the
    sources by construction), the output, the prompt; a loop stop's cut drops them too."""
    s = GenerationStats()
    s.record_first()
    s.record_round([("ngram", 4, "passage")], 4, 5)
    s.record_round([("ngram", 3, "output")], 1, 2)
    s.record_round([("ngram", 2, "passage"), ("draft_model", 3, "")], 4, 5)
    assert s.copied_from_passages == 4 + 2 and len(s.origins) == len(s.sources) == 13
    assert s.to_dict()["copied_share"] == round(6 / 13, 3)
    s.truncate(3)
    assert s.copied_from_passages == 2


def test_the_engine_reports_the_share_copied_from_passages(scripted_target, tiny_models):
    tok = tiny_models.load("large").tokenizer
    copied = tok.encode(" restart the xrootd service on the disk node and clean the tmp pool")
    prompt = tok.encode("question: how was it fixed?")
    engine = SpeculativeEngine(scripted_target(tok, prompt, copied), config=EngineConfig(min_ngram=1), costs=CPU_COSTS)
    result = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=len(copied),
                                                                    eos_token_ids=())), contexts=[copied])
    assert result.token_ids == copied
    stats = result.stats
    assert 0 < stats.copied_from_passages <= stats.produced["ngram"]
    assert stats.to_dict()["copied_share"] == round(stats.copied_from_passages / len(copied), 3)


def test_a_draft_prefill_is_paid_only_when_the_answer_saves_more():
    """Measured on this CPU for the Qwen2.5-Coder 1.5B target with the 0.5B draft (own KV cache):
    verification flat at ~304 ms up to 4 tokens, a draft step 149 ms, agreement 0.83."""
    from decoding.planning.policy import draft_prefill_pays

    costs = CostModel(verify_ms=(304.0, 304.0, 304.0, 304.0, 445.0, 511.0), draft_step_ms=149.0,
                      draft_feed_ms=(149.0, 160.0, 170.0, 180.0))
    pays, reason = draft_prefill_pays(costs, 650, 24, 0.83, 5)
    assert not pays and "draft prefill" in reason and "650 prompt tokens" in reason
    assert draft_prefill_pays(costs, 650, 2000, 0.83, 5)[0]
    assert not draft_prefill_pays(costs, 650, 2000, 0.0, 5)[0]  # a draft that never agrees saves nothing
    assert not draft_prefill_pays(CostModel((304.0,)), 650, 2000, 0.9, 5)[0]


def test_a_draft_with_its_own_cache_prefills_when_asked_alone(tiny_models):
    """``draft_model`` mode: the draft (another KV layout) prefills the prompt, drafts from the
    first round on, and the output is still plain greedy's."""
    large = tiny_models.load("large")
    prompt = large.tokenizer.encode("restart the xrootd service on the disk node")
    ref = tiny_models.greedy("large", prompt, 24)
    engine = SpeculativeEngine(large, tiny_models.load("large_trunc"),
                               config=EngineConfig(draft_agreement=0.9, draft_min_confidence=0.0),
                               costs=CostModel(verify_ms=(30.0,) * 6, draft_step_ms=1.0, draft_feed_ms=(1.0, 1.1, 1.2)))
    result = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=24, eos_token_ids=()),
                                                      speculation=Speculation(drafting="draft_model")))
    assert result.token_ids == ref
    assert result.stats.draft_prefill.startswith("yes") and result.stats.drafters["draft_model"].proposed > 0
    auto = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=24, eos_token_ids=())))
    assert auto.token_ids == ref and auto.stats.draft_prefill.split(":")[0] in ("yes", "no")
