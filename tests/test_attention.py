"""The grouped-query SDPA path used for verification passes: same outputs, no KV copy."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from decoding.kv.attention import GQA_SDPA, use_gqa_attention

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def test_load_model_switches_a_grouped_query_cpu_model(tiny_models):
    loaded = tiny_models.load("small")  # 4 query heads, 2 key/value heads
    assert loaded.model.config._attn_implementation == GQA_SDPA


@pytest.mark.parametrize("name", ["small", "large"])
def test_verification_logits_are_bitwise_those_of_plain_sdpa(tiny_models, name, monkeypatch):
    """Prefill, then multi-token passes over a cache: identical logits and identical caches."""
    in_place = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr("decoding.kv.attention.F.scaled_dot_product_attention",
                        lambda *a, **kw: in_place.append(kw.get("enable_gqa") and kw.get("attn_mask") is not None)
                        or sdpa(*a, **kw))
    folder = tiny_models.path(name)
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()
    ours = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()
    assert use_gqa_attention(ours) and not use_gqa_attention(ours)  # switched once; then already switched
    vocab = reference.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (1, 37), generator=gen)
    with torch.inference_mode():
        caches = DynamicCache(), DynamicCache()
        outs = [m(input_ids=prompt, cache=c, use_cache=True).logits for m, c in zip((reference, ours), caches)]
        assert torch.equal(*outs)
        for n in (1, 2, 5, 11):
            block = torch.randint(0, vocab, (1, n), generator=gen)
            outs = [m(input_ids=block, cache=c, use_cache=True).logits for m, c in zip((reference, ours), caches)]
            assert torch.equal(*outs), n
        assert any(in_place)  # masked multi-token passes took the in-place GQA branch
        for a, b in zip(caches[0].layers, caches[1].layers):
            assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_models_it_does_not_apply_to(tiny_models):
    folder = tiny_models.path("small")
    eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    assert not use_gqa_attention(eager) and eager.config._attn_implementation == "eager"
    mha = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa", num_key_value_heads=4,
                                               ignore_mismatched_sizes=True)
    assert not use_gqa_attention(mha) and mha.config._attn_implementation == "sdpa"
