"""Long stop strings keep streaming (issue 23): the stream holds back only the tail of the
output that a stop string starts with, not the stop string's length, so a 2,000-character
stop string no longer turns the answer into one final event; the text is unchanged."""

from __future__ import annotations

import pytest

from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.core import EngineConfig
from decoding.detokenize import IncrementalDetokenizer, pending_stop_length
from decoding.planning.policy import CostModel

pytestmark = pytest.mark.usefixtures("torch_one_thread")

TEXT = "ok café 東京 ✓ 🚀 done — stop here, then more 🚀🚀 text é, and the pool is back"
CHEAP = CostModel(verify_ms=(1.0,) * 12)
LONG = "~" * 2000  # the 2,000-character stop string


@pytest.fixture(scope="module")
def tok(tiny_models):
    return tiny_models.load("large").tokenizer


def test_pending_stop_length_is_the_longest_overlap():
    assert pending_stop_length("the disk is fu", ["full"]) == 2
    assert pending_stop_length("the disk is fu", ["x" * 2000, "fuzz", "u"]) == 2
    assert pending_stop_length("aaa", ["aab"]) == 2
    assert pending_stop_length("the disk", [LONG]) == 0
    assert pending_stop_length("full", ["full"]) == 0  # a whole stop string is no longer pending
    assert pending_stop_length("", ["a"]) == 0


def test_detokenizer_with_a_long_stop_string_streams_everything_it_can(tok):
    ids = tok.encode("the disk is full")
    detok = IncrementalDetokenizer(tok, (LONG, "full" + LONG))
    out = "".join(detok.push(ids[: i + 1]) for i in range(len(ids)))
    assert out == "the disk is " and detok.finish("the disk is full") == "full"


def _stream(engine, prompt, config, contexts):
    events = list(engine.stream(prompt, config, contexts))
    return events[-1].result, [e.delta for e in events]


@pytest.mark.parametrize("stop, tail", [
    (LONG, ""),                                            # never occurs
    ("stop here, then more " + "z" * 1979, ""),            # starts like the text, then diverges
    ("the pool is back" + LONG[:1984], ""),                # its start is the text's last words
    ("§" + LONG[:1999], "§" + LONG[:1999] + " and after"),  # occurs: the text ends before it
])
def test_a_2000_character_stop_string_keeps_streaming(scripted_target, scripted_engine, tok, byte_token_ids,
                                                      stop, tail):
    assert len(stop) == 2000
    prompt = tok.encode("answer:")
    continuation = byte_token_ids(tok, TEXT + tail)
    target = scripted_target(tok, prompt, continuation, max_positions=len(prompt) + len(continuation) + 8)
    engines = [("off", SpeculativeEngine(target, costs=CHEAP)),
               ("ngram", SpeculativeEngine(target, config=EngineConfig(max_ngram=3, min_ngram=1), costs=CHEAP)),
               ("ngram", scripted_engine(target, lambda out: continuation[len(out):]))]
    for drafting, engine in engines[-1:] if tail else engines:  # 2,000 more tokens to check: one engine
        config = GenerationConfig(budget=Budget(max_new_tokens=len(continuation), stop_strings=(stop,),
                                                eos_token_ids=()),
                                  speculation=Speculation(drafting=drafting, num_speculative_tokens=8))
        whole = engine.generate(prompt, config, [continuation])
        result, deltas = _stream(engine, prompt, config, [continuation])
        assert whole.text == result.text == TEXT and "".join(deltas) == TEXT
        assert result.finish_reason == ("stop" if tail else "length")
        assert sum(1 for d in deltas[:-1] if d) >= 5, deltas  # several delta events before the final one
        assert len(deltas[-1]) < len(TEXT) // 2, deltas


def test_a_2000_character_stop_string_streams_on_a_real_tiny_model(tiny_models):
    target = tiny_models.load("large")
    engine = SpeculativeEngine(target, tiny_models.load("large_noisy"), config=EngineConfig(draft_min_confidence=0.0),
                               costs=CHEAP)
    prompt = target.tokenizer.encode("restart the xrootd service")
    for stop in (LONG, "zz" + LONG[:1998]):
        for mode in ("off", "ngram", "draft_model"):
            config = GenerationConfig(budget=Budget(max_new_tokens=40, stop_strings=(stop,)),
                                      speculation=Speculation(drafting=mode))
            whole = engine.generate(prompt, config)
            result, deltas = _stream(engine, prompt, config, [])
            assert "".join(deltas) == result.text == whole.text and result.token_ids == whole.token_ids, mode
            assert sum(1 for d in deltas[:-1] if d) >= 3, (mode, deltas)
