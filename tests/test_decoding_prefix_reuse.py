"""Exact prefix reuse (decoding.kv.prefix_cache): the rule for what may be reused, and on the torch
backend (tiny random Llama models through the real loading path) that a question asked again
starts from the parked KV cache without a prefill and still equals ``generate()``. The
llama.cpp side (whole prefill chunks of a shared prefix) is in tests/test_llamacpp_backend.py."""

from __future__ import annotations

import pytest
import torch

from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.backends.llamacpp import chunk_ends
from decoding.core import EngineConfig
from decoding.kv.prefix_cache import PrefixCache, common_prefix, reusable_tokens
from decoding.planning.policy import CostModel

pytestmark = pytest.mark.usefixtures("torch_one_thread")

FLAT = CostModel(verify_ms=(1.0,) * 9)


def test_only_whole_prefill_chunks_short_of_the_last_token_are_reusable():
    parked = list(range(200))

    def reusable(prompt: list[int]) -> int:
        return reusable_tokens(prompt, parked, chunk_ends(len(prompt)))

    assert reusable(parked) == 200  # the same prompt: all, with its stored logits
    assert reusable(parked[:130] + [999] * 50) == 128
    assert reusable(parked[:63] + [999]) == 0
    assert reusable(parked[:128]) == 64  # a prefix of it: its last token is prefilled
    assert reusable(parked + [999] * 20) == 192  # longer: the parked tail chunk was partial
    assert reusable(parked[:196] + [999]) == 128  # its 5-token tail joins [128, 192), prefilled with it
    assert reusable_tokens(parked[:150], parked, [150]) == 0  # torch: a prompt is one forward
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2 and common_prefix([], [1]) == 0


@pytest.fixture(scope="module")
def small(tiny_models):
    return tiny_models.load("small")


def _engine(target, entries: int = 2) -> SpeculativeEngine:
    return SpeculativeEngine(target, config=EngineConfig(prefix_cache_entries=entries), costs=FLAT)


def test_a_question_asked_again_is_not_prefilled_and_equals_generate(small, tiny_models):
    engine = _engine(small)
    prompt = small.tokenizer.encode("restart the xrootd service on the disk node")
    want, _, _ = tiny_models.expected("small", prompt, 12)
    calls = []
    original = small.prefill
    small.prefill = lambda ids, cache: calls.append(len(ids)) or original(ids, cache)  # type: ignore[method-assign]
    try:
        first = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=12),
                                                         speculation=Speculation(drafting="off")))
        again = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=12),
                                                         speculation=Speculation(drafting="ngram")))
    finally:
        del small.prefill
    assert calls == [len(prompt)]
    assert first.token_ids == want and again.token_ids == want
    assert first.stats.prefix_reused_tokens == 0 and again.stats.prefix_reused_tokens == len(prompt)
    # The parked cache was copied, not consumed: a third ask reuses it too.
    assert engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=12))).token_ids == want


def test_a_shared_prefix_is_not_reused_on_torch_and_parking_is_bounded(small, tiny_models):
    engine = _engine(small, entries=2)
    texts = ["queue storage pool drain job failed timeout", "queue storage pool drain job failed again",
             "ticket link fixed: renew host cert"]
    prompts = [small.tokenizer.encode(t) for t in texts]
    for p in prompts:
        result = engine.generate(p, GenerationConfig(budget=Budget(max_new_tokens=6)))
        assert result.stats.prefix_reused_tokens == 0  # the second shares a prefix: one forward, not reused
        assert result.token_ids == tiny_models.expected("small", p, 6)[0]
    assert [list(e.prompt) for e in engine.core.prefix_cache.entries] == prompts[1:]  # the oldest was released
    off = _engine(small, entries=0)
    off.generate(prompts[0], GenerationConfig(budget=Budget(max_new_tokens=3)))
    assert off.core.prefix_cache.entries == []
    with pytest.raises(ValueError, match="max_entries"):
        PrefixCache(small, -1)


def test_a_forked_torch_cache_is_a_copy_of_the_first_positions(small):
    prompt = small.tokenizer.encode("clean tmp on the node then restart the service")
    cache = small.new_cache(8)
    small.prefill(prompt, cache)
    fork = small.fork(cache, 5, 16)
    assert fork.get_seq_length() == 5 and cache.get_seq_length() == len(prompt)
    for a, b in zip(cache.layers, fork.layers, strict=True):
        assert torch.equal(a.keys[:, :, :5], b.keys) and torch.equal(a.values[:, :, :5], b.values)
    small.forward([([prompt[5]], fork)])
    assert cache.get_seq_length() == len(prompt)  # the source is untouched
    with pytest.raises(ValueError, match="cannot copy"):
        small.fork(cache, len(prompt) + 1, 4)


def test_the_reuse_eval_times_asked_again_and_follow_ups_through_the_service(sample_service):
    from evals.prefix_reuse import reuse_markdown, run_reuse
    from evals.questions import Question

    asked = [Question("q1", "What was the resolution of OPS-107?", "", "")]
    follow = [Question("f1", "which command restarted it?", "", "", first="Why did dc-pool-07 go offline?")]
    result = run_reuse(sample_service, asked, follow, max_new_tokens=4)
    again = result["asked_again"]
    assert again["cases"] == 1 and again["identical"] == 1 and again["reused_share"] == 1.0
    assert again["retrieval_ms"] > 0 and again["bare_ttft_ms"] is None
    assert result["follow_up"]["bare_ttft_ms"] > 0  # the follow-up before conversations: bare history, no reuse
    assert result["follow_up"]["identical"] == result["follow_up"]["cases"]
    assert "| asked again | 1 |" in reuse_markdown(result)
    prefix_cache = sample_service.models.engine.core.prefix_cache
    assert prefix_cache.max_entries == 2 and not prefix_cache.entries
