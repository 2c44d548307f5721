"""verify_greedy, the Gumbel-max token selector and the sampling helpers, called directly."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy.stats import chisquare
from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor

from decoding.sampling import (
    TokenSelector,
    filtered_logits,
    gumbel_noise,
    logits_to_probs,
    position_seed,
)
from decoding.verification import verify_greedy

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


# -- sampling: Gumbel-max with noise from (seed, position) ------------------------------------------
P0 = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05])
Q0 = torch.tensor([0.1, 0.1, 0.1, 0.2, 0.5])


def gof(counts: Counter, probs: torch.Tensor) -> float:
    n = sum(counts.values())
    observed = [counts.get(i, 0) for i in range(len(probs))]
    probs = probs.double() / probs.double().sum()
    keep = probs > 0
    assert all(counts.get(i, 0) == 0 for i in range(len(probs)) if not keep[i])  # impossible tokens never drawn
    return chisquare([o for o, k in zip(observed, keep) if k], (probs[keep] * n).tolist()).pvalue


def test_position_seed_is_a_fixed_function_of_seed_and_position():
    """The same (seed, position) gives the same seed in every process (no salted hash())."""
    assert position_seed(0, 0) == position_seed(0, 0) and 0 <= position_seed(2**63 - 1, 10**9) < 2**63
    assert position_seed(7, 3) == 3879072848308665546
    assert len({position_seed(s, t) for s in range(20) for t in range(20)}) == 400
    a = gumbel_noise(7, 3, 100, torch.device("cpu"))
    assert torch.equal(a, gumbel_noise(7, 3, 100, torch.device("cpu"), torch.Generator().manual_seed(99)))
    assert not torch.equal(a, gumbel_noise(7, 4, 100, torch.device("cpu")))
    assert torch.isfinite(a).all()


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 3, 1.0), (1.3, 0, 0.8)])
def test_gumbel_max_draws_the_processed_distribution(temperature, top_k, top_p):
    """argmax(filtered logits + Gumbel noise) over many seeds follows logits_to_probs exactly."""
    logits = torch.log(P0)
    probs = logits_to_probs(logits, temperature, top_k, top_p)
    counts = Counter(TokenSelector(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed).choose([], logits)
                     for seed in range(6000))
    assert gof(counts, probs) > 0.01


def test_a_position_draws_independently_of_the_previous_one():
    """Positions 0 and 1 of one seed: the pair is distributed as the product of the marginals."""
    logits = torch.stack([torch.log(P0), torch.log(Q0)])
    pairs = Counter()
    for seed in range(6000):
        scores = TokenSelector(temperature=1.0, seed=seed).scores([], [0], logits)
        pairs[tuple(scores.argmax(-1).tolist())] += 1
    joint = (P0[:, None] * Q0[None, :]).flatten()
    assert gof(Counter({a * 5 + b: n for (a, b), n in pairs.items()}), joint) > 0.01


def test_scores_rows_are_the_choices_at_their_own_positions():
    """Row i of a verification pass chooses what one-token decoding at that position would:
    the same noise (seed, position) and the processors applied to prefix + draft[:i]."""
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(4, 30, generator=gen)
    prompt, output, draft = [1, 2, 3], [4, 5], [6, 7, 8]
    for temperature in (0.0, 0.9):
        selector = TokenSelector(LogitsProcessorList([RepetitionPenaltyLogitsProcessor(3.0)]), temperature,
                                 seed=11, prompt_length=len(prompt))
        scores = selector.scores(prompt + output, draft, logits)
        for i in range(4):
            assert int(scores[i].argmax()) == selector.choose(prompt + output + draft[:i], logits[i])
        penalised = selector.process(prompt + output, draft, logits)
        assert torch.equal(penalised[3], RepetitionPenaltyLogitsProcessor(3.0)(
            torch.tensor([prompt + output + draft]), logits[3:4].clone())[0])
        assert not torch.equal(penalised[0], logits[0])


def test_greedy_without_processors_passes_logits_through():
    logits = torch.randn(3, 10, dtype=torch.bfloat16)
    assert TokenSelector().scores([1, 2], [3, 4], logits) is logits


def test_unseeded_selectors_draw_differently():
    logits = torch.zeros(1000)
    assert len({TokenSelector(temperature=1.0).choose([], logits) for _ in range(5)}) > 1


def test_the_coupled_draft_agrees_with_the_target_as_gumbel_coupling_promises():
    """A draft choosing argmax(log q + g) with the target's noise is accepted with
    probability >= (1 - TV) / (1 + TV) (Daliri et al. 2024), here with a point on which both agree."""
    n, agree = 4000, 0
    for seed in range(n):
        selector = TokenSelector(temperature=1.0, seed=seed)
        x, _ = selector.choose_with_confidence([], torch.log(Q0))
        block, n_accepted = verify_greedy([x], selector.scores([], [x], torch.log(torch.stack([P0, P0]))))
        assert block[0] == selector.choose([], torch.log(P0))  # the target's own sample either way
        agree += n_accepted
    tv = 0.5 * float((P0 - Q0).abs().sum())
    assert agree / n >= (1 - tv) / (1 + tv) - 0.02


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


def test_filtered_logits_are_log_probabilities_up_to_a_constant():
    logits = torch.randn(2, 9)
    f = filtered_logits(logits, 0.8, top_k=4, top_p=0.9)
    assert torch.allclose(torch.softmax(f, -1), logits_to_probs(logits, 0.8, 4, 0.9))
    assert (f.max(-1).values == 0).all() and (torch.isinf(f).sum(-1) >= 5).all()
