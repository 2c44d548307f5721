"""Draft models derived from the target: shared weights, vocabulary, exactness."""

from __future__ import annotations

import pytest

from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.core import EngineConfig
from decoding.drafters.derived import derive_draft
from decoding.planning.policy import CostModel

COSTS = CostModel(verify_ms=(10.0,) * 9, draft_step_ms=1.0)


def test_first_layers_share_the_target_weights(tiny_models):
    target = tiny_models.load("small")
    draft = derive_draft(target, "derived:layers:1")
    assert draft.model.config.num_hidden_layers == 1
    assert draft.model.model.layers[0] is target.model.model.layers[0]
    assert draft.model.lm_head.weight is target.model.lm_head.weight
    assert draft.tokenizer is target.tokenizer


@pytest.mark.parametrize("spec", ["derived:layers:1", "derived:int8", "derived:int4"])
def test_derived_drafts_keep_greedy_exact(tiny_models, spec, torch_one_thread):
    if spec == "derived:int8":
        pytest.importorskip("torchao")
    target = tiny_models.load("small")
    engine = SpeculativeEngine(target, derive_draft(target, spec), costs=COSTS)
    prompt = target.tokenizer.encode("the disk is full; restart xrootd now.")
    expected = tiny_models.greedy("small", prompt, 24)
    for mode in ("draft_model", "auto"):
        result = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=24, eos_token_ids=()),
                                                          speculation=Speculation(drafting=mode)))
        assert result.token_ids == expected, (spec, mode)


def test_int8_copy_agrees_with_the_target(tiny_models, torch_one_thread):
    pytest.importorskip("torchao")
    target = tiny_models.load("small")
    # Tiny random models are unsure of everything: draft regardless of confidence.
    engine = SpeculativeEngine(target, derive_draft(target, "derived:int8"),
                               config=EngineConfig(draft_min_confidence=0.0), costs=COSTS)
    prompt = target.tokenizer.encode("the ticket is fixed.")
    stats = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=24, eos_token_ids=()),
                                                     speculation=Speculation(drafting="draft_model"))).stats
    assert stats.drafters["draft_model"].alpha > 0.5  # near-flat random logits: int8 flips some near-ties


def test_int4_lean_draft_starts_from_the_target_cache_and_agrees(tiny_models, torch_one_thread, tmp_path):
    """derived:int4 (decoding.drafters.lean, no torchao) has the target's KV layout and dtype, so
    the drafter shares the target's prompt K/V; it agrees with the target on most tokens and
    caches its packed weights under cache_dir."""
    target = tiny_models.load("small")
    draft = derive_draft(target, "derived:int4", cache_dir=tmp_path)
    assert list(tmp_path.glob("lean-draft-*.pt"))
    assert draft.model.config.num_hidden_layers == target.model.config.num_hidden_layers
    assert draft.dtype == target.dtype and draft.tokenizer is target.tokenizer
    engine = SpeculativeEngine(target, draft, config=EngineConfig(draft_min_confidence=0.0), costs=COSTS)
    prompt = target.tokenizer.encode("the ticket is fixed.")
    result = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=24, eos_token_ids=()),
                                                      speculation=Speculation(drafting="draft_model")))
    assert result.token_ids == tiny_models.greedy("small", prompt, 24)
    assert result.stats.drafters["draft_model"].alpha > 0.5


@pytest.mark.parametrize("spec", ["derived:nope", "derived:layers:x", "derived:layers:0", "derived:layers:99"])
def test_bad_specs_are_clear_errors(tiny_models, spec):
    with pytest.raises(ValueError, match="derived"):
        derive_draft(tiny_models.load("small"), spec)
