"""Stop strings that are (or contain) special tokens fire where ``generate(stop_strings=...)`` stops.

A tiny Llama whose tokenizer has chat special tokens (``<|im_start|>``, ``<|im_end|>``) is
wired as a deterministic chain (every token has one successor: embeddings one-hot, the
attention and MLP outputs zeroed, the LM head mapping each token to the next), so greedy
decoding writes ``" the disk is full<|im_end|><|im_start|>user tick;"`` over and over. The
engine, in every drafting mode, must stop at the token transformers' ``StopStringCriteria``
stops at, and return the text with special tokens skipped, cut before the stop string.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.backends.models import load_model
from decoding.planning.policy import CostModel

pytestmark = pytest.mark.usefixtures("torch_one_thread")

MODES = ("off", "ngram", "auto")
CHAIN = ["Ġthe", "Ġdis", "k", "Ġis", "Ġfull", "<|im_end|>", "<|im_start|>", "user", "Ġtick", ";"]
N = 40


@pytest.fixture(scope="module")
def chat(tiny_models, tmp_path_factory):
    """The chain model, saved with its tokenizer and loaded through the real path."""
    tok = AutoTokenizer.from_pretrained(tiny_models.path("small"))
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.add_tokens(["user"])
    vocab = tok.get_vocab()
    chain = [vocab[t] for t in CHAIN]
    hidden = 128
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False, eos_token_id=tok.eos_token_id, bos_token_id=None, pad_token_id=0)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.model.norm.weight.fill_(1.0)
        model.model.layers[0].input_layernorm.weight.fill_(1.0)
        model.model.layers[0].post_attention_layernorm.weight.fill_(1.0)
        for i in range(len(tok)):
            model.model.embed_tokens.weight[i, i] = 1.0
        for a, b in zip(chain, chain[1:] + chain[:1]):
            model.lm_head.weight[b, a] = 1.0
    folder = tmp_path_factory.mktemp("chat") / "chain"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    loaded = load_model(str(folder), device="cpu", dtype="float32")
    return loaded, chain


@pytest.fixture(scope="module")
def engine(chat):
    return SpeculativeEngine(chat[0], costs=CostModel(verify_ms=tuple(1.0 + 0.02 * i for i in range(17))))


def hf_stop(loaded, prompt, stop: str) -> list[int]:
    with torch.inference_mode():
        out = loaded.model.generate(torch.tensor([prompt]), max_new_tokens=N, do_sample=False, eos_token_id=None,
                                    pad_token_id=0, stop_strings=[stop], tokenizer=loaded.tokenizer)
    return out[0, len(prompt):].tolist()


def test_the_chain_writes_chat_special_tokens(chat):
    loaded, chain = chat
    with torch.inference_mode():
        out = loaded.model.generate(torch.tensor([chain[:1]]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                                    pad_token_id=0)[0, 1:].tolist()
    assert out == chain[1:] + chain[:3]
    assert loaded.tokenizer.decode(out) == " disk is full<|im_end|><|im_start|>user tick; the disk"


@pytest.mark.parametrize("stop,text", [("<|im_end|>", " disk is full"), ("<|im_start|>user", " disk is full"),
                                       ("full<|im_end|>", " disk is "), ("<|im_start|>us", " disk is full"),
                                       ("r tick", " disk is fulluse"), ("im_end|><|im", " disk is full"),
                                       ("fulluser", None)])
def test_special_token_stop_strings_stop_where_generate_stops(chat, engine, stop, text):
    """``fulluser`` occurs only in the text with special tokens skipped: generate() never stops
    on it, and neither do we (``text`` None: no stop, the budget ends it)."""
    loaded, chain = chat
    prompt = chain[:1]
    expected = hf_stop(loaded, prompt, stop)
    assert (len(expected) < N) == (text is not None)
    for mode in MODES:
        config = GenerationConfig(budget=Budget(max_new_tokens=N, stop_strings=(stop,), eos_token_ids=()),
                                  speculation=Speculation(drafting=mode))
        events = list(engine.stream(prompt, config, contexts=[chain * 3]))
        result = events[-1].result
        assert result.token_ids == expected, (stop, mode)
        assert "".join(e.delta for e in events) == result.text
        assert "<|im" not in result.text
        if text is None:
            assert result.finish_reason == "length"
        else:
            assert result.finish_reason == "stop" and result.text == text, (stop, mode, result.text)
        if mode != "off":
            assert result.stats.drafters and sum(d.accepted for d in result.stats.drafters.values()) > 0


def test_special_tokens_are_skipped_in_the_text_without_a_stop(chat, engine):
    _, chain = chat
    result = engine.generate(chain[:1], GenerationConfig(budget=Budget(max_new_tokens=12, eos_token_ids=())))
    assert result.text == " disk is fulluser tick; the disk"
