"""The lean (gpt-fast-style) draft forward of decoding.lean_draft on tiny random Llamas.

What is checked: the lean forward computes what the transformers forward of the same
weights computes (dense: to float32 rounding; int4/int8: against the dequantized
weights, to bfloat16 rounding); the KV cache crops and regrows without changing a
result; starting from the target's K/V equals prefilling; packed weights round-trip
through the disk cache; the background loader and the calibration report a verdict.
"""

from __future__ import annotations

import copy

import pytest
import torch

from decoding.kv_cache import PreallocatedCache
from decoding.lean_draft import (
    LeanDraftLM,
    LeanDraftLoader,
    LeanDraftModel,
    LeanKVCache,
    PackedLinear,
    build_lean_draft,
    calibrate_lean_draft,
    dequantize_int4_groups,
    measure_lean_draft,
    quantize_int4_groups,
    quantize_int8_rows,
)

DENSE = {"quant": "dense", "head": "dense", "act_dtype": torch.float32}


@pytest.fixture
def target(tiny_models, torch_one_thread):
    return tiny_models.load("small")


def _ids(n: int, vocab: int, seed: int = 0) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@torch.inference_mode()
def _hf_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([ids])).logits[0].float()


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
                mod.weight.copy_(dequantize_int4_groups(codes, sz.bfloat16(), 32))
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
    assert torch.allclose(dequantize_int4_groups(codes, sz, 32), w, atol=1e-6)


@pytest.mark.parametrize("kind", ["int4", "int8", "dense"])
def test_packed_linear_matches_its_dequantized_matmul(kind):
    gen = torch.Generator().manual_seed(1)
    w, x = torch.randn(64, 128, generator=gen) * 0.1, torch.randn(3, 128, generator=gen)
    lin = PackedLinear(w, kind=kind, act_dtype=torch.bfloat16)
    if kind == "int4":
        codes, sz = quantize_int4_groups(w, 32)
        ref_w = dequantize_int4_groups(codes, sz.bfloat16(), 32)
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
    lean = LeanDraftModel(target.model, **DENSE)
    ids = _ids(20, lean.vocab_size)
    ref = _hf_logits(target.model, ids)
    lean.reset(4)  # small on purpose: the cache regrows
    multi = lean.step(ids[:12], all_logits=True)
    singles = torch.stack([lean.step([t]) for t in ids[12:]])
    assert torch.allclose(multi, ref[:12], atol=1e-5)
    assert torch.allclose(singles, ref[12:], atol=1e-5)
    assert lean.length == 20 and lean.cache.capacity >= 20


@pytest.mark.parametrize("quant", ["int4", "int8"])
def test_quantized_lean_forward_matches_transformers_on_the_same_weights(target, quant):
    lean = LeanDraftModel(target.model, quant=quant)
    ref_model = _dequantized_copy(target.model, quant)
    ids = _ids(16, lean.vocab_size, seed=2)
    ref = _hf_logits(ref_model, ids)
    lean.reset(32)
    got = torch.stack([lean.step([t]) for t in ids])
    # bf16 activations into the packed matmuls: bf16-level differences, same ranking.
    assert (got - ref).abs().max() < 0.05 * ref.abs().max()
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9


def test_crop_then_refeed_gives_the_same_logits(target):
    lean = LeanDraftModel(target.model, quant="int4")
    ids = _ids(12, lean.vocab_size, seed=3)
    lean.reset(2)
    first = torch.stack([lean.step([t]) for t in ids])  # one token at a time: the same kernels as below
    lean.crop(5)
    assert lean.length == 5
    lean.step([1, 2, 3])  # stale positions, overwritten below
    lean.crop(5)
    again = torch.stack([lean.step([t]) for t in ids[5:]])
    assert torch.equal(again, first[5:])


def test_starting_from_the_target_cache_equals_prefilling(target):
    lean = LeanDraftModel(target.model, **DENSE)
    ids = _ids(18, lean.vocab_size, seed=4)
    cache = PreallocatedCache(32)
    with torch.inference_mode():
        target.model(input_ids=torch.tensor([ids[:15]]), cache=cache, use_cache=True)
    assert lean.prefill_from_target_cache(cache, reserve=1) == 15
    got = torch.stack([lean.step([t]) for t in ids[15:]])
    assert torch.allclose(got, _hf_logits(target.model, ids)[15:], atol=1e-5)


def test_kv_cache_rejects_a_foreign_layout():
    cache = LeanKVCache(layers=2, kv_heads=2, head_dim=16, capacity=8)
    with pytest.raises(ValueError, match="layers"):
        cache.load_prefix([(torch.zeros(1, 2, 4, 16), torch.zeros(1, 2, 4, 16))])
    with pytest.raises(ValueError, match="layout"):
        cache.load_prefix([(torch.zeros(1, 3, 4, 16), torch.zeros(1, 3, 4, 16))] * 2)


def test_trimmed_head_masks_the_ids_it_drops(target):
    lean = LeanDraftModel(target.model, **{**DENSE, "head_vocab": 40})
    full = LeanDraftModel(target.model, **DENSE)
    ids = _ids(6, lean.vocab_size, seed=5)
    lean.reset(8), full.reset(8)
    a, b = lean.step(ids), full.step(ids)
    assert torch.isinf(a[40:]).all() and torch.allclose(a[:40], b[:40], atol=1e-5)


def test_transformers_facade_drives_a_preallocated_cache(target):
    lm = LeanDraftLM(LeanDraftModel(target.model, **DENSE), target.model.generation_config)
    ids = _ids(10, lm.config.vocab_size, seed=6)
    cache = PreallocatedCache(4)
    lm(input_ids=torch.tensor([ids[:7]]), cache=cache, use_cache=True)
    out = lm(input_ids=torch.tensor([ids[7:]]), cache=cache, use_cache=True, logits_to_keep=1).logits
    assert out.shape == (1, 1, lm.config.vocab_size)
    assert torch.allclose(out[0, -1], _hf_logits(target.model, ids)[-1], atol=1e-5)
    assert next(lm.parameters()).dtype == torch.float32
    with pytest.raises(ValueError, match="one sequence"):
        lm(input_ids=torch.tensor([ids, ids]), cache=PreallocatedCache(4))


def test_packed_weights_are_cached_on_disk(target, tmp_path, monkeypatch):
    first = build_lean_draft(target, tmp_path)
    files = list(tmp_path.glob("lean-draft-*.pt"))
    assert len(files) == 1
    import decoding.lean_draft as ld

    monkeypatch.setattr(ld, "quantize_int4_groups", lambda *a, **k: pytest.fail("re-quantized"))
    second = build_lean_draft(target, tmp_path)
    ids = _ids(8, first.model.config.vocab_size, seed=7)
    for lm in (first.model, second.model):
        lm.lean.reset(8)
    assert torch.equal(first.model.lean.step(ids), second.model.lean.step(ids))


def test_corrupt_cache_file_is_rebuilt(target, tmp_path):
    build_lean_draft(target, tmp_path)
    (path,) = tmp_path.glob("lean-draft-*.pt")
    path.write_bytes(b"not a checkpoint")
    draft = build_lean_draft(target, tmp_path)
    draft.model.lean.reset(4)
    assert draft.model.lean.step([1]).shape == (draft.model.config.vocab_size,)


def test_calibration_reports_a_verdict_with_numbers(target):
    lean = LeanDraftModel(target.model, **DENSE)
    prompt = _ids(40, lean.vocab_size, seed=8)
    result = measure_lean_draft(target.model, lean, prompt, answer_tokens=6, repeats=3)
    assert result.agreement == 1.0  # the dense lean copy is the target
    assert result.target_ms > 0 and result.draft_ms > 0 and result.context_tokens == 39
    accept, reason = calibrate_lean_draft(target, lean, prompt, answer_tokens=4, repeats=3, min_ratio=1e9)
    assert accept is False and "does not pay" in reason and "need >= 1000000000.0x" in reason


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
