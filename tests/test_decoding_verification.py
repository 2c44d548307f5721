"""verify_greedy / verify_sampling and the sampling helpers, called directly."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from decoding.drafter import Draft
from decoding.sampling import SamplingParams, logits_to_probs, sample
from decoding.verification import verify_greedy, verify_sampling

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def one_hot_logits(rows: list[int], vocab: int = 10) -> torch.Tensor:
    logits = torch.randn(len(rows), vocab, generator=torch.Generator().manual_seed(0))
    for i, t in enumerate(rows):
        logits[i, t] = 50.0
    return logits


# -- greedy ------------------------------------------------------------------------------------------
def test_greedy_all_accepted_adds_the_bonus_token():
    assert verify_greedy([3, 4, 5], one_hot_logits([3, 4, 5, 6])) == ([3, 4, 5, 6], 3)


def test_greedy_first_mismatch_takes_the_targets_token():
    assert verify_greedy([3, 9, 5], one_hot_logits([3, 4, 5, 6])) == ([3, 4], 1)
    assert verify_greedy([9, 4, 5], one_hot_logits([3, 4, 5, 6])) == ([3], 0)  # first draft token verified too


def test_greedy_without_a_draft_is_a_plain_step():
    assert verify_greedy([], one_hot_logits([7])) == ([7], 0)


def test_greedy_a_later_match_after_a_mismatch_is_not_accepted():
    assert verify_greedy([3, 9, 5, 6], one_hot_logits([3, 4, 5, 6, 1])) == ([3, 4], 1)


# -- sampling -------------------------------------------------------------------------------------------
P0 = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05])
P1 = torch.tensor([0.05, 0.05, 0.3, 0.3, 0.3])
Q0 = torch.tensor([0.1, 0.1, 0.1, 0.2, 0.5])
Q1 = torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1])


def gof(counts: Counter, probs: torch.Tensor) -> float:
    n = sum(counts.values())
    observed = [counts.get(i, 0) for i in range(len(probs))]
    probs = probs.double() / probs.double().sum()
    return chisquare(observed, (probs * n).tolist()).pvalue


def test_sampling_point_mass_certain_and_impossible_tokens():
    g = torch.Generator().manual_seed(0)
    p = torch.stack([torch.tensor([0.0, 1.0, 0.0]), torch.tensor([0.3, 0.3, 0.4])])
    for _ in range(50):
        assert verify_sampling(Draft([1]), p, g)[1] == 1  # p(x) = 1: always accepted
        block, n = verify_sampling(Draft([0]), torch.stack([torch.tensor([0.0, 0.5, 0.5]), p[1]]), g)
        assert n == 0 and block[0] != 0  # p(x) = 0: rejected, never resampled


def test_sampling_is_reproducible_with_a_seed():
    p = torch.stack([P0, P1, P0])
    draft = Draft([4, 0], torch.stack([Q0, Q1]))
    runs = [[verify_sampling(draft, p, g) for _ in range(20)]
            for g in (torch.Generator().manual_seed(3), torch.Generator().manual_seed(3))]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("kind", ["point_mass", "draft_model"])
def test_sampling_emits_the_target_distribution(kind):
    """Draws x ~ q (or a fixed x for a point mass), verifies, and checks the emitted tokens:
    the first follows p0, the second (when the first was accepted) p1; acceptance of the
    first is sum(min(p0, q0)) for a draft model."""
    g = torch.Generator().manual_seed(1234)
    target = torch.stack([P0, P1, P0])
    first, second, accepted = Counter(), Counter(), 0
    n = 6000
    for i in range(n):
        if kind == "point_mass":
            draft = Draft([i % 2, 3])  # the n-gram drafter: q is a point mass
        else:
            draft = Draft([sample(Q0, g), sample(Q1, g)], torch.stack([Q0, Q1]))
        block, n_acc = verify_sampling(draft, target, g)
        assert len(block) == n_acc + 1 and block[:n_acc] == draft.tokens[:n_acc]
        first[block[0]] += 1
        if len(block) > 1:
            second[block[1]] += 1
        accepted += n_acc > 0
    assert gof(first, P0) > 0.01
    assert gof(second, P1) > 0.01
    if kind == "draft_model":
        assert accepted / n == pytest.approx(float(torch.minimum(P0, Q0).sum()), abs=0.03)


# -- logits processing --------------------------------------------------------------------------------
def test_logits_to_probs_temperature_top_k_top_p():
    logits = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.1]))
    assert torch.allclose(logits_to_probs(logits, 1.0), torch.tensor([0.5, 0.25, 0.15, 0.1]), atol=1e-6)
    top2 = logits_to_probs(logits, 1.0, top_k=2)
    assert torch.allclose(top2, torch.tensor([2 / 3, 1 / 3, 0, 0]), atol=1e-6)
    nucleus = logits_to_probs(logits, 1.0, top_p=0.7)  # 0.5 < 0.7 <= 0.75: keeps two tokens
    assert torch.allclose(nucleus, torch.tensor([2 / 3, 1 / 3, 0, 0]), atol=1e-6)
    assert torch.count_nonzero(logits_to_probs(logits, 1.0, top_p=0.5)) == 1
    cold, hot = logits_to_probs(logits, 0.2), logits_to_probs(logits, 5.0)
    assert cold[0] > 0.9 and hot.max() < 0.3
    batch = logits_to_probs(torch.randn(3, 7), 0.8, top_k=3, top_p=0.9)
    assert torch.allclose(batch.sum(-1), torch.ones(3)) and (torch.count_nonzero(batch, dim=-1) <= 3).all()


def test_sampling_params_seeded_generator():
    a = SamplingParams(1.0, 0, 1.0, 42, torch.device("cpu"))
    b = SamplingParams(1.0, 0, 1.0, 42, torch.device("cpu"))
    probs = torch.full((50,), 1 / 50)
    assert [sample(probs, a.generator) for _ in range(10)] == [sample(probs, b.generator) for _ in range(10)]
