"""Engine edge cases on tiny random Llama models: prompts, budgets, EOS, context window,
custom drafters (always wrong, oracle), cancellation; draft models: test_decoding_draft_model_edges.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from decoding_edges import CHEAP, MODES, check, prompt_of  # noqa: E402 (tests/ is on sys.path)

from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.backends.models import LoadedModel
from decoding.core import EngineConfig, PromptError

pytestmark = pytest.mark.usefixtures("torch_one_thread")
pytest_plugins = ["decoding_edges"]  # the fixtures small and engine

# -- prompts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt", [[], ()])
def test_empty_prompt_is_a_clear_error(engine, prompt):
    with pytest.raises(PromptError, match="empty"):
        engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=4)))
    with pytest.raises(PromptError):
        next(iter(engine.stream(prompt)))


@pytest.mark.parametrize("prompt", [[-1, 3], [3, 10**6]])
def test_prompt_ids_outside_the_vocabulary_are_a_clear_error(engine, prompt):
    with pytest.raises(PromptError, match="vocabulary"):
        engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=4)))


@pytest.mark.parametrize("context", [[3, 4, 10**6], [-1], [3, 2**63]])
def test_context_ids_outside_the_vocabulary_are_a_clear_error(engine, context):
    with pytest.raises(PromptError, match="context token ids outside the vocabulary"):
        engine.generate([3, 4], GenerationConfig(budget=Budget(max_new_tokens=4)), contexts=[[5, 6], context])


@pytest.mark.parametrize("mode", MODES)
def test_one_token_prompt(tiny_models, engine, mode):
    for token in (5, 17, 40):
        check(tiny_models, engine, [token], GenerationConfig(budget=Budget(max_new_tokens=30, eos_token_ids=()),
                                                             speculation=Speculation(drafting=mode)))


@pytest.mark.parametrize("mode", ["ngram", "auto"])
def test_prompt_shorter_than_ngram_size(tiny_models, small, mode):
    engine = SpeculativeEngine(small, config=EngineConfig(max_ngram=6, min_ngram=4), costs=CHEAP)
    for prompt in ([7], [7, 9], [7, 9, 7]):
        check(tiny_models, engine, prompt, GenerationConfig(budget=Budget(max_new_tokens=30, eos_token_ids=()),
                                                            speculation=Speculation(drafting=mode)))


def test_match_only_at_the_very_end_of_the_context(tiny_models, small):
    """Passages whose only match with the prompt's suffix sits at their very end (no or one
    continuation token) must not break anything; the output stays greedy."""
    engine = SpeculativeEngine(small, config=EngineConfig(max_ngram=3, min_ngram=2), costs=CHEAP)
    prompt = prompt_of(small)
    ref = tiny_models.greedy("small", prompt, 30)
    contexts = [[1, 2, 3] + prompt[-3:], [4] + prompt[-2:] + ref[:1], prompt[-2:]]
    result = check(tiny_models, engine, prompt,
                   GenerationConfig(budget=Budget(max_new_tokens=30, eos_token_ids=()),
                                    speculation=Speculation(drafting="ngram")), contexts)
    assert result.stats.drafters["ngram"].proposed >= 1


def test_prompt_filling_the_context_window_is_a_clear_error(engine, small):
    max_pos = small.max_positions
    for n in (max_pos, max_pos + 5):
        with pytest.raises(PromptError, match="context window"):
            engine.generate([3] * n, GenerationConfig(budget=Budget(max_new_tokens=4)))


def test_max_model_len_caps_the_context_window_at_load(tiny_models, caplog):
    from decoding.backends.models import LoadOptions, load_target

    folder = str(tiny_models.path("small"))
    window = load_target(folder, LoadOptions(device="cpu")).max_positions
    assert load_target(folder, LoadOptions(device="cpu", max_model_len=window // 2)).max_positions == window // 2
    with caplog.at_level(logging.WARNING, logger="decoding.backends.models"):
        assert load_target(folder, LoadOptions(device="cpu", max_model_len=window + 1)).max_positions == window
    assert f"max_model_len {window + 1} is over the target's context window ({window} tokens)" in caplog.text


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
            config = GenerationConfig(budget=Budget(max_new_tokens=100, eos_token_ids=()),
                                      speculation=Speculation(drafting=mode, num_speculative_tokens=10))
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
    result = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=100),
                                                      speculation=Speculation(drafting="ngram",
                                                                              num_speculative_tokens=10, mode="fixed")))
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
    config = GenerationConfig(budget=Budget(max_new_tokens=budget, eos_token_ids=()),
                              speculation=Speculation(drafting=mode, num_speculative_tokens=10,
                                                      mode="fixed" if mode in ("ngram", "draft_model") else "adaptive"))
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
        engine = SpeculativeEngine(small, small, config=EngineConfig(draft_min_confidence=0.0), costs=CHEAP)
    config = GenerationConfig(budget=Budget(max_new_tokens=40, eos_token_ids=(eos,)),
                              speculation=Speculation(drafting=mode, num_speculative_tokens=10))
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
        with_model_eos = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=30),
                                                                  speculation=Speculation(drafting=mode)))
        assert with_model_eos.token_ids == ref[: pos + 1] and with_model_eos.finish_reason == "eos"
        without = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=30, eos_token_ids=()),
                                                           speculation=Speculation(drafting=mode)))
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
    engine = SpeculativeEngine(small, tiny_models.load("small_noisy"), config=EngineConfig(draft_min_confidence=0.0),
                               costs=CHEAP)
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
            config = GenerationConfig(budget=Budget(max_new_tokens=40, stop_strings=(stop,), eos_token_ids=()),
                                      speculation=Speculation(drafting=mode))
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
        config = GenerationConfig(budget=Budget(max_new_tokens=40, eos_token_ids=()),
                                  speculation=Speculation(drafting="ngram", num_speculative_tokens=10, mode="fixed"))
        result = check(tiny_models, engine, prompt, config, name=name)
        stats = result.stats.drafters["ngram"]
        assert stats.proposed > 0 and stats.accepted == 0 and result.stats.tau == 1.0


@pytest.mark.parametrize("gamma", [1, 4, 10])
def test_oracle_drafter_reaches_gamma_plus_one(tiny_models, scripted_engine, small, gamma):
    prompt = prompt_of(small)
    budget = 1 + 4 * (gamma + 1)  # the prefill token + four full rounds
    ref = tiny_models.greedy("small", prompt, budget)
    engine = scripted_engine(small, lambda out: ref[len(out):])
    config = GenerationConfig(budget=Budget(max_new_tokens=budget, eos_token_ids=()),
                              speculation=Speculation(drafting="ngram", num_speculative_tokens=gamma, mode="fixed"))
    result = check(tiny_models, engine, prompt, config)
    assert result.stats.drafters["ngram"].alpha == 1.0
    assert result.stats.tau == gamma + 1 and result.stats.target_passes == 4


def test_oracle_drafter_under_the_policy(tiny_models, scripted_engine, small):
    """With the cost-aware policy an always-right drafter is kept and γ grows to the ceiling."""
    prompt = prompt_of(small)
    ref = tiny_models.greedy("small", prompt, 60)
    engine = scripted_engine(small, lambda out: ref[len(out):], costs=CHEAP)
    config = GenerationConfig(budget=Budget(max_new_tokens=60, eos_token_ids=()),
                              speculation=Speculation(drafting="auto", num_speculative_tokens=8))
    result = check(tiny_models, engine, prompt, config)
    assert result.stats.tau > 6 and result.stats.drafters["ngram"].alpha == 1.0


def test_cancel_between_rounds(engine, small):
    calls = []
    result = engine.generate(prompt_of(small), GenerationConfig(budget=Budget(max_new_tokens=30, eos_token_ids=())),
                             cancel=lambda: calls.append(1) or len(calls) > 2)
    assert result.finish_reason == "cancelled" and 1 <= len(result.token_ids) < 30
