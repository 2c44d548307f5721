"""Engine edge cases on tiny random Llama models: prompts, budgets, EOS, context window,
custom drafters (always wrong, oracle), draft models (mismatch, sync, the target as draft)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from decoding import GenerationConfig, SpeculativeEngine
from decoding.draft_model_drafter import DraftModelDrafter, VocabularyMismatchError
from decoding.drafter import DraftRequest
from decoding.engine import PromptError
from decoding.kv_cache import PreallocatedCache
from decoding.models import LoadedModel
from decoding.policy import CostModel

pytestmark = pytest.mark.usefixtures("torch_one_thread")

CHEAP = CostModel(verify_ms=(1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07, 1.08, 1.09, 1.1, 1.11), draft_step_ms=0.01)
MODES = ("off", "ngram", "draft_model", "auto")


@pytest.fixture(scope="module")
def small(tiny_models):
    return tiny_models.load("small")


@pytest.fixture(scope="module")
def engine(tiny_models, small):
    """Small target with a truncated (own-prefill) draft model; every drafter always drafts."""
    return SpeculativeEngine(small, tiny_models.load("small_trunc"), costs=CHEAP, draft_min_confidence=0.0)


def prompt_of(small, text="the disk is full; restart xrootd") -> list[int]:
    return small.tokenizer.encode(text)


def check(tiny_models, engine, prompt, config, contexts=(), name="small"):
    result = engine.generate(prompt, config, contexts)
    ids, text, reason = tiny_models.expected(name, prompt, config.max_new_tokens, config.eos_token_ids,
                                             config.stop_strings)
    assert (result.token_ids, result.text, result.finish_reason) == (ids, text, reason), config
    return result


# -- prompts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt", [[], ()])
def test_empty_prompt_is_a_clear_error(engine, prompt):
    with pytest.raises(PromptError, match="empty"):
        engine.generate(prompt, GenerationConfig(max_new_tokens=4))
    with pytest.raises(PromptError):
        next(iter(engine.stream(prompt)))


@pytest.mark.parametrize("prompt", [[-1, 3], [3, 10**6]])
def test_prompt_ids_outside_the_vocabulary_are_a_clear_error(engine, prompt):
    with pytest.raises(PromptError, match="vocabulary"):
        engine.generate(prompt, GenerationConfig(max_new_tokens=4))


@pytest.mark.parametrize("context", [[3, 4, 10**6], [-1], [3, 2**63]])
def test_context_ids_outside_the_vocabulary_are_a_clear_error(engine, context):
    with pytest.raises(PromptError, match="context token ids outside the vocabulary"):
        engine.generate([3, 4], GenerationConfig(max_new_tokens=4), contexts=[[5, 6], context])


@pytest.mark.parametrize("mode", MODES)
def test_one_token_prompt(tiny_models, engine, mode):
    for token in (5, 17, 40):
        check(tiny_models, engine, [token], GenerationConfig(max_new_tokens=30, drafting=mode, eos_token_ids=()))


@pytest.mark.parametrize("mode", ["ngram", "auto"])
def test_prompt_shorter_than_ngram_size(tiny_models, small, mode):
    engine = SpeculativeEngine(small, costs=CHEAP, max_ngram=6, min_ngram=4)
    for prompt in ([7], [7, 9], [7, 9, 7]):
        check(tiny_models, engine, prompt, GenerationConfig(max_new_tokens=30, drafting=mode, eos_token_ids=()))


def test_match_only_at_the_very_end_of_the_context(tiny_models, small):
    """Passages whose only match with the prompt's suffix sits at their very end (no or one
    continuation token) must not break anything; the output stays greedy."""
    engine = SpeculativeEngine(small, costs=CHEAP, max_ngram=3, min_ngram=2)
    prompt = prompt_of(small)
    ref = tiny_models.greedy("small", prompt, 30)
    contexts = [[1, 2, 3] + prompt[-3:], [4] + prompt[-2:] + ref[:1], prompt[-2:]]
    result = check(tiny_models, engine, prompt,
                   GenerationConfig(max_new_tokens=30, drafting="ngram", eos_token_ids=()), contexts)
    assert result.stats.drafters["ngram"].proposed >= 1


def test_prompt_filling_the_context_window_is_a_clear_error(engine, small):
    max_pos = small.max_positions
    for n in (max_pos, max_pos + 5):
        with pytest.raises(PromptError, match="context window"):
            engine.generate([3] * n, GenerationConfig(max_new_tokens=4))


@pytest.mark.parametrize("mode", MODES)
def test_output_clipped_at_the_context_window(tiny_models, engine, small, mode):
    max_pos = small.max_positions
    for prompt_len in (max_pos - 1, max_pos - 2, max_pos - 13):
        prompt = [(7 * i) % 50 + 1 for i in range(prompt_len)]
        ids, _, _ = tiny_models.expected("small", prompt, 100, ())
        seen = []
        hook = small.model.register_forward_pre_hook(
            lambda mod, args, kw, seen=seen: seen.append(kw.get("past_key_values", kw.get("cache")).get_seq_length()
                                                         + kw["input_ids"].shape[1]),
            with_kwargs=True)
        try:
            config = GenerationConfig(max_new_tokens=100, drafting=mode, eos_token_ids=(), num_speculative_tokens=10)
            result = engine.generate(prompt, config, contexts=[ids])
        finally:
            hook.remove()
        assert result.token_ids == ids and len(ids) == max_pos - prompt_len and result.finish_reason == "length"
        assert max(seen) <= max_pos  # no pass ever ran past the context window


def test_oracle_drafts_are_clipped_to_the_context_window(scripted_target, scripted_engine, small):
    """A drafter that always proposes 10 tokens never makes the target look past max positions."""
    continuation = [(3 * i) % 40 + 1 for i in range(200)]
    prompt = [5] * 40
    target = scripted_target(small.tokenizer, prompt, continuation, max_positions=64)
    engine = scripted_engine(target, lambda out: continuation[len(out):])
    result = engine.generate(prompt, GenerationConfig(max_new_tokens=100, drafting="ngram", num_speculative_tokens=10,
                                                      fixed_gamma=True))
    assert result.token_ids == continuation[:24] and result.finish_reason == "length"
    assert target.model.max_seen <= 64


# -- budgets ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [*MODES, "oracle"])
@pytest.mark.parametrize("budget", [0, 1, 2])
def test_tiny_budgets_with_drafts_of_ten(tiny_models, engine, scripted_engine, small, mode, budget):
    prompt = prompt_of(small)
    ref = tiny_models.greedy("small", prompt, 20)
    if mode == "oracle":
        engine = scripted_engine(small, lambda out: ref[len(out):])
        mode = "ngram"
    config = GenerationConfig(max_new_tokens=budget, drafting=mode, num_speculative_tokens=10, eos_token_ids=(),
                              fixed_gamma=mode in ("ngram", "draft_model"))
    result = check(tiny_models, engine, prompt, config, contexts=[ref])
    assert len(result.token_ids) == budget
    assert result.stats.target_passes == max(budget - 1, 0)  # decode passes; the prefill yields token 1
    assert all(d.proposed == 0 for d in result.stats.drafters.values())  # no room left to draft


# -- EOS ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["oracle", "ngram", "draft_model", "auto"])
def test_eos_inside_a_drafted_block(tiny_models, small, scripted_engine, mode):
    """The first EOS in a verified block ends the output there, even with accepted drafts after it."""
    prompt = prompt_of(small, "café ✓ the ticket is fixed")
    ref = tiny_models.greedy("small", prompt, 40)
    pos = next(i for i in range(8, 40) if ref[i] not in ref[:i])  # first occurrence of ref[pos]
    eos = ref[pos]
    if mode == "oracle":
        engine = scripted_engine(small, lambda out: ref[len(out):])
        mode = "ngram"
    else:  # the target itself as draft model: its drafts run past the EOS too
        engine = SpeculativeEngine(small, small, costs=CHEAP, draft_min_confidence=0.0)
    config = GenerationConfig(max_new_tokens=40, drafting=mode, eos_token_ids=(eos,), num_speculative_tokens=10)
    result = check(tiny_models, engine, prompt, config, contexts=[ref])
    assert result.token_ids == ref[: pos + 1] and result.finish_reason == "eos"
    assert max(result.stats.block_sizes) > 1  # speculation did commit several tokens per pass


def test_eos_none_configured(tiny_models, small, engine, monkeypatch):
    """``eos_token_ids=()`` disables EOS even when the model has one; ``None`` uses the model's."""
    prompt = prompt_of(small)
    ref = tiny_models.greedy("small", prompt, 30)
    pos = next(i for i in range(3, 30) if ref[i] not in ref[:i])
    monkeypatch.setattr(small.model.generation_config, "eos_token_id", [ref[pos], 999])
    assert small.eos_token_ids() == (ref[pos], 999)
    for mode in MODES:
        with_model_eos = engine.generate(prompt, GenerationConfig(max_new_tokens=30, drafting=mode))
        assert with_model_eos.token_ids == ref[: pos + 1] and with_model_eos.finish_reason == "eos"
        without = engine.generate(prompt, GenerationConfig(max_new_tokens=30, drafting=mode, eos_token_ids=()))
        assert without.token_ids == ref and without.finish_reason == "length"


def test_model_without_any_eos_id():
    def loaded(gen_eos, tok_eos):
        return LoadedModel(SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=gen_eos)),
                           SimpleNamespace(eos_token_id=tok_eos), "m")

    assert loaded(None, None).eos_token_ids() == ()
    assert loaded(None, 3).eos_token_ids() == (3,)
    assert loaded([1, 2], 3).eos_token_ids() == (1, 2)


def test_stop_string_split_across_tokens(tiny_models, small):
    """A stop string made of the end of one token and the start of the next."""
    engine = SpeculativeEngine(small, tiny_models.load("small_noisy"), costs=CHEAP, draft_min_confidence=0.0)
    tok = small.tokenizer
    checked = 0
    for text in ("the disk is full; restart xrootd", "café ✓ the ticket is fixed", "restart the disk now"):
        prompt = tok.encode(text)
        ref = tiny_models.greedy("small", prompt, 40)
        pieces = [tok.decode([t]) for t in ref]
        for i in range(2, 39):
            a, b = pieces[i], pieces[i + 1]
            stop, head = a[-1:] + b[:1], tok.decode(ref[: i + 1])
            if len(a) >= 2 and b and "\ufffd" not in a + b and tok.decode(ref[: i + 2]).find(stop) == len(head) - 1:
                break
        else:
            continue
        for mode in MODES:
            config = GenerationConfig(max_new_tokens=40, drafting=mode, stop_strings=(stop,), eos_token_ids=())
            result = check(tiny_models, engine, prompt, config, contexts=[ref])
            assert result.finish_reason == "stop" and result.token_ids == ref[: i + 2], (text, stop)
            assert result.text == head[:-1]
        checked += 1
    assert checked >= 2


# -- custom drafters ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["small", "large"])
def test_always_wrong_drafter_gives_plain_greedy(tiny_models, scripted_engine, name):
    target = tiny_models.load(name)
    vocab = target.model.config.vocab_size
    for text in ("the disk is full", "restart xrootd now"):
        prompt = target.tokenizer.encode(text)
        ref = tiny_models.greedy(name, prompt, 40)
        engine = scripted_engine(target, lambda out, ref=ref: [(t + 1) % vocab for t in ref[len(out):]])
        config = GenerationConfig(max_new_tokens=40, drafting="ngram", num_speculative_tokens=10, eos_token_ids=(),
                                  fixed_gamma=True)
        result = check(tiny_models, engine, prompt, config, name=name)
        stats = result.stats.drafters["ngram"]
        assert stats.proposed > 0 and stats.accepted == 0 and result.stats.tau == 1.0


@pytest.mark.parametrize("gamma", [1, 4, 10])
def test_oracle_drafter_reaches_gamma_plus_one(tiny_models, scripted_engine, small, gamma):
    prompt = prompt_of(small)
    budget = 1 + 4 * (gamma + 1)  # the prefill token + four full rounds
    ref = tiny_models.greedy("small", prompt, budget)
    engine = scripted_engine(small, lambda out: ref[len(out):])
    config = GenerationConfig(max_new_tokens=budget, drafting="ngram", num_speculative_tokens=gamma, eos_token_ids=(),
                              fixed_gamma=True)
    result = check(tiny_models, engine, prompt, config)
    assert result.stats.drafters["ngram"].alpha == 1.0
    assert result.stats.tau == gamma + 1 and result.stats.target_passes == 4


def test_oracle_drafter_under_the_policy(tiny_models, scripted_engine, small):
    """With the cost-aware policy an always-right drafter is kept and γ grows to the ceiling."""
    prompt = prompt_of(small)
    ref = tiny_models.greedy("small", prompt, 60)
    engine = scripted_engine(small, lambda out: ref[len(out):], costs=CHEAP)
    config = GenerationConfig(max_new_tokens=60, drafting="auto", num_speculative_tokens=8, eos_token_ids=())
    result = check(tiny_models, engine, prompt, config)
    assert result.stats.tau > 6 and result.stats.drafters["ngram"].alpha == 1.0


def test_cancel_between_rounds(engine, small):
    calls = []
    result = engine.generate(prompt_of(small), GenerationConfig(max_new_tokens=30, eos_token_ids=()),
                             cancel=lambda: calls.append(1) or len(calls) > 2)
    assert result.finish_reason == "cancelled" and 1 <= len(result.token_ids) < 30


# -- draft models ---------------------------------------------------------------------------------
def test_vocabulary_mismatch_names_both_models(tiny_models, small):
    other = tiny_models.load("other_vocab")
    with pytest.raises(VocabularyMismatchError) as err:
        SpeculativeEngine(small, other, costs=CHEAP)
    assert small.name in str(err.value) and other.name in str(err.value)


def test_draft_model_mode_needs_a_draft_model(small):
    engine = SpeculativeEngine(small, costs=CHEAP)
    with pytest.raises(ValueError, match="draft model"):
        engine.generate([1, 2, 3], GenerationConfig(max_new_tokens=5, drafting="draft_model"))


@pytest.mark.parametrize("name", ["small", "large"])
def test_target_as_its_own_draft_model(tiny_models, name):
    """A perfect draft model: α ≈ 1 and τ close to γ + 1 (the draft starts from the target's
    prompt KV cache and must stay in sync through every round)."""
    target = tiny_models.load(name)
    engine = SpeculativeEngine(target, target, costs=CHEAP, draft_min_confidence=0.0)
    gamma = 5
    for text in ("the disk is full; restart xrootd", "café ✓ the ticket is fixed"):
        prompt = target.tokenizer.encode(text)
        budget = 1 + 6 * (gamma + 1)
        config = GenerationConfig(max_new_tokens=budget, drafting="draft_model", num_speculative_tokens=gamma,
                                  eos_token_ids=())
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
    monkeypatch.setattr(draft.model.config, "max_position_embeddings", 40)
    seen = []
    forward = draft.model.forward

    def recording_forward(input_ids, cache=None, **kw):
        seen.append(cache.get_seq_length() + input_ids.shape[1])
        return forward(input_ids=input_ids, cache=cache, **kw)

    monkeypatch.setattr(draft.model, "forward", recording_forward)
    engine = SpeculativeEngine(small, draft, max_speculative_tokens=4)  # calibrates with the draft too
    prompt = prompt_of(small)
    seen.clear()
    config = GenerationConfig(max_new_tokens=50, drafting="draft_model", fixed_gamma=True,
                              num_speculative_tokens=4, eos_token_ids=())
    result = engine.generate(prompt, config)
    assert result.token_ids == tiny_models.greedy("small", prompt, 50)
    assert seen and max(seen) <= 40


def test_generation_config_rejects_bad_values():
    for bad in (dict(max_new_tokens=-1), dict(temperature=-0.5), dict(top_p=0.0), dict(top_k=-1),
                dict(drafting="fast"), dict(num_speculative_tokens=0), dict(fixed_gamma=True),
                dict(fixed_gamma=True, drafting="off"), dict(stop_strings=("",))):
        with pytest.raises(ValueError):
            GenerationConfig(**bad)
    for bad in (dict(fixed_gamma=1, drafting="ngram"), dict(temperature=True), dict(top_p="0.9"),
                dict(max_new_tokens=2.0), dict(eos_token_ids=5), dict(eos_token_ids=(True,)), dict(stop_strings=[1]),
                dict(stop_strings=("a", None)), dict(seed=True)):
        with pytest.raises(TypeError):
            GenerationConfig(**bad)
    import numpy as np

    GenerationConfig(max_new_tokens=np.int64(5), seed=np.int64(3), temperature=np.float32(0.5), eos_token_ids=[2])


@pytest.mark.parametrize("target_name,draft_name", [("small", "small_padded"), ("small_padded", "small")])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_draft_model_with_a_differently_padded_vocabulary(tiny_models, target_name, draft_name, temperature):
    """Same tokenizer, different embedding sizes (e.g. Qwen2.5-0.5B: 151936 rows, -7B: 152064):
    greedy stays exact and sampling works."""
    target, draft = tiny_models.load(target_name), tiny_models.load(draft_name)
    assert target.model.config.vocab_size != draft.model.config.vocab_size
    engine = SpeculativeEngine(target, draft, costs=CHEAP, draft_min_confidence=0.0)
    prompt = prompt_of(target)
    for mode in ("draft_model", "auto"):
        config = GenerationConfig(max_new_tokens=30, drafting=mode, temperature=temperature, seed=3, eos_token_ids=())
        result = engine.generate(prompt, config)
        assert len(result.token_ids) == 30 and result.stats.drafters["draft_model"].proposed > 0
        if target_name == "small":  # the draft never proposes ids past the target's vocabulary
            assert all(t < len(target.tokenizer) for t in result.token_ids)
        if temperature == 0.0:
            assert result.token_ids == tiny_models.greedy(target_name, prompt, 30)


def test_draft_model_in_another_dtype(tiny_models, small):
    """A bfloat16 draft for a float32 target: its own prefill, and the output is still greedy."""
    from decoding.models import load_model

    draft = load_model(str(tiny_models.path("small_trunc")), device="cpu", dtype="bfloat16")
    engine = SpeculativeEngine(small, draft, costs=CHEAP, draft_min_confidence=0.0)
    prompt = prompt_of(small)
    for mode in ("draft_model", "auto"):
        check(tiny_models, engine, prompt, GenerationConfig(max_new_tokens=30, drafting=mode, eos_token_ids=()))
    sampled = engine.generate(prompt, GenerationConfig(max_new_tokens=20, drafting="draft_model", temperature=1.0,
                                                       seed=0, eos_token_ids=()))
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
    from decoding.models import load_model

    target = load_model(str(tiny_models.path("small")), device="cuda", dtype=dtype)
    draft = load_model(str(tiny_models.path("small_trunc")), device="cuda", dtype=dtype)
    engine = SpeculativeEngine(target, draft, max_speculative_tokens=4, draft_min_confidence=0.0)  # calibrates
    prompt = prompt_of(target)
    with torch.inference_mode():
        ref = target.model.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=30, do_sample=False,
                                    eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    for mode in MODES:
        result = engine.generate(prompt, GenerationConfig(max_new_tokens=30, drafting=mode, eos_token_ids=()),
                                 contexts=[ref[3:]])
        assert len(result.token_ids) == 30
        if dtype == "float32":
            assert result.token_ids == ref, mode
    sampled = engine.generate(prompt, GenerationConfig(max_new_tokens=20, temperature=1.0, seed=0, eos_token_ids=()))
    assert len(sampled.token_ids) == 20


def test_draft_model_mode_without_a_draft_model_is_a_clear_error(small):
    no_draft = SpeculativeEngine(small, costs=CHEAP)
    with pytest.raises(ValueError, match="needs a draft model"):
        no_draft.generate([5, 6, 7], GenerationConfig(max_new_tokens=4, drafting="draft_model"))


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
