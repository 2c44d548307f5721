"""The library never deadlocks (issue 23, item 4), each case bounded by a thread timeout on a
real tiny model: ``g1 = engine.stream(p1); g2 = engine.stream(p2); next(g1); next(g2)`` works
(no lock is held across ``yield``), and a suspended stream that nobody consumes blocks no
other thread. (tests/test_decoding_batching.py checks the interleaved outputs are exact.)"""

from __future__ import annotations

import threading

import pytest

from decoding import Budget, GenerationConfig, SpeculativeEngine
from decoding.planning.policy import CostModel

pytestmark = pytest.mark.usefixtures("torch_one_thread")

FLAT = CostModel(verify_ms=(1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12, 1.14, 1.16))
CONFIG = GenerationConfig(budget=Budget(max_new_tokens=12, eos_token_ids=()))
TIMEOUT_S = 60


def _in_thread(work) -> dict:
    """Run ``work()`` in a daemon thread; fail (instead of hanging) when it is not done in time."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = work()
        except BaseException as exc:  # reported to the test below
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(TIMEOUT_S)
    assert not thread.is_alive(), "deadlock: the engine call did not return"
    if "error" in out:
        raise out["error"]
    return out


@pytest.fixture(scope="module")
def engine_and_prompts(tiny_models):
    small = tiny_models.load("small")
    prompts = [small.tokenizer.encode(t) for t in ("restart the xrootd service", "the disk is full again")]
    return SpeculativeEngine(small, costs=FLAT), prompts


def test_the_issue_sequence_in_one_thread_works(engine_and_prompts, tiny_models):
    engine, (p1, p2) = engine_and_prompts

    def issue():
        g1, g2 = engine.stream(p1, CONFIG), engine.stream(p2, CONFIG)
        first = [next(g1), next(g2)]
        return first + list(g1) + list(g2), g1, g2

    events, _, _ = _in_thread(issue)["value"]
    results = [e.result for e in events if e.result is not None]
    assert [r.token_ids for r in results] == [tiny_models.expected("small", p, 12, eos=())[0] for p in (p1, p2)]


def test_a_suspended_unconsumed_stream_blocks_no_other_thread(engine_and_prompts, tiny_models):
    engine, (p1, p2) = engine_and_prompts
    suspended = engine.stream(p1, CONFIG)
    next(suspended)  # started, then left suspended (never consumed, never closed)
    other = _in_thread(lambda: engine.generate(p2, CONFIG))["value"]
    assert other.token_ids == tiny_models.expected("small", p2, 12, eos=())[0]
    rest = _in_thread(lambda: [e for e in suspended if e.result is not None])["value"]  # resumes afterwards
    assert rest[-1].result.token_ids == tiny_models.expected("small", p1, 12, eos=())[0]
