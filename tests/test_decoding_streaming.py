"""Streaming and stop handling on multi-byte text.

A scripted stand-in target (its greedy output is a fixed token list, one token per UTF-8
byte) makes multi-byte characters and stop strings split across tokens deterministic.
"""

from __future__ import annotations

import pytest

from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.core import EngineConfig
from decoding.detokenize import IncrementalDetokenizer
from decoding.planning.policy import CostModel
from decoding.stopping import StopChecker, cut_at_stop_string

pytestmark = pytest.mark.usefixtures("torch_one_thread")

TEXT = "ok café 東京 ✓ 🚀 done — stop here, then more 🚀🚀 text é"
CHEAP = CostModel(verify_ms=(1.0,) * 12)


@pytest.fixture(scope="module")
def tok(tiny_models):
    return tiny_models.load("large").tokenizer


def run(engine, prompt, config, contexts=()):
    events = list(engine.stream(prompt, config, contexts))
    result = events[-1].result
    deltas = [e.delta for e in events]
    assert "".join(deltas) == result.text
    assert [t for e in events for t in e.token_ids] == result.token_ids
    return result, deltas


def engines(scripted_target, scripted_engine, tok, prompt, continuation, **target_kw):
    """(name, engine, drafting) for plain, n-gram and oracle drafting over the scripted target."""
    target = scripted_target(tok, prompt, continuation, **target_kw)
    yield "off", SpeculativeEngine(target, costs=CHEAP), "off"
    yield "ngram", SpeculativeEngine(target, config=EngineConfig(max_ngram=3, min_ngram=1), costs=CHEAP), "ngram"
    yield "oracle", scripted_engine(target, lambda out: continuation[len(out):]), "ngram"


def test_detokenizer_never_splits_a_character(tok, byte_token_ids):
    ids = byte_token_ids(tok, TEXT)
    detok = IncrementalDetokenizer(tok)
    deltas = [detok.push(ids[: i + 1]) for i in range(len(ids))]
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) + detok.finish(tok.decode(ids)) == TEXT
    assert deltas[ids.index(byte_token_ids(tok, "東")[0])] == ""  # first byte of 東: held back


def test_detokenizer_holds_back_a_possible_stop_string(tok):
    ids = tok.encode("the disk is full")
    detok = IncrementalDetokenizer(tok, ("fully", "the cat"))
    out = "".join(detok.push(ids[: i + 1]) for i in range(len(ids)))
    assert out == "the disk is " and detok.finish("the disk is full") == "full"


@pytest.mark.parametrize("gamma", [1, 3, 10])
def test_streamed_deltas_equal_the_final_text_with_multibyte_chars(scripted_target, scripted_engine, tok,
                                                                  byte_token_ids, gamma):
    prompt = tok.encode("answer:")
    continuation = byte_token_ids(tok, TEXT)
    for name, engine, drafting in engines(scripted_target, scripted_engine, tok, prompt, continuation):
        config = GenerationConfig(budget=Budget(max_new_tokens=len(continuation), eos_token_ids=()),
                                  speculation=Speculation(drafting=drafting, num_speculative_tokens=gamma))
        result, deltas = run(engine, prompt, config, contexts=[continuation])
        assert result.token_ids == continuation and result.text == TEXT, name
        assert all("\ufffd" not in d for d in deltas), name
        assert sum(1 for d in deltas if d) > 3, name  # it really streams


@pytest.mark.parametrize("stop", ["東京", "京", "🚀", "é d", "stop here", "e, t", "🚀🚀", "x"])
@pytest.mark.parametrize("gamma", [2, 10])
def test_stop_string_split_across_byte_tokens(scripted_target, scripted_engine, tok, byte_token_ids, stop, gamma):
    """Stops at the token completing the stop string (often the last byte of a multi-byte
    character in the middle of a drafted block); the text ends just before it, streamed or not."""
    prompt = tok.encode("answer:")
    continuation = byte_token_ids(tok, TEXT)
    if stop in TEXT:
        end = len((TEXT[: TEXT.index(stop)] + stop).encode())  # tokens up to the completing byte
        want_ids, want_text, reason = continuation[:end], TEXT[: TEXT.index(stop)], "stop"
    else:
        want_ids, want_text, reason = continuation, TEXT, "length"
    for name, engine, drafting in engines(scripted_target, scripted_engine, tok, prompt, continuation):
        config = GenerationConfig(budget=Budget(max_new_tokens=len(continuation), stop_strings=(stop, "<never>"),
                                                eos_token_ids=()),
                                  speculation=Speculation(drafting=drafting, num_speculative_tokens=gamma))
        result, deltas = run(engine, prompt, config, contexts=[continuation])
        assert (result.token_ids, result.text, result.finish_reason) == (want_ids, want_text, reason), name
        assert all(stop not in d and "\ufffd" not in d for d in deltas), name


def test_earliest_of_several_stop_strings_wins(scripted_target, scripted_engine, tok, byte_token_ids):
    prompt = tok.encode("answer:")
    continuation = byte_token_ids(tok, TEXT)
    for name, engine, drafting in engines(scripted_target, scripted_engine, tok, prompt, continuation):
        config = GenerationConfig(budget=Budget(max_new_tokens=200, stop_strings=("more", "✓", "done"),
                                                eos_token_ids=()),
                                  speculation=Speculation(drafting=drafting, num_speculative_tokens=10))
        result, _ = run(engine, prompt, config, contexts=[continuation])
        assert result.text == "ok café 東京 " and result.finish_reason == "stop", name
        assert result.token_ids == continuation[: len("ok café 東京 ✓".encode())], name


def test_eos_in_a_drafted_block_ends_the_stream(scripted_target, scripted_engine, tok, byte_token_ids):
    prompt = tok.encode("answer:")
    eos = tok.eos_token_id
    continuation = byte_token_ids(tok, "東京 ok") + [eos] + byte_token_ids(tok, " after the end")
    for name, engine, drafting in engines(scripted_target, scripted_engine, tok, prompt, continuation,
                                          eos_token_id=eos):
        for gamma in (1, 4, 10):
            config = GenerationConfig(budget=Budget(max_new_tokens=100, stop_strings=("after",)),
                                      speculation=Speculation(drafting=drafting, num_speculative_tokens=gamma))
            result, _ = run(engine, prompt, config, contexts=[continuation])
            assert result.token_ids == continuation[: continuation.index(eos) + 1], (name, gamma)
            assert result.text == "東京 ok" and result.finish_reason == "eos", (name, gamma)


def test_budget_cuts_inside_a_multibyte_character(scripted_target, scripted_engine, tok, byte_token_ids):
    """``max_new_tokens`` ending mid-character: ids and text are exactly what greedy emits."""
    prompt = tok.encode("answer:")
    continuation = byte_token_ids(tok, TEXT)
    cut = len("ok café 東".encode()) - 1  # one byte short of 東
    for name, engine, drafting in engines(scripted_target, scripted_engine, tok, prompt, continuation):
        config = GenerationConfig(budget=Budget(max_new_tokens=cut, eos_token_ids=()),
                                  speculation=Speculation(drafting=drafting, num_speculative_tokens=10))
        result, _ = run(engine, prompt, config, contexts=[continuation])
        assert result.token_ids == continuation[:cut] and result.text == tok.decode(continuation[:cut]), name
        assert result.finish_reason == "length"


def test_streaming_real_model_with_stop_strings(tiny_models):
    """Streaming on a tiny random model: deltas add up to the text for several stop strings."""
    target = tiny_models.load("large")
    engine = SpeculativeEngine(target, tiny_models.load("large_noisy"), config=EngineConfig(draft_min_confidence=0.0),
                               costs=CHEAP)
    for text in ("café 東京 🚀", "restart the xrootd service"):
        prompt = target.tokenizer.encode(text)
        ref = tiny_models.greedy("large", prompt, 40)
        ref_text = target.tokenizer.decode(ref)
        for stop in (ref_text[10:12], ref_text[20:23], "zz~never"):
            for mode in ("off", "ngram", "draft_model", "auto"):
                config = GenerationConfig(budget=Budget(max_new_tokens=40, stop_strings=(stop,), eos_token_ids=()),
                                          speculation=Speculation(drafting=mode))
                result, _ = run(engine, prompt, config, contexts=[ref])
                assert result.token_ids == tiny_models.expected("large", prompt, 40, (), (stop,))[0]


# -- StopChecker --------------------------------------------------------------------------------
def test_stop_checker_cuts_a_block_at_the_first_condition(tok):
    ids = tok.encode("the disk is full; restart xrootd")
    eos = tok.eos_token_id
    checker = StopChecker(tok, frozenset({eos}), (), 100)
    assert checker.accept(ids[:3] + [eos] + ids[3:]) == ids[:3] + [eos] and checker.finish_reason == "eos"

    checker = StopChecker(tok, frozenset(), (), 5)
    assert checker.accept(ids[:3]) == ids[:3] and checker.finish_reason is None and checker.remaining == 2
    assert checker.accept(ids[3:]) == ids[3:5] and checker.finish_reason == "length"

    checker = StopChecker(tok, frozenset({eos}), ("full;",), 100)
    committed = checker.accept(ids + [eos])
    assert checker.finish_reason == "stop" and tok.decode(committed).endswith(("full;", "full; "))
    assert "full;" not in tok.decode(committed[:-1]) and checker.final_text() == "the disk is "

    checker = StopChecker(tok, frozenset(), (), 0)
    assert checker.accept(ids) == [] and checker.finish_reason == "length"


def test_cut_at_stop_string():
    assert cut_at_stop_string("abc STOP def END", ("END", "STOP")) == "abc "
    assert cut_at_stop_string("abc", ("x",)) == "abc"
    assert cut_at_stop_string("東京🚀x", ("🚀",)) == "東京"
