"""The lean (gpt-fast-style) draft of decoding.drafters.lean on tiny random Llamas.

What is checked, all through the one forward the engine drafts with (``model(input_ids,
cache=PreallocatedCache)``): it computes what the transformers forward of the same weights
computes (dense: to float32 rounding; int4/int8: against the dequantized weights, to
bfloat16 rounding); a cropped cache regrows without changing a result; drafting over the
target's own KV cache equals prefilling; a draft with fewer layers gets a cache of its own
from the drafter; packed weights round-trip through the disk cache; the background loader
and the calibration report a verdict.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from decoding.backends.models import LoadedModel
from decoding.drafters.draft_model import DraftModelDrafter
from decoding.drafters.lean import (
    LeanDraftLoader,
    LeanDraftModel,
    LeanVariant,
    PackedLinear,
    PayThresholds,
    build_lean_draft,
    measure_lean_draft,
    quantize_int4_groups,
    quantize_int8_rows,
)
from decoding.kv.cache import PreallocatedCache, crop_cache

DENSE = LeanVariant(quant="dense", head="dense", act_dtype=torch.float32)


@pytest.fixture
def target(tiny_models, torch_one_thread):
    return tiny_models.load("small")


def _ids(n: int, vocab: int, seed: int = 0) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@torch.inference_mode()
def _hf_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([ids])).logits[0].float()


def _feed(model: torch.nn.Module, ids: list[int], cache: PreallocatedCache) -> torch.Tensor:
    """Logits ``(len(ids), vocab)`` of one forward over ``ids`` after ``cache``."""
    return model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True).logits[0]


def _one_by_one(model: torch.nn.Module, ids: list[int], cache: PreallocatedCache) -> torch.Tensor:
    """Logits ``(len(ids), vocab)`` of one-token forwards (the draft's steps)."""
    return torch.stack([_feed(model, [t], cache)[0] for t in ids])


def _dequantize_int4(codes: torch.Tensor, scales_zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """The float32 ``(N, K)`` weights int4 codes and ``[scale, zero]`` groups stand for (the
    tinygemm convention ``(q - 8) * scale + zero``)."""
    n, k = codes.shape
    sz = scales_zeros.float().transpose(0, 1)  # (N, K/g, 2)
    q = codes.reshape(n, k // group_size, group_size).float()
    return ((q - 8) * sz[..., :1] + sz[..., 1:]).reshape(n, k)


def _dequantized_copy(model: torch.nn.Module, quant: str, head: str = "int8") -> torch.nn.Module:
    """The transformers model with every decoder linear (and the LM head) replaced by
    what the lean draft's packed weights represent (scales rounded to bfloat16)."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for name, mod in out.named_modules():
            if not isinstance(mod, torch.nn.Linear):
                continue
            kind = head if name == "lm_head" else quant
            w = mod.weight.float()
            if kind == "int4":
                codes, sz = quantize_int4_groups(w, 32)
                mod.weight.copy_(_dequantize_int4(codes, sz.bfloat16(), 32))
            elif kind == "int8":
                codes, scales = quantize_int8_rows(w)
                mod.weight.copy_(codes.float() * scales.bfloat16().float()[:, None])
    return out


def test_int4_quantization_reproduces_a_q4_1_grid_exactly():
    # Q4_1-style weights: per group of 32, scale * q + min with q in 0..15 (both ends used).
    gen = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (8, 64), generator=gen).float()
    q[:, ::32], q[:, 1::32] = 0, 15
    scale = torch.rand(8, 2, 1, generator=gen) * 0.01 + 0.001
    lo = torch.randn(8, 2, 1, generator=gen) * 0.05
    w = (q.view(8, 2, 32) * scale + lo).view(8, 64)
    codes, sz = quantize_int4_groups(w, 32)
    assert torch.equal(codes.float(), q)
    assert torch.allclose(_dequantize_int4(codes, sz, 32), w, atol=1e-6)


@pytest.mark.parametrize("kind", ["int4", "int8", "dense"])
def test_packed_linear_matches_its_dequantized_matmul(kind):
    gen = torch.Generator().manual_seed(1)
    w, x = torch.randn(64, 128, generator=gen) * 0.1, torch.randn(3, 128, generator=gen)
    lin = PackedLinear(w, kind=kind, act_dtype=torch.bfloat16)
    if kind == "int4":
        codes, sz = quantize_int4_groups(w, 32)
        ref_w = _dequantize_int4(codes, sz.bfloat16(), 32)
    elif kind == "int8":
        codes, scales = quantize_int8_rows(w)
        ref_w = codes.float() * scales.bfloat16().float()[:, None]
    else:
        ref_w = w.bfloat16().float()
    ref = x.bfloat16().float() @ ref_w.t()
    assert torch.allclose(lin(x).float(), ref, atol=0.05, rtol=0.02)


def test_bad_int4_group_size_is_a_clear_error():
    with pytest.raises(ValueError, match="group size"):
        PackedLinear(torch.randn(8, 48), kind="int4", group_size=32)
    with pytest.raises(ValueError, match="quantization"):
        PackedLinear(torch.randn(8, 64), kind="int3")


def test_dense_lean_forward_matches_transformers(target):
    lean = LeanDraftModel(target.model, DENSE)
    ids = _ids(20, lean.vocab_size)
    ref = _hf_logits(target.model, ids)
    cache = PreallocatedCache(4)  # small on purpose: the cache regrows
    multi = _feed(lean, ids[:12], cache)
    singles = _one_by_one(lean, ids[12:], cache)
    assert torch.allclose(multi, ref[:12], atol=1e-5)
    assert torch.allclose(singles, ref[12:], atol=1e-5)
    assert cache.get_seq_length() == 20
    last = lean(input_ids=torch.tensor([ids[:3]]), cache=PreallocatedCache(4), logits_to_keep=1).logits
    assert last.shape == (1, 1, lean.vocab_size) and torch.allclose(last[0, -1], ref[2], atol=1e-5)


@pytest.mark.parametrize("quant", ["int4", "int8"])
def test_quantized_lean_forward_matches_transformers_on_the_same_weights(target, quant):
    lean = LeanDraftModel(target.model, LeanVariant(quant=quant))
    ref_model = _dequantized_copy(target.model, quant)
    ids = _ids(16, lean.vocab_size, seed=2)
    ref = _hf_logits(ref_model, ids)
    got = _one_by_one(lean, ids, PreallocatedCache(32))
    # bf16 activations into the packed matmuls: bf16-level differences, same ranking.
    assert (got - ref).abs().max() < 0.05 * ref.abs().max()
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9


def test_crop_then_refeed_gives_the_same_logits(target):
    lean = LeanDraftModel(target.model, LeanVariant(quant="int4"))
    ids = _ids(12, lean.vocab_size, seed=3)
    cache = PreallocatedCache(2)
    first = _one_by_one(lean, ids, cache)  # one token at a time: the same kernels as below
    crop_cache(cache, 5)
    _feed(lean, [1, 2, 3], cache)  # stale positions, overwritten below
    crop_cache(cache, 5)
    again = _one_by_one(lean, ids[5:], cache)
    assert torch.equal(again, first[5:])


def test_drafting_over_the_target_cache_equals_prefilling(target):
    """The engine's path: the draft attends over the target's own K/V (no prefill of its own)."""
    lean = LeanDraftModel(target.model, DENSE)
    ids = _ids(18, lean.vocab_size, seed=4)
    cache = PreallocatedCache(32)
    with torch.inference_mode():
        target.model(input_ids=torch.tensor([ids[:15]]), cache=cache, use_cache=True)
    got = _one_by_one(lean, ids[15:], cache)
    assert torch.allclose(got, _hf_logits(target.model, ids)[15:], atol=1e-5)
    drafter = DraftModelDrafter(LoadedModel(lean, target.tokenizer, "lean"), target)
    assert drafter.use_target_cache and next(lean.parameters()).dtype == torch.float32


def test_a_draft_with_fewer_layers_keeps_a_cache_of_its_own(target):
    lean = LeanDraftModel(target.model, replace(DENSE, layers=1))
    assert lean.config.num_hidden_layers == 1
    drafter = DraftModelDrafter(LoadedModel(lean, target.tokenizer, "lean:1"), target)
    assert not drafter.use_target_cache and drafter.needs_prefill
    with pytest.raises(ValueError, match="layers must be in 1..2"):
        LeanDraftModel(target.model, LeanVariant(layers=3))


def test_trimmed_head_masks_the_ids_it_drops(target):
    lean = LeanDraftModel(target.model, replace(DENSE, head_vocab=40))
    full = LeanDraftModel(target.model, DENSE)
    ids = _ids(6, lean.vocab_size, seed=5)
    a, b = _feed(lean, ids, PreallocatedCache(8))[-1], _feed(full, ids, PreallocatedCache(8))[-1]
    assert torch.isinf(a[40:]).all() and torch.allclose(a[:40], b[:40], atol=1e-5)
    with pytest.raises(ValueError, match="trimmed LM head"):
        LeanDraftModel(target.model, LeanVariant(head="int4", head_vocab=40))


def test_the_forward_refuses_a_batch_and_a_missing_cache(target):
    lean = LeanDraftModel(target.model, DENSE)
    ids = _ids(4, lean.vocab_size, seed=6)
    with pytest.raises(ValueError, match="one sequence"):
        lean(input_ids=torch.tensor([ids, ids]), cache=PreallocatedCache(4))
    with pytest.raises(ValueError, match="needs a KV cache"):
        lean(input_ids=torch.tensor([ids]))


def test_packed_weights_are_cached_on_disk(target, tmp_path, monkeypatch):
    first = build_lean_draft(target, tmp_path)
    files = list(tmp_path.glob("lean-draft-*.pt"))
    assert len(files) == 1
    import decoding.drafters.lean.quantize as quantize

    monkeypatch.setattr(quantize, "quantize_int4_groups", lambda *a, **k: pytest.fail("re-quantized"))
    second = build_lean_draft(target, tmp_path)
    ids = _ids(8, first.model.config.vocab_size, seed=7)
    assert torch.equal(_feed(first.model, ids, PreallocatedCache(8)), _feed(second.model, ids, PreallocatedCache(8)))


def test_corrupt_cache_file_is_rebuilt(target, tmp_path):
    build_lean_draft(target, tmp_path)
    (path,) = tmp_path.glob("lean-draft-*.pt")
    path.write_bytes(b"not a checkpoint")
    draft = build_lean_draft(target, tmp_path)
    assert _feed(draft.model, [1], PreallocatedCache(4)).shape == (1, draft.model.config.vocab_size)


def test_calibration_reports_a_verdict_with_numbers(target):
    lean = LeanDraftModel(target.model, DENSE)
    prompt = _ids(40, lean.vocab_size, seed=8)
    result = measure_lean_draft(target.model, lean, prompt, answer_tokens=6, repeats=3)
    assert result.agreement == 1.0  # the dense lean copy is the target
    assert result.target_ms > 0 and result.draft_ms > 0 and result.context_tokens == 39
    refused = measure_lean_draft(target.model, lean, prompt, answer_tokens=4, repeats=3,
                                 thresholds=PayThresholds(min_ratio=1e9))
    assert refused.accept is False and "does not pay" in refused.reason and "need >= 1000000000.0x" in refused.reason
    with pytest.raises(ValueError, match="at least 2 tokens"):
        measure_lean_draft(target.model, lean, prompt[:1])


def test_loader_builds_in_the_background_and_says_why_not(target, tmp_path):
    prompt = _ids(30, int(target.model.config.vocab_size), seed=9)
    loader = LeanDraftLoader(target, tmp_path, prompt_ids=prompt).start()
    loader.wait(120)
    assert loader.done()
    assert loader.calibration is not None and loader.reason == loader.calibration.reason
    assert loader.ready() == loader.calibration.accept == (loader.draft is not None)

    class NotLlama(torch.nn.Module):
        config = target.model.config

    broken = copy.copy(target)
    broken.model = NotLlama()
    failed = LeanDraftLoader(broken, None).start()
    assert failed.wait(30) is False and failed.done()
    assert "unavailable" in failed.reason and "Llama-style" in failed.reason
