"""Shared pieces of the engine edge-case tests (test_decoding_edge_cases.py and
test_decoding_draft_model_edges.py): a cheap cost model, the drafting modes, the small target
and its engine (fixtures, loaded with ``pytest_plugins = ["decoding_edges"]``), and the check
that an answer equals plain greedy decoding."""

from __future__ import annotations

import pytest

from decoding import SpeculativeEngine
from decoding.core import EngineConfig
from decoding.planning.policy import CostModel

CHEAP = CostModel(verify_ms=(1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07, 1.08, 1.09, 1.1, 1.11), draft_step_ms=0.01)
MODES = ("off", "ngram", "draft_model", "auto")


@pytest.fixture(scope="module")
def small(tiny_models):
    return tiny_models.load("small")


@pytest.fixture(scope="module")
def engine(tiny_models, small):
    """Small target with a truncated (own-prefill) draft model; every drafter always drafts."""
    return SpeculativeEngine(small, tiny_models.load("small_trunc"), config=EngineConfig(draft_min_confidence=0.0),
                             costs=CHEAP)


def prompt_of(small, text="the disk is full; restart xrootd") -> list[int]:
    return small.tokenizer.encode(text)


def check(tiny_models, engine, prompt, config, contexts=(), name="small"):
    result = engine.generate(prompt, config, contexts)
    ids, text, reason = tiny_models.expected(name, prompt, config.budget.max_new_tokens, config.budget.eos_token_ids,
                                             config.budget.stop_strings)
    assert (result.token_ids, result.text, result.finish_reason) == (ids, text, reason), config
    return result
