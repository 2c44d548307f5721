"""The few-token linear forward: same products as F.linear up to fp32 summation order, only
inside few_token_passes(), never for one token, and the engine stays exact with it."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, DynamicCache

from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.backends.few_token_linear import (
    MAX_ROWS,
    few_token_linear,
    few_token_passes,
    use_few_token_linear,
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 2), (1, 5), (3, 4), (1, MAX_ROWS), (2,)])
def test_matches_f_linear(shape, bias):
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 40, bias=bias)
    x = torch.randn(*shape, 24)
    with few_token_passes():
        out = few_token_linear(layer, x)
    assert out.shape == (*shape, 40) and out.is_contiguous() and out.dtype == torch.float32
    torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-6)


def test_plain_f_linear_outside_the_block_for_one_row_and_above_max_rows(monkeypatch):
    layer = torch.nn.Linear(8, 8)
    calls = []
    monkeypatch.setattr("decoding.backends.few_token_linear.torch.mm", lambda *a: calls.append(1) or torch.mm(*a))
    for x in (torch.randn(1, 4, 8), torch.randn(1, 1, 8), torch.randn(1, MAX_ROWS + 1, 8)):
        assert torch.equal(few_token_linear(layer, x), F.linear(x, layer.weight, layer.bias))
    with few_token_passes():
        for x in (torch.randn(1, 1, 8), torch.randn(1, MAX_ROWS + 1, 8)):
            assert torch.equal(few_token_linear(layer, x), F.linear(x, layer.weight, layer.bias))
    assert not calls


def test_the_switch_is_per_thread():
    seen = []
    with few_token_passes():
        from decoding.backends.few_token_linear import _ACTIVE

        worker = threading.Thread(target=lambda: seen.append(_ACTIVE.get()))
        worker.start()
        worker.join(timeout=10)
        assert _ACTIVE.get()
    assert seen == [False] and not _ACTIVE.get()


def test_installed_on_fp32_cpu_linears_only_and_once(tiny_models):
    folder = tiny_models.path("small")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    linears = sum(type(m) is torch.nn.Linear for m in model.modules())
    assert use_few_token_linear(model) == linears > 0
    assert use_few_token_linear(model) == 0  # already switched
    bf16 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    assert use_few_token_linear(bf16) == 0
    loaded = tiny_models.load("small")  # the real loading path switches them
    assert all("forward" in vars(m) for m in loaded.model.modules() if type(m) is torch.nn.Linear)


def test_model_passes_agree_and_one_token_steps_are_bitwise(tiny_models):
    folder = tiny_models.path("large")
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ours = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    use_few_token_linear(ours)
    vocab = reference.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (1, 41), generator=gen)
    caches = DynamicCache(), DynamicCache()
    with torch.inference_mode(), few_token_passes():
        outs = [m(input_ids=prompt, cache=c, use_cache=True).logits for m, c in zip((reference, ours), caches)]
        assert torch.equal(*outs)  # a 41-token prefill keeps F.linear
        for n in (1, 1, 2, 5, 9, 1):
            block = torch.randint(0, vocab, (1, n), generator=gen)
            a, b = (m(input_ids=block, cache=c, use_cache=True).logits for m, c in zip((reference, ours), caches))
            if n == 1 and caches[0].get_seq_length() <= 43:  # caches still bitwise equal
                assert torch.equal(a, b)
            else:
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
                assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_engine_with_it_still_equals_generate(tiny_models):
    """Multi-token verification passes go through the few-token forward; the output is still
    plain greedy's (the ids of model.generate) for every drafting mode."""
    loaded = tiny_models.load("large")
    engine = SpeculativeEngine(loaded)
    prompt = list(range(5, 25)) * 3
    expected = tiny_models.greedy("large", prompt, 48)
    for mode in ("off", "ngram", "auto"):
        out = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=48, eos_token_ids=()),
                                                       speculation=Speculation(drafting=mode)),
                              [prompt])
        assert out.token_ids == expected, mode
