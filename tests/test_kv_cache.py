"""The preallocated KV cache: bitwise the dynamic cache's attention, without the per-pass copy."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from decoding.kv.cache import PreallocatedCache, crop_cache

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.mark.parametrize("name", ["small", "large"])
@pytest.mark.parametrize("capacity", [8, 4096])  # 8: the buffers regrow several times
def test_passes_and_crops_match_the_dynamic_cache_bitwise(tiny_models, name, capacity):
    model = tiny_models.load(name).model
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    dynamic, preallocated = DynamicCache(), PreallocatedCache(capacity)
    prompt = torch.randint(0, vocab, (1, 23), generator=gen)
    with torch.inference_mode():
        outs = [model(input_ids=prompt, cache=c, use_cache=True).logits for c in (dynamic, preallocated)]
        assert torch.equal(*outs)
        length = 23
        for n, keep in [(1, 1), (3, 1), (5, 5), (2, 0), (11, 4), (1, 1), (17, 9)]:
            block = torch.randint(0, vocab, (1, n), generator=gen)
            outs = [model(input_ids=block, cache=c, use_cache=True).logits for c in (dynamic, preallocated)]
            assert torch.equal(*outs), (n, keep)
            length += keep
            for c in (dynamic, preallocated):
                crop_cache(c, length)
            assert preallocated.get_seq_length() == dynamic.get_seq_length() == length
    for a, b in zip(dynamic.layers, preallocated.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_crop_takes_transformers_negative_count():
    cache = PreallocatedCache(4)
    cache.update(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4), 0)
    with pytest.raises(ValueError, match="negative"):
        cache.layers[0].crop(2)
    cache.crop(-2)
    assert cache.get_seq_length() == 1 and cache.layers[0].keys.shape == (1, 2, 1, 4)
    cache.crop(-5)  # more than held: empty, not negative
    assert cache.get_seq_length() == 0


def test_the_prompt_views_survive_later_passes_and_growth():
    """The draft-model drafter keeps views of the target's prompt KV (no copy)."""
    cache = PreallocatedCache(4)
    prompt_keys = torch.arange(24.0).reshape(1, 2, 3, 4)
    cache.update(prompt_keys, prompt_keys, 0)
    view = cache.layers[0].keys
    for _ in range(5):  # regrows past 4 positions, rolls back, writes again
        cache.update(torch.full((1, 2, 2, 4), -1.0), torch.full((1, 2, 2, 4), -1.0), 0)
        crop_cache(cache, cache.get_seq_length() - 1)
    assert torch.equal(view, prompt_keys) and torch.equal(cache.layers[0].keys[:, :, :3], prompt_keys)


def test_beam_style_batch_reshuffles_act_on_the_buffers():
    """reorder / repeat / select (what beam search calls) then more passes: same as the dynamic cache."""
    gen = torch.Generator().manual_seed(2)
    states = [torch.randn(1, 2, n, 4, generator=gen) for n in (3, 1, 2)]
    dynamic, preallocated = DynamicCache(), PreallocatedCache(4)
    for cache in (dynamic, preallocated):
        cache.update(states[0], states[0], 0)
        cache.batch_repeat_interleave(3)
        cache.reorder_cache(torch.tensor([2, 0, 1]))
        cache.update(states[1].expand(3, -1, -1, -1), states[1].expand(3, -1, -1, -1), 0)
        cache.batch_select_indices(torch.tensor([0, 2]))
        cache.update(states[2].expand(2, -1, -1, -1), states[2].expand(2, -1, -1, -1), 0)
    a, b = dynamic.layers[0], preallocated.layers[0]
    assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values) and b.keys.shape == (2, 2, 6, 4)
