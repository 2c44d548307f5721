"""Continuous batching: every request of a batch emits its own plain greedy output.

Requests join and leave mid-batch with different budgets, stop strings, drafting modes
and seeds, on tiny random Llama models through the real packed pass; the reference is
``generate()`` of each request alone (``tiny_models.expected``). Also: the packed pass
itself, interleaved streams, γ allocation, and a cost model that recovers from a skewed
start-up calibration.
"""

from __future__ import annotations

import random
import threading

import pytest
import torch

from decoding import Budget, GenerationConfig, Sampling, Speculation, SpeculativeEngine
from decoding.backends.packed_pass import packed_pass, supports_packed_pass
from decoding.core import EngineConfig, PromptError
from decoding.kv.cache import PreallocatedCache
from decoding.planning.batch_policy import BatchSpeculation, allocate
from decoding.planning.online_costs import OnlineCosts
from decoding.planning.policy import CostModel

pytestmark = pytest.mark.usefixtures("torch_one_thread")

FLAT = CostModel(verify_ms=(1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12, 1.14, 1.16))
TEXTS = ["restart the xrootd service on the disk node", "the disk is full the disk is full the disk is",
         "ticket link fixed: renew host cert", "queue storage pool drain job failed timeout",
         "clean tmp on the node then restart the service then clean tmp on the node"]


@pytest.fixture(scope="module")
def small(tiny_models):
    return tiny_models.load("small")


def _prompts(small) -> list[list[int]]:
    return [small.tokenizer.encode(t) for t in TEXTS]


def _drive(batch, joins: dict[int, list[tuple]], max_rounds: int = 400) -> dict[int, list]:
    """Run ``batch``; ``joins[r]`` are ``(key, prompt, config[, cancel])`` admitted before round r.
    Returns ``{key: events}``."""
    events: dict[int, list] = {}
    keys: dict[int, int] = {}
    for r in range(max_rounds):
        for key, prompt, config, *cancel in joins.get(r, []):
            state, first = batch.add(prompt, config, cancel=cancel[0] if cancel else None)
            keys[id(state)] = key
            events[key] = list(first)
        if not batch.active and r > max(joins):
            return events
        for state, event in batch.step():
            events[keys[id(state)]].append(event)
    raise AssertionError("the batch did not finish")


def _result(events):
    assert events[-1].result is not None
    text = "".join(e.delta for e in events)
    assert text == events[-1].result.text  # the streamed deltas add up to the text
    return events[-1].result


def test_small_is_packable_and_a_scripted_model_is_not(small, scripted_target):
    assert supports_packed_pass(small.model)
    fake = scripted_target(small.tokenizer, [1, 2], [3, 4])
    assert not supports_packed_pass(fake.model)


def test_a_packed_pass_of_one_request_is_its_solo_pass_bit_for_bit(small):
    prompt = _prompts(small)[0]
    solo, packed = PreallocatedCache(64), PreallocatedCache(64)
    with torch.inference_mode():
        small.prefill(prompt, solo)
        small.prefill(prompt, packed)
        for tokens in ([5], [6, 7, 8]):  # the engine's solo verification pass
            want = small.forward([(tokens, solo)])[0]
            got = packed_pass(small.model, [(tokens, packed)])[0]
            assert torch.equal(want, got), (tokens, (want - got).abs().max())


def test_a_packed_pass_gives_each_request_its_own_logits(small):
    prompts, news = _prompts(small)[:4], [[5], [6, 7, 8], [9, 10], [11]]
    with torch.inference_mode():
        solo, packed = [], []
        for p in prompts:
            for caches in (solo, packed):
                caches.append(PreallocatedCache(len(p) + 8))
                small.prefill(p, caches[-1])
        got = packed_pass(small.model, list(zip(news, packed)))
        for tokens, cache, logits in zip(news, solo, got):
            want = small.model(input_ids=torch.tensor([tokens]), cache=cache, use_cache=True).logits[0]
            assert logits.shape == want.shape and torch.allclose(logits, want, atol=1e-4)
            assert torch.equal(logits.argmax(-1), want.argmax(-1))
        assert [c.get_seq_length() for c in packed] == [c.get_seq_length() for c in solo]


def test_a_packed_pass_refuses_an_empty_row(small):
    with pytest.raises(ValueError, match="at least one new token"):
        packed_pass(small.model, [([], PreallocatedCache(4))])


@pytest.mark.parametrize("schedule", ["adaptive", "table"])
def test_requests_joining_and_leaving_each_get_their_own_greedy(tiny_models, small, schedule):
    """Five requests, joining at rounds 0, 0, 2, 5 and 9, with different budgets, stop
    strings and drafting modes: each emits what generate() gives it alone."""
    engine = SpeculativeEngine(small, costs=FLAT)
    prompts = _prompts(small)
    ref_text = tiny_models.expected("small", prompts[2], 30)[1]
    stop = (ref_text[10:13],) if len(ref_text) > 13 else ()
    plans = [(0, 0, Budget(max_new_tokens=24, eos_token_ids=()), Speculation(mode=schedule)),
             (1, 0, Budget(max_new_tokens=7, eos_token_ids=()), Speculation(mode=schedule, drafting="off")),
             (2, 2, Budget(max_new_tokens=30, stop_strings=stop, eos_token_ids=()), Speculation(mode=schedule)),
             (3, 5, Budget(max_new_tokens=40, eos_token_ids=()), Speculation(mode=schedule, drafting="ngram")),
             (4, 9, Budget(max_new_tokens=16, eos_token_ids=()),
              Speculation(mode="fixed", drafting="ngram", num_speculative_tokens=3))]
    joins: dict[int, list] = {}
    for key, at, budget, speculation in plans:
        config = GenerationConfig(budget=budget, speculation=speculation)
        joins.setdefault(at, []).append((key, prompts[key], config))
    events = _drive(engine.batch(), joins)
    batched = 0
    for key, _, budget, _ in plans:
        result = _result(events[key])
        ids, text, reason = tiny_models.expected("small", prompts[key], budget.max_new_tokens, eos=(),
                                                 stop_strings=budget.stop_strings)
        assert (result.token_ids, result.text, result.finish_reason) == (ids, text, reason), key
        batched = max(batched, result.stats.max_batch_size)
    assert batched >= 3


def test_random_batches_stay_exact(tiny_models):
    """Seeded property loop: random prompts, budgets, modes and join rounds on two models."""
    rng = random.Random(11)
    for name in ("small", "large"):
        target = tiny_models.load(name)
        engine = SpeculativeEngine(target, costs=FLAT)
        vocab = target.model.config.vocab_size
        joins: dict[int, list] = {}
        cases = []
        for key in range(6):
            pattern = [rng.randrange(vocab) for _ in range(rng.randint(1, 5))]
            prompt = (pattern * 12)[: rng.randint(3, 40)] if rng.random() < 0.6 else \
                [rng.randrange(vocab) for _ in range(rng.randint(1, 40))]
            budget = Budget(max_new_tokens=rng.randint(1, 30), eos_token_ids=())
            speculation = Speculation(drafting=rng.choice(["auto", "ngram", "off"]),
                                      num_speculative_tokens=rng.randint(1, 8), mode=rng.choice(["adaptive", "table"]))
            config = GenerationConfig(budget=budget, speculation=speculation)
            cases.append((key, prompt, config))
            joins.setdefault(rng.randint(0, 8), []).append((key, prompt, config))
        events = _drive(engine.batch(), joins)
        for key, prompt, config in cases:
            ids, _, reason = tiny_models.expected(name, prompt, config.budget.max_new_tokens, eos=())
            result = _result(events[key])
            assert (result.token_ids, result.finish_reason) == (ids, reason), (name, key, config)


def test_cancelling_one_request_leaves_the_others_exact(tiny_models, small):
    engine = SpeculativeEngine(small, costs=FLAT)
    prompts = _prompts(small)
    rounds = {"n": 0}

    def cancel_after_three() -> bool:
        rounds["n"] += 1
        return rounds["n"] > 3

    config = GenerationConfig(budget=Budget(max_new_tokens=30, eos_token_ids=()))
    events = _drive(engine.batch(), {0: [(0, prompts[0], config), (1, prompts[1], config, cancel_after_three),
                                         (2, prompts[3], config)]})
    cancelled = _result(events[1])
    assert cancelled.finish_reason == "cancelled"
    assert cancelled.token_ids == tiny_models.expected("small", prompts[1], 30, eos=())[0][:len(cancelled.token_ids)]
    for key, p in ((0, prompts[0]), (2, prompts[3])):
        assert _result(events[key]).token_ids == tiny_models.expected("small", p, 30, eos=())[0]


def test_a_seeded_sample_does_not_depend_on_who_shares_the_batch(tiny_models):
    micro = tiny_models.load("micro")
    engine = SpeculativeEngine(micro, costs=FLAT)
    prompt = micro.tokenizer.encode("disk node restart")
    config = GenerationConfig(budget=Budget(max_new_tokens=16, eos_token_ids=()),
                              sampling=Sampling(temperature=0.9, top_k=12, top_p=0.95, seed=7))
    alone = engine.generate(prompt, config).token_ids
    greedy = GenerationConfig(budget=Budget(max_new_tokens=20, eos_token_ids=()))
    others = [micro.tokenizer.encode(t) for t in ("ticket link", "queue storage pool drain")]
    events = _drive(engine.batch(), {0: [(0, others[0], greedy)], 1: [(1, prompt, config)],
                                     3: [(2, others[1], greedy)]})
    assert _result(events[1]).token_ids == alone
    assert _result(events[1]).stats.max_batch_size >= 2


def test_a_prompt_that_fills_the_context_is_refused_while_others_run(tiny_models, small):
    engine = SpeculativeEngine(small, costs=FLAT)
    batch = engine.batch()
    prompt = _prompts(small)[0]
    state, events = batch.add(prompt, GenerationConfig(budget=Budget(max_new_tokens=10, eos_token_ids=())))
    batch.step()
    with pytest.raises(PromptError, match="context window"):
        batch.add([1] * small.max_positions, GenerationConfig(budget=Budget(max_new_tokens=4)))
    assert len(batch) == 1
    while batch.active:
        events += [e for _, e in batch.step()]
    assert _result(events).token_ids == tiny_models.expected("small", prompt, 10, eos=())[0]


def test_streams_interleaved_in_one_thread_both_finish_exact(tiny_models, small):
    """No lock is held across a yield: two suspended streams of one engine take turns."""
    engine = SpeculativeEngine(small, costs=FLAT)
    prompts = _prompts(small)[:2]
    config = GenerationConfig(budget=Budget(max_new_tokens=20, eos_token_ids=()))
    streams = [engine.stream(p, config) for p in prompts]
    events: list[list] = [[], []]
    live = [True, True]
    for _ in range(200):
        for i, s in enumerate(streams):
            if live[i]:
                try:
                    events[i].append(next(s))
                except StopIteration:
                    live[i] = False
        if not any(live):
            break
    for p, ev in zip(prompts, events):
        assert _result(ev).token_ids == tiny_models.expected("small", p, 20, eos=())[0]


def test_streams_from_two_threads_both_finish_exact(tiny_models, small):
    engine = SpeculativeEngine(small, costs=FLAT)
    prompts = _prompts(small)[2:4]
    config = GenerationConfig(budget=Budget(max_new_tokens=20, eos_token_ids=()))
    results: dict[int, list[int]] = {}

    def run(i: int) -> None:
        results[i] = engine.generate(prompts[i], config).token_ids

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(not t.is_alive() for t in threads)
    for i, p in enumerate(prompts):
        assert results[i] == tiny_models.expected("small", p, 20, eos=())[0]


# -- γ from the batch's cost --------------------------------------------------------------------
def _curve(alpha: float, room: int) -> dict[int, tuple[float, float]]:
    return {g: (1 + sum(alpha ** k for k in range(1, g + 1)), 0.0) for g in range(1, room + 1)}


def test_alone_the_allocation_maximises_tokens_per_ms():
    cost = CostModel(verify_ms=(10, 10.5, 11, 11.5, 12, 20, 28, 36, 44)).verify
    got = allocate([_curve(0.8, 8)], cost)
    rates = {g: _curve(0.8, 8).get(g, (1.0, 0))[0] / cost(g + 1) for g in range(0, 9)}
    assert got.gammas == [max(rates, key=rates.get)] == [4]


def test_speculation_shrinks_as_the_batch_grows_and_stops():
    """A pass whose cost is flat up to 16 rows, then linear: drafting fills the spare rows."""
    def cost(rows: int) -> float:
        return 10.0 + max(0, rows - 16) * 1.0

    per_request = []
    for n in (1, 2, 4, 8, 16):
        got = allocate([_curve(0.7, 8)] * n, cost, max_rows=64, max_slowdown=1.5)
        per_request.append(sum(got.gammas) / n)
        assert got.round_ms <= 1.5 * cost(n)
    assert per_request == sorted(per_request, reverse=True)
    assert per_request[0] >= 4 and per_request[-1] == 0


def test_a_request_copying_a_long_span_drafts_more_than_one_on_generated_text():
    def cost(rows: int) -> float:
        return 10.0 + 0.8 * rows

    got = allocate([_curve(0.95, 8), _curve(0.2, 8)], cost)
    assert got.gammas[0] > got.gammas[1]


def test_linear_costs_never_draft_in_a_batch():
    got = allocate([_curve(0.7, 8)] * 4, lambda rows: 10.0 * rows)
    assert got.gammas == [0, 0, 0, 0]


@pytest.mark.parametrize("kwargs, match", [(dict(table=((0, 2),)), "batch size"), (dict(table=()), "batch size"),
                                           (dict(max_rows=0), "max_rows"), (dict(max_slowdown=0.5), "max_slowdown")])
def test_bad_batch_speculation_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BatchSpeculation(**kwargs)


def test_a_bad_speculation_mode_is_refused():
    with pytest.raises(ValueError, match="mode"):
        Speculation(mode="greedy")


def test_the_table_schedule_picks_the_largest_fitting_entry():
    spec = BatchSpeculation(table=((1, 6), (4, 2), (8, 0)))
    assert [spec.table_gamma(n) for n in (1, 3, 4, 7, 8, 30)] == [6, 6, 2, 2, 0, 0]


# -- costs learned online -------------------------------------------------------------------------
def test_a_cost_model_fed_skewed_start_up_timings_recovers():
    costs = OnlineCosts(tuple(261.0 * n for n in range(1, 18)))
    assert costs.estimate(4, 1000) == pytest.approx(1044)
    for ms in (62, 61, 400, 63, 62):  # one outlier among real single-token passes
        costs.observe(1, 1000, ms)
    assert costs.estimate(1, 1000) == 62  # the median ignores the outlier
    assert costs.estimate(4, 1000) == 62  # unmeasured sizes: optimistic, so the policy tries them
    costs.observe(5, 1000, 70)
    assert costs.estimate(5, 1000) == 70 and costs.estimate(3, 1000) == pytest.approx(66)
    assert costs.cost_model(1000, 6).verify_ms == (62, 64, 66, 68, 70, 70)


def test_old_samples_expire_so_a_size_is_retried():
    costs = OnlineCosts((10.0, 20.0), max_age=5)
    costs.observe(2, 0, 500.0)  # one unlucky pass
    for _ in range(6):
        costs.observe(1, 0, 10.0)
    assert costs.estimate(2, 0) == 10.0


@pytest.mark.parametrize("prior", [(), (1.0, float("nan")), (0.0,)])
def test_bad_priors_are_refused(prior):
    with pytest.raises(ValueError, match="prior"):
        OnlineCosts(prior)


def test_an_engine_calibrated_on_a_busy_machine_drafts_once_real_passes_say_so(tiny_models, small):
    """Start-up costs exactly linear in tokens (a busy machine): drafting never pays by them.
    The passes the engine runs are flat, so it learns to draft, and stays exact."""
    engine = SpeculativeEngine(small, config=EngineConfig(learn_costs=True),
                               costs=CostModel(tuple(261.0 * n for n in range(1, 18))))
    prompt = small.tokenizer.encode(TEXTS[4] * 3)
    config = GenerationConfig(budget=Budget(max_new_tokens=40, eos_token_ids=()))
    results = [engine.generate(prompt, config) for _ in range(3)]
    assert all(r.token_ids == tiny_models.expected("small", prompt, 40, eos=())[0] for r in results)
    assert engine.core.pass_costs.estimate(4, len(prompt)) < 261
    assert results[-1].stats.drafters.get("ngram") and results[-1].stats.tau > 1.0


def test_a_draft_not_yet_run_is_priced_at_the_targets_measured_level():
    """Calibrated on a busy machine, both models look 4x slower than they are; once the target's
    real passes show it, the draft's prior is scaled the same way before it ever runs."""
    target = OnlineCosts((100.0, 104.0))
    draft = OnlineCosts((40.0,), reference=target)
    assert draft.estimate(1, 0) == 40.0
    for _ in range(3):
        target.observe(1, 1024, 25.0)
    assert target.level() == pytest.approx(0.25) and draft.estimate(1, 0) == pytest.approx(10.0)
    draft.observe(1, 0, 12.0)
    assert draft.estimate(1, 0) == 12.0  # its own passes win once measured


# -- the draft model in a batch -------------------------------------------------------------------
CHEAP_DRAFT = CostModel(verify_ms=(1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12, 1.14, 1.16), draft_step_ms=0.05)


@pytest.mark.parametrize("draft_name", ["small_trunc", "small_noisy"])  # own KV cache / the target's layout
def test_draft_model_proposals_in_a_batch_share_each_draft_pass(tiny_models, small, draft_name, monkeypatch):
    import decoding.backends.packed_pass as packed

    calls = []
    real = packed.packed_pass
    monkeypatch.setattr(packed, "packed_pass", lambda model, rows, last_only=False: calls.append(
        (model, len(rows), last_only)) or real(model, rows, last_only))
    draft = tiny_models.load(draft_name)
    engine = SpeculativeEngine(small, draft, config=EngineConfig(draft_min_confidence=0.0), costs=CHEAP_DRAFT)
    prompts = _prompts(small)
    config = GenerationConfig(budget=Budget(max_new_tokens=20, eos_token_ids=()),
                              speculation=Speculation(drafting="draft_model", num_speculative_tokens=4, mode="fixed"))
    events = _drive(engine.batch(), {0: [(0, prompts[0], config), (1, prompts[1], config)],
                                     2: [(2, prompts[2], config)]})
    for key in range(3):
        result = _result(events[key])
        assert result.token_ids == tiny_models.expected("small", prompts[key], 20, eos=())[0]
        assert result.stats.drafters["draft_model"].proposed > 0
    assert any(m is draft.model and n >= 2 and last for m, n, last in calls)  # drafted together


def test_proposing_together_gives_what_each_would_propose_alone(tiny_models, small):
    from decoding.drafters.base import DraftRequest
    from decoding.drafters.draft_model import DraftModelDrafter

    draft = tiny_models.load("small_trunc")
    prompts = _prompts(small)[:3]

    def started(prompt):
        d = DraftModelDrafter(draft, small, min_confidence=0.0, step_ms=0.05)
        d.begin(DraftRequest(prompt, prefill_draft=True))
        return d

    alone = [started(p).propose(5, [7]).tokens for p in prompts]
    together = DraftModelDrafter.propose_together([(started(p), 5, [7]) for p in prompts])
    assert [d.tokens for d in together] == alone and all(len(a) == 5 for a in alone)
