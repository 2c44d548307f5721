"""Generation settings (logits processors) are honoured exactly through every drafter.

The reference is transformers' own ``generate()`` with the same settings: the built-in
ones as ``generate`` kwargs (it builds its own processors from them), the OpenAI ones
(``logit_bias``, ``frequency_penalty``, ``presence_penalty``) as
``generate(logits_processor=...)``. Each setting × each drafting mode, with passages of
plain greedy's output as n-gram context so drafts are proposed (and rejected where the
setting changes the output); a checkpoint's own ``generation_config`` applies by default;
bad values are refused naming the field; a hypothesis property test mixes them.
"""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import LogitsProcessorList

from decoding import Budget, GenerationConfig, Sampling, Speculation, SpeculativeEngine
from decoding.backends.models import load_model
from decoding.config import GenerationSettingError
from decoding.core import EngineConfig
from decoding.logits import (
    FrequencyPresencePenaltyLogitsProcessor,
    LogitBiasLogitsProcessor,
    effective_settings,
)
from decoding.planning.policy import CostModel

pytestmark = pytest.mark.usefixtures("torch_one_thread")

MODES = ("off", "ngram", "draft_model", "auto")
N = 24  # new tokens per case
COSTS = CostModel(verify_ms=tuple(1.0 + 0.03 * i for i in range(17)), draft_step_ms=0.05)
OPENAI = ("logit_bias", "frequency_penalty", "presence_penalty")


@pytest.fixture(scope="module")
def small(tiny_models):
    return tiny_models.load("small")


@pytest.fixture(scope="module")
def engine(tiny_models, small):
    return SpeculativeEngine(small, tiny_models.load("small_noisy"), config=EngineConfig(draft_min_confidence=0.0),
                             costs=COSTS)


@pytest.fixture(scope="module")
def prompts(small):
    tok = small.tokenizer
    return [tok.encode("restart the xrootd service on the disk node"), tok.encode("the ticket is fixed ✓ café"),
            [5, 9, 5, 9, 5, 9, 12]]


def hf_generate(loaded, prompt, n, eos=(), **settings_):
    """``generate()`` with ``settings_`` (GenerationConfig field names): built-ins as kwargs,
    the OpenAI ones as custom processors."""
    custom = LogitsProcessorList()
    if settings_.get("logit_bias"):
        custom.append(LogitBiasLogitsProcessor(dict(settings_["logit_bias"])))
    if settings_.get("frequency_penalty") or settings_.get("presence_penalty"):
        custom.append(FrequencyPresencePenaltyLogitsProcessor(settings_.get("frequency_penalty", 0.0),
                                                              settings_.get("presence_penalty", 0.0), len(prompt)))
    builtin = {k: (v if not isinstance(v, tuple) else [list(x) if isinstance(x, tuple) else x for x in v])
               for k, v in settings_.items() if k not in OPENAI}
    with torch.inference_mode():
        out = loaded.model.generate(
            torch.tensor([prompt], device=loaded.device), max_new_tokens=n, do_sample=False,
            eos_token_id=list(eos) or None, pad_token_id=0, logits_processor=custom,
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long, device=loaded.device),
            **builtin)
    return out[0, len(prompt):].tolist()


def settings_cases(ref: list[int], vocab: int) -> dict[str, tuple[dict, tuple[int, ...]]]:
    """Settings (and EOS ids) that change plain greedy's output ``ref``."""
    return {
        "repetition_penalty": ({"repetition_penalty": 1.6}, ()),
        "repetition_penalty_below_1": ({"repetition_penalty": 0.6}, ()),
        "no_repeat_ngram_size": ({"no_repeat_ngram_size": 2}, ()),
        "min_new_tokens": ({"min_new_tokens": 12}, (ref[1], ref[4])),  # greedy would stop at token 2
        "bad_words_ids": ({"bad_words_ids": ((ref[3],), (ref[5], ref[6]), (ref[0], ref[1], ref[2]))}, ()),
        "suppress_tokens": ({"suppress_tokens": (ref[2], ref[7])}, ()),
        "logit_bias": ({"logit_bias": {ref[2]: -8.0, (ref[0] + 7) % vocab: 4.0, ref[9]: 100.0}}, ()),
        "frequency_penalty": ({"frequency_penalty": 2.0}, ()),
        "presence_penalty": ({"presence_penalty": 1.5, "frequency_penalty": -0.5}, ()),
        "all": ({"repetition_penalty": 1.2, "no_repeat_ngram_size": 3, "min_new_tokens": 5,
                 "bad_words_ids": ((ref[6],),), "suppress_tokens": (ref[8],), "logit_bias": {ref[10]: -3.0},
                 "frequency_penalty": 0.4, "presence_penalty": 0.3}, (ref[3],)),
    }


@pytest.mark.parametrize("name", ["repetition_penalty", "repetition_penalty_below_1", "no_repeat_ngram_size",
                                  "min_new_tokens", "bad_words_ids", "suppress_tokens", "logit_bias",
                                  "frequency_penalty", "presence_penalty", "all"])
def test_setting_matches_generate_in_every_mode(tiny_models, small, engine, prompts, name):
    vocab = small.model.config.vocab_size
    changed = 0
    for p, prompt in enumerate(prompts):
        ref = tiny_models.greedy("small", prompt, N)
        fields, eos = settings_cases(ref, vocab)[name]
        expected = hf_generate(small, prompt, N, eos, **fields)
        changed += expected != ref[:len(expected)] or len(expected) != len(ref)
        rng = random.Random(f"{name}-{p}")
        for mode in MODES:
            gamma = rng.randint(1, 12)
            fixed = mode in ("ngram", "draft_model") and rng.random() < 0.5
            config = GenerationConfig(Sampling(**fields), Budget(max_new_tokens=N, eos_token_ids=eos),
                                      Speculation(mode="fixed" if fixed else "adaptive", drafting=mode,
                                                  num_speculative_tokens=gamma))
            result = engine.generate(prompt, config, contexts=[ref, expected])
            assert result.token_ids == expected, (name, p, mode, config)
            if mode != "off" and result.stats.drafters:
                assert sum(d.proposed for d in result.stats.drafters.values()) > 0
            effective = result.stats.generation_settings
            for key, value in fields.items():
                if key == "logit_bias":
                    assert effective[key] == {str(t): float(b) for t, b in value.items()}
                elif isinstance(value, tuple):
                    assert effective[key] == [list(v) if isinstance(v, tuple) else v for v in value]
                else:
                    assert effective[key] == value
    assert changed >= 1, f"{name} never changed plain greedy's output: the test would prove nothing"


def test_sampling_with_settings_is_reproducible_across_modes(tiny_models, small, engine, prompts):
    """A seeded sample with processors: identical in every mode and γ (drafter-invariant),
    and the processors act (no token the settings forbid)."""
    banned = tuple(tiny_models.greedy("small", prompts[0], 6)[:3])
    outs = set()
    for mode in MODES:
        for gamma in (1, 4, 9):
            config = GenerationConfig(budget=Budget(max_new_tokens=N, eos_token_ids=()),
                                      sampling=Sampling(temperature=0.9, top_k=20, seed=123, repetition_penalty=1.3,
                                                        suppress_tokens=banned, logit_bias={banned[0] + 1: 2.0}),
                                      speculation=Speculation(drafting=mode, num_speculative_tokens=gamma))
            ids = engine.generate(prompts[0], config, contexts=[prompts[0]]).token_ids
            assert not set(ids) & set(banned)
            outs.add(tuple(ids))
    assert len(outs) == 1


# -- the checkpoint's own generation_config -----------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint_with_settings(tiny_models, tmp_path_factory):
    """The "small" model saved with repetition_penalty 1.5 and no_repeat_ngram_size 3 in its
    generation_config.json (as Qwen2.5-Instruct ships repetition_penalty 1.05)."""
    folder = tmp_path_factory.mktemp("checkpoint") / "small_penalised"
    shutil.copytree(tiny_models.path("small"), folder)
    path = folder / "generation_config.json"
    config = json.loads(path.read_text())
    config.update(repetition_penalty=1.5, no_repeat_ngram_size=3, do_sample=True, temperature=0.7, top_p=0.8)
    path.write_text(json.dumps(config))
    return folder


def test_checkpoint_generation_config_applies_by_default(tiny_models, checkpoint_with_settings, prompts):
    loaded = load_model(str(checkpoint_with_settings), device="cpu", dtype="float32")
    assert loaded.generation_defaults["repetition_penalty"] == 1.5
    assert loaded.generation_defaults["no_repeat_ngram_size"] == 3
    engine = SpeculativeEngine(loaded, tiny_models.load("small_noisy"), config=EngineConfig(draft_min_confidence=0.0),
                               costs=COSTS)
    for prompt in prompts:
        ref = tiny_models.greedy("small", prompt, N)
        with torch.inference_mode():  # generate() inherits the checkpoint's settings too (do_sample off here)
            expected = loaded.model.generate(torch.tensor([prompt]), max_new_tokens=N, do_sample=False,
                                             eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
        assert expected != ref
        for mode in MODES:
            result = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=N, eos_token_ids=()),
                                                              speculation=Speculation(drafting=mode)),
                                     contexts=[ref])
            assert result.token_ids == expected, mode
            stats = result.stats.generation_settings
            assert stats["from_checkpoint"] == ["repetition_penalty", "no_repeat_ngram_size"]
            assert stats["checkpoint_sampling"] == {"do_sample": True, "temperature": 0.7, "top_p": 0.8}
        # A request's explicit value overrides the checkpoint's: 1.0 and 0 switch them off.
        off = GenerationConfig(budget=Budget(max_new_tokens=N, eos_token_ids=()),
                               sampling=Sampling(repetition_penalty=1.0, no_repeat_ngram_size=0))
        result = engine.generate(prompt, off, contexts=[ref])
        assert result.token_ids == ref and result.stats.generation_settings["from_checkpoint"] == []


def test_checkpoint_setting_the_engine_cannot_apply_is_refused(tiny_models, tmp_path):
    folder = tmp_path / "forced"
    shutil.copytree(tiny_models.path("small"), folder)
    path = folder / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "forced_eos_token_id": 3}))
    loaded = load_model(str(folder), device="cpu", dtype="float32")
    engine = SpeculativeEngine(loaded, costs=COSTS)
    with pytest.raises(GenerationSettingError, match="forced_eos_token_id") as err:
        engine.generate([1, 2, 3], GenerationConfig(budget=Budget(max_new_tokens=4)))
    assert err.value.field == "forced_eos_token_id"


# -- bad values ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("field,value", [("repetition_penalty", 0), ("repetition_penalty", -1.0),
                                         ("repetition_penalty", float("nan")), ("no_repeat_ngram_size", -1),
                                         ("min_new_tokens", -2), ("bad_words_ids", [[]]), ("bad_words_ids", "abc"),
                                         ("suppress_tokens", [-1]), ("logit_bias", {"5": 101}),
                                         ("logit_bias", {-3: 1.0}), ("logit_bias", {"x": 1.0}),
                                         ("frequency_penalty", 2.5), ("presence_penalty", -2.01)])
def test_out_of_range_values_are_refused_naming_the_field(field, value):
    with pytest.raises(GenerationSettingError) as err:
        Sampling(**{field: value})
    assert err.value.field == field and field in str(err.value)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("field,value", [("logit_bias", {64: 1.0}), ("bad_words_ids", [[1, 2], [999]]),
                                         ("suppress_tokens", [3, 64])])
def test_token_ids_outside_the_vocabulary_are_refused_at_request_time(engine, field, value):
    assert engine.target.model.config.vocab_size == 64
    with pytest.raises(GenerationSettingError) as err:
        engine.generate([1, 2, 3], GenerationConfig(Sampling(**{field: value}), Budget(max_new_tokens=0)))
    assert err.value.field == field


def test_openai_string_keys_and_normalised_values():
    config = GenerationConfig(sampling=Sampling(logit_bias={"7": 1, 3: -2.5}, bad_words_ids=[[1, 2]],
                                                suppress_tokens=[4]))
    assert config.sampling.logit_bias == ((3, -2.5), (7, 1.0))
    assert config.sampling.bad_words_ids == ((1, 2),) and config.sampling.suppress_tokens == (4,)
    hash(config)  # still hashable
    assert not effective_settings(GenerationConfig(), {}, 10).active


def test_openai_processors_follow_the_documented_formula():
    """mu[j] - c[j] * frequency - (c[j] > 0) * presence, c counted over the output only; bias added."""
    scores = torch.zeros(1, 6)
    ids = torch.tensor([[2, 2, 5, 1, 1, 1, 4]])  # prompt [2, 2, 5], output [1, 1, 1, 4]
    out = FrequencyPresencePenaltyLogitsProcessor(0.5, 0.25, prompt_length=3)(ids, scores)
    assert out.tolist() == [[0.0, -1.75, 0.0, 0.0, -0.75, 0.0]]
    biased = LogitBiasLogitsProcessor([(0, 100.0), (5, -1.5)])(ids, torch.full((1, 6), -float("inf")))
    assert biased[0, 1] == -float("inf")  # a forbidden token stays forbidden
    assert LogitBiasLogitsProcessor([(0, 100.0), (5, -1.5)])(ids, scores).tolist() == [[100.0, 0, 0, 0, 0, -1.5]]


# -- property test -------------------------------------------------------------------------------------------
@st.composite
def random_settings(draw, vocab: int = 64):
    ids = st.integers(0, vocab - 1)
    fields = {}
    if draw(st.booleans()):
        fields["repetition_penalty"] = draw(st.sampled_from([0.5, 0.9, 1.1, 1.5, 3.0]))
    if draw(st.booleans()):
        fields["no_repeat_ngram_size"] = draw(st.integers(1, 4))
    if draw(st.booleans()):
        fields["bad_words_ids"] = tuple(tuple(w) for w in draw(st.lists(st.lists(ids, min_size=1, max_size=3),
                                                                        min_size=1, max_size=3)))
    if draw(st.booleans()):
        fields["suppress_tokens"] = tuple(draw(st.lists(ids, min_size=1, max_size=5)))
    if draw(st.booleans()):
        fields["logit_bias"] = draw(st.dictionaries(ids, st.sampled_from([-100.0, -5.0, -0.5, 2.0, 10.0]),
                                                    min_size=1, max_size=4))
    if draw(st.booleans()):
        fields["frequency_penalty"] = draw(st.sampled_from([-1.0, 0.3, 2.0]))
        fields["presence_penalty"] = draw(st.sampled_from([-0.5, 0.0, 1.0]))
    eos = tuple(draw(st.lists(ids, max_size=2)))
    if eos and draw(st.booleans()):
        fields["min_new_tokens"] = draw(st.integers(1, 10))
    return fields, eos


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=random_settings(), mode=st.sampled_from(MODES), gamma=st.integers(1, 10), prompt_i=st.integers(0, 2),
       n=st.integers(1, 20))
def test_property_random_settings_match_generate(tiny_models, small, engine, prompts, case, mode, gamma, prompt_i, n):
    fields, eos = case
    prompt = prompts[prompt_i]
    expected = hf_generate(small, prompt, n, eos, **fields)
    config = GenerationConfig(Sampling(**fields), Budget(max_new_tokens=n, eos_token_ids=eos),
                              Speculation(drafting=mode, num_speculative_tokens=gamma))
    result = engine.generate(prompt, config, contexts=[tiny_models.greedy("small", prompt, N), expected])
    assert result.token_ids == expected


# -- the exactness eval compares against generate() with the same effective settings -----------------------
def eval_cases(loaded):
    from evals.harness import Case
    from evals.questions import Question

    tok = loaded.tokenizer
    texts = ["the disk is full; restart xrootd now. the disk is full;", "café ✓ the ticket is fixed. café"]
    return [Case(Question(f"t{i}", t, "", ""), tok.encode(t), [tok.encode(t)[:8]]) for i, t in enumerate(texts)]


def test_exactness_eval_uses_the_effective_settings(tiny_models, small, engine, checkpoint_with_settings):
    from evals.exactness import reference, run_exactness, settings_for

    cases = eval_cases(small)
    generation = {"repetition_penalty": 1.4, "logit_bias": {5: 3.0}, "presence_penalty": 0.5}
    report = run_exactness(engine, cases, max_new_tokens=16, generation=generation, prefix_reuse=False)
    assert report["generation_settings"]["repetition_penalty"] == 1.4
    assert report["generation_settings"]["logit_bias"] == {"5": 3.0}
    assert all(v == len(cases) for v in report["exact"].values()), report["divergences"]
    assert any(reference(engine, c.prompt_ids, 16, settings=settings_for(engine, generation)).raw
               != tiny_models.greedy("small", c.prompt_ids, 16) for c in cases)  # the settings acted
    # With the checkpoint's own settings and no request fields, the reference inherits them.
    loaded = load_model(str(checkpoint_with_settings), device="cpu", dtype="float32")
    penalised = SpeculativeEngine(loaded, costs=COSTS)
    report = run_exactness(penalised, cases, max_new_tokens=16, prefix_reuse=False)
    assert report["generation_settings"]["from_checkpoint"] == ["repetition_penalty", "no_repeat_ngram_size"]
    assert all(v == len(cases) for v in report["exact"].values()), report["divergences"]
    ref = reference(penalised, cases[0].prompt_ids, 16)
    assert ref.raw != tiny_models.greedy("small", cases[0].prompt_ids, 16)  # the penalty acted


def test_exactness_eval_catches_an_engine_that_drops_a_setting(small, engine, monkeypatch):
    """An engine that silently ignores the settings diverges from the settings-aware reference."""
    import decoding.request
    from evals.exactness import run_exactness

    real = decoding.request.effective_settings
    monkeypatch.setattr(decoding.request, "effective_settings",
                        lambda config, checkpoint, vocab: real(GenerationConfig(), {}, vocab))
    report = run_exactness(engine, eval_cases(small), max_new_tokens=16, modes=["off"],
                           generation={"repetition_penalty": 2.0, "no_repeat_ngram_size": 2}, prefix_reuse=False)
    assert report["exact"]["off"] < 2 and report["divergences"][0]["margin"] is not None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_settings_and_seeded_sampling_on_cuda(tiny_models):
    """On CUDA (fp32): every setting matches generate() in every mode, and a seeded sample
    with settings is the same in every mode (the Gumbel noise comes from a CUDA generator)."""
    target = load_model(str(tiny_models.path("small")), device="cuda", dtype="float32")
    draft = load_model(str(tiny_models.path("small_noisy")), device="cuda", dtype="float32")
    engine = SpeculativeEngine(target, draft, config=EngineConfig(draft_min_confidence=0.0), costs=COSTS)
    prompt = target.tokenizer.encode("restart the xrootd service on the disk node")
    with torch.inference_mode():
        ref = target.model.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=N, do_sample=False,
                                    eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    for name, (fields, eos) in settings_cases(ref, 64).items():
        expected = hf_generate(target, prompt, N, eos, **fields)
        for mode in MODES:
            config = GenerationConfig(Sampling(**fields), Budget(max_new_tokens=N, eos_token_ids=eos),
                                      Speculation(drafting=mode))
            assert engine.generate(prompt, config, contexts=[ref, expected]).token_ids == expected, (name, mode)
    sampling = Sampling(temperature=0.9, seed=5, repetition_penalty=1.2, logit_bias={ref[0]: -2.0})
    budget = Budget(max_new_tokens=N, eos_token_ids=())
    outs = {tuple(engine.generate(prompt, GenerationConfig(sampling, budget,
                                                           Speculation(drafting=mode, num_speculative_tokens=gamma)),
                                  contexts=[ref]).token_ids)
            for mode in MODES for gamma in (1, 6)}
    assert len(outs) == 1
