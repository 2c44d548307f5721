"""Edge cases of the draft-model drafter: vocabularies, its own KV cache in sync with the
target's, drafting over the target's verified KV (split from test_decoding_edge_cases.py)."""

from __future__ import annotations

import pytest
import torch
from decoding_edges import CHEAP, MODES, check, prompt_of  # noqa: E402 (tests/ is on sys.path)

from decoding import Budget, GenerationConfig, Sampling, Speculation, SpeculativeEngine
from decoding.core import EngineConfig
from decoding.drafters.base import DraftRequest
from decoding.drafters.draft_model import DraftModelDrafter, VocabularyMismatchError
from decoding.kv.cache import PreallocatedCache

pytestmark = pytest.mark.usefixtures("torch_one_thread")
pytest_plugins = ["decoding_edges"]  # the fixtures small and engine

# -- draft models ---------------------------------------------------------------------------------
def test_vocabulary_mismatch_names_both_models(tiny_models, small):
    other = tiny_models.load("other_vocab")
    with pytest.raises(VocabularyMismatchError) as err:
        SpeculativeEngine(small, other, costs=CHEAP)
    assert small.name in str(err.value) and other.name in str(err.value)


def test_draft_model_mode_needs_a_draft_model(small):
    engine = SpeculativeEngine(small, costs=CHEAP)
    with pytest.raises(ValueError, match="draft model"):
        engine.generate([1, 2, 3], GenerationConfig(budget=Budget(max_new_tokens=5),
                                                    speculation=Speculation(drafting="draft_model")))


@pytest.mark.parametrize("name", ["small", "large"])
def test_target_as_its_own_draft_model(tiny_models, name):
    """A perfect draft model: α ≈ 1 and τ close to γ + 1 (the draft starts from the target's
    prompt KV cache and must stay in sync through every round)."""
    target = tiny_models.load(name)
    engine = SpeculativeEngine(target, target, config=EngineConfig(draft_min_confidence=0.0), costs=CHEAP)
    gamma = 5
    for text in ("the disk is full; restart xrootd", "café ✓ the ticket is fixed"):
        prompt = target.tokenizer.encode(text)
        budget = 1 + 6 * (gamma + 1)
        config = GenerationConfig(budget=Budget(max_new_tokens=budget, eos_token_ids=()),
                                  speculation=Speculation(drafting="draft_model", num_speculative_tokens=gamma))
        result = check(tiny_models, engine, prompt, config, name=name)
        assert result.stats.drafters["draft_model"].alpha >= 0.95
        assert result.stats.tau >= 0.9 * (gamma + 1)


@pytest.mark.parametrize("draft_name", ["small_trunc", "small_noisy", "small"])
def test_draft_model_drafter_stays_in_sync(tiny_models, small, draft_name):
    """After any mix of accepted, rejected and externally committed tokens (rounds drafted by
    the n-gram drafter), a proposal equals the draft model's own greedy continuation of the
    committed sequence."""
    draft = tiny_models.load(draft_name)
    shares_prefill = draft_name != "small_trunc"
    drafter = DraftModelDrafter(draft, small, min_confidence=0.0)
    assert drafter.use_target_cache == shares_prefill
    prompt = prompt_of(small)
    target_cache = None
    if shares_prefill:  # the engine hands over the target's prompt KV cache
        target_cache = PreallocatedCache(len(prompt) + 8)
        with torch.inference_mode():
            small.model(input_ids=torch.tensor([prompt]), cache=target_cache, use_cache=True)
    drafter.begin(DraftRequest(prompt, [], target_cache))
    # The "truth" for a shared-prefill draft: its cache holds the *target's* prompt KV, which
    # equals its own only when the draft is the target; otherwise check consistency with itself.
    committed = list(prompt)
    plan = [(3, [11]), (5, [2, 2, 7]), (1, []), (4, [30, 31]), (6, [9]), (2, [4, 4, 4, 4, 4]), (8, [])]
    for gamma, external in plan:
        proposal = drafter.propose(gamma).tokens
        assert len(proposal) == gamma
        if draft_name != "small_noisy":
            expected = tiny_models.greedy(draft_name, committed, gamma)
            assert proposal == expected, (committed, gamma)
        # commit part of the proposal (as if verified) plus some tokens the drafter never proposed
        new = proposal[: gamma // 2] + external
        drafter.observe(new)
        committed += new
    # Resynchronising a fresh drafter on the same committed sequence gives the same proposal.
    fresh = DraftModelDrafter(draft, small, min_confidence=0.0, use_target_cache=False)
    fresh.begin(DraftRequest(committed, [], None))
    if draft_name != "small_noisy":
        assert drafter.propose(4).tokens == fresh.propose(4).tokens


def test_draft_model_drafts_over_the_targets_verified_kv_and_prices_what_it_feeds(tiny_models, small, monkeypatch):
    """A draft with the target's KV layout keeps no cache of its own: it attends to the K/V the
    target verified, feeds only the newest committed token (plus the round's earlier span), leaves
    the target's cache exactly as it found it, and its offer prices what it feeds."""
    draft = tiny_models.load("small")  # the target itself: its proposals are greedy's
    feed = (10.0, 13.0, 15.0, 17.0, 30.0, 40.0)
    drafter = DraftModelDrafter(draft, small, min_confidence=0.0, step_ms=10.0, feed_ms=feed)
    prompt = prompt_of(small)
    target_cache = PreallocatedCache(len(prompt) + 32)
    with torch.inference_mode():
        small.model(input_ids=torch.tensor([prompt]), cache=target_cache, use_cache=True)
    before = [layer.keys.clone() for layer in target_cache.layers]
    drafter.begin(DraftRequest(prompt, [], target_cache))
    fed = []
    forward = drafter._forward
    monkeypatch.setattr(drafter, "_forward", lambda ids, cache: fed.append(list(ids)) or forward(ids, cache))
    first = tiny_models.greedy("small", prompt, 1)
    drafter.observe(first)  # the prefill's token: not yet in the target's cache
    assert drafter.offer(4).setup_ms == 0.0 and drafter.offer(4, after=[5, 6]).setup_ms == 15.0 - 10.0
    assert drafter.propose(3).tokens == tiny_models.greedy("small", prompt + first, 3)
    assert fed[0] == first and drafter._cache is None  # no prefill, no cache of its own
    assert target_cache.get_seq_length() == len(prompt)
    assert all(torch.equal(a, layer.keys) for a, layer in zip(before, target_cache.layers))
    # Another drafter's round: 5 tokens committed, the target's cache verified all but the newest.
    committed = prompt + first
    new = tiny_models.greedy("small", committed, 5)
    with torch.inference_mode():
        small.model(input_ids=torch.tensor([[committed[-1]] + new[:-1]]), cache=target_cache, use_cache=True)
    drafter.observe(new)
    committed += new
    assert drafter.offer(4).setup_ms == 0.0  # nothing to feed but the newest token
    fed.clear()
    assert drafter.propose(4, after=[7, 8]).tokens == tiny_models.greedy("small", committed + [7, 8], 4)
    assert fed[0] == [new[-1], 7, 8] and target_cache.get_seq_length() == len(committed) - 1
    # Without the target's cache the lacking committed tokens are fed, and priced.
    alone = DraftModelDrafter(draft, small, min_confidence=0.0, step_ms=10.0, feed_ms=feed,
                              use_target_cache=False)
    alone.begin(DraftRequest(prompt, [], None))
    alone.observe(first)
    n = len(prompt) + 1
    assert alone.offer(4).setup_ms == pytest.approx(40.0 * n / len(feed) - 10.0)


def test_draft_model_stops_below_min_confidence(tiny_models, small):
    draft = tiny_models.load("small_trunc")
    prompt = prompt_of(small)
    never = DraftModelDrafter(draft, small, min_confidence=1.01)
    never.begin(DraftRequest(prompt, [], None))
    assert never.propose(6).tokens == []
    with torch.inference_mode():
        probs = torch.softmax(draft.model(torch.tensor([prompt])).logits[0, -1], -1)
    threshold = float(probs.max()) + 1e-6  # the first step is just below the bar
    picky = DraftModelDrafter(draft, small, min_confidence=threshold)
    picky.begin(DraftRequest(prompt, [], None))
    assert picky.propose(6).tokens == []
    some = DraftModelDrafter(draft, small, min_confidence=float(probs.max()) - 1e-6)
    some.begin(DraftRequest(prompt, [], None))
    got = some.propose(6).tokens
    assert 1 <= len(got) and got == tiny_models.greedy("small_trunc", prompt, len(got))


def test_draft_model_with_a_shorter_context_window(tiny_models, small, monkeypatch):
    """Calibration and drafting stay inside the draft's window; past it the draft model is
    not asked and the output is still plain greedy."""
    draft = tiny_models.load("small_trunc")
    monkeypatch.setattr(draft, "max_positions", 40)  # as read from a config with max_position_embeddings=40
    seen = []
    forward = draft.model.forward

    def recording_forward(input_ids, cache=None, **kw):
        seen.append(cache.get_seq_length() + input_ids.shape[1])
        return forward(input_ids=input_ids, cache=cache, **kw)

    monkeypatch.setattr(draft.model, "forward", recording_forward)
    engine = SpeculativeEngine(small, draft,
                               config=EngineConfig(num_speculative_tokens=4))  # calibrates with the draft too
    prompt = prompt_of(small)
    seen.clear()
    config = GenerationConfig(budget=Budget(max_new_tokens=50, eos_token_ids=()),
                              speculation=Speculation(drafting="draft_model", mode="fixed", num_speculative_tokens=4))
    result = engine.generate(prompt, config)
    assert result.token_ids == tiny_models.greedy("small", prompt, 50)
    assert seen and max(seen) <= 40


def test_generation_config_rejects_bad_values():
    for kind, bad in ((Budget, dict(max_new_tokens=-1)), (Sampling, dict(temperature=-0.5)),
                      (Sampling, dict(top_p=0.0)), (Sampling, dict(top_k=-1)), (Speculation, dict(drafting="fast")),
                      (Speculation, dict(num_speculative_tokens=0)), (Speculation, dict(mode="fixed")),
                      (Speculation, dict(mode="fixed", drafting="off")), (Speculation, dict(mode="fast")),
                      (Budget, dict(stop_strings=("",)))):
        with pytest.raises(ValueError):
            kind(**bad)
    for kind, bad in ((Speculation, dict(num_speculative_tokens=2.0)), (Sampling, dict(temperature=True)),
                      (Sampling, dict(top_p="0.9")), (Budget, dict(max_new_tokens=2.0)),
                      (Budget, dict(eos_token_ids=5)), (Budget, dict(eos_token_ids=(True,))),
                      (Budget, dict(stop_strings=[1])),
                      (Budget, dict(stop_strings=("a", None))), (Sampling, dict(seed=True)),
                      (GenerationConfig, dict(budget=Sampling()))):
        with pytest.raises(TypeError):
            kind(**bad)
    import numpy as np

    GenerationConfig(budget=Budget(max_new_tokens=np.int64(5), eos_token_ids=[2]),
                     sampling=Sampling(seed=np.int64(3), temperature=np.float32(0.5)))


@pytest.mark.parametrize("target_name,draft_name", [("small", "small_padded"), ("small_padded", "small")])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_draft_model_with_a_differently_padded_vocabulary(tiny_models, target_name, draft_name, temperature):
    """Same tokenizer, different embedding sizes (e.g. Qwen2.5-0.5B: 151936 rows, -7B: 152064):
    greedy stays exact and sampling works."""
    target, draft = tiny_models.load(target_name), tiny_models.load(draft_name)
    assert target.model.config.vocab_size != draft.model.config.vocab_size
    engine = SpeculativeEngine(target, draft, config=EngineConfig(draft_min_confidence=0.0), costs=CHEAP)
    prompt = prompt_of(target)
    for mode in ("draft_model", "auto"):
        config = GenerationConfig(budget=Budget(max_new_tokens=30, eos_token_ids=()),
                                  speculation=Speculation(drafting=mode),
                                  sampling=Sampling(temperature=temperature, seed=3))
        result = engine.generate(prompt, config)
        assert len(result.token_ids) == 30 and result.stats.drafters["draft_model"].proposed > 0
        if target_name == "small":  # the draft never proposes ids past the target's vocabulary
            assert all(t < len(target.tokenizer) for t in result.token_ids)
        if temperature == 0.0:
            assert result.token_ids == tiny_models.greedy(target_name, prompt, 30)


def test_draft_model_in_another_dtype(tiny_models, small):
    """A bfloat16 draft for a float32 target: its own prefill, and the output is still greedy."""
    from decoding.backends.models import load_model

    draft = load_model(str(tiny_models.path("small_trunc")), device="cpu", dtype="bfloat16")
    engine = SpeculativeEngine(small, draft, config=EngineConfig(draft_min_confidence=0.0), costs=CHEAP)
    prompt = prompt_of(small)
    for mode in ("draft_model", "auto"):
        check(tiny_models, engine, prompt, GenerationConfig(budget=Budget(max_new_tokens=30, eos_token_ids=()),
                                                            speculation=Speculation(drafting=mode)))
    sampled = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=20, eos_token_ids=()),
                                                       speculation=Speculation(drafting="draft_model"),
                                                       sampling=Sampling(temperature=1.0, seed=0)))
    assert len(sampled.token_ids) == 20


def test_draft_model_skips_drafting_after_an_id_it_does_not_have(tiny_models):
    """The target (padded vocabulary) emitted an id past the draft's embedding: no crash, no draft."""
    target, draft = tiny_models.load("small_padded"), tiny_models.load("small")
    drafter = DraftModelDrafter(draft, target, min_confidence=0.0)
    drafter.begin(DraftRequest([5, 6, 7], [], None))
    assert len(drafter.propose(3).tokens) == 3
    drafter.observe([8, 70])
    assert drafter.propose(3).tokens == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_on_cuda(tiny_models, dtype):
    """On the GPU: fp32 output equals plain greedy; bf16 runs (its near-tie divergences are
    measured by the exactness eval, not asserted here); calibration and sampling work."""
    from decoding.backends.models import load_model

    target = load_model(str(tiny_models.path("small")), device="cuda", dtype=dtype)
    draft = load_model(str(tiny_models.path("small_trunc")), device="cuda", dtype=dtype)
    engine = SpeculativeEngine(target, draft,
                               config=EngineConfig(num_speculative_tokens=4, draft_min_confidence=0.0))  # calibrates
    prompt = prompt_of(target)
    with torch.inference_mode():
        ref = target.model.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=30, do_sample=False,
                                    eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    for mode in MODES:
        result = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=30, eos_token_ids=()),
                                                          speculation=Speculation(drafting=mode)),
                                 contexts=[ref[3:]])
        assert len(result.token_ids) == 30
        if dtype == "float32":
            assert result.token_ids == ref, mode
    sampled = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=20, eos_token_ids=()),
                                                       sampling=Sampling(temperature=1.0, seed=0)))
    assert len(sampled.token_ids) == 20


def test_draft_model_mode_without_a_draft_model_is_a_clear_error(small):
    no_draft = SpeculativeEngine(small, costs=CHEAP)
    with pytest.raises(ValueError, match="needs a draft model"):
        no_draft.generate([5, 6, 7], GenerationConfig(budget=Budget(max_new_tokens=4),
                                                      speculation=Speculation(drafting="draft_model")))


@pytest.mark.parametrize("draft_name", ["small_trunc", "small"])
def test_draft_model_continues_a_span_proposed_before_it(tiny_models, small, draft_name):
    """``propose(γ, after=span)`` is the draft's greedy continuation of committed + span, and
    the drafter resynchronises afterwards (the span's tokens were never committed)."""
    draft = tiny_models.load(draft_name)
    drafter = DraftModelDrafter(draft, small, min_confidence=0.0, step_ms=2.0)
    prompt = prompt_of(small)
    drafter.begin(DraftRequest(prompt))
    span = [11, 12, 13]
    offer = drafter.offer(5, after=span)
    assert (offer.drafter, offer.max_tokens, offer.state, offer.step_ms) == ("draft_model", 5, (), 2.0)
    assert drafter.propose(5, after=span).tokens == tiny_models.greedy(draft_name, prompt + span, 5)
    drafter.observe([11, 40])  # the span's first token accepted, then the target's correction
    assert drafter.propose(4).tokens == tiny_models.greedy(draft_name, prompt + [11, 40], 4)
    window = draft.max_positions
    assert drafter.offer(window, after=span).max_tokens == window - len(prompt) - 2 - len(span)
