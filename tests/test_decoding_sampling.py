"""Speculative sampling emits the target's own distribution (chi-square, fixed seeds), and
a seed reproduces its sample whatever the drafting.

On a tiny model with a 24-token vocabulary at temperature 1 we compute the exact
distribution of the first three tokens (batched forward passes over every prefix) and
compare the empirical distribution of many seeded generations against it: without
speculation, with the n-gram drafter (a point mass) and with a draft model (coupled
through the same Gumbel noise, :mod:`decoding.sampling`).
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from decoding import Budget, GenerationConfig, Sampling, Speculation, SpeculativeEngine
from decoding.core import EngineConfig
from decoding.planning.policy import CostModel, PolicyConfig
from decoding.sampling import filtered_logits, logits_to_probs

pytestmark = pytest.mark.usefixtures("torch_one_thread")

N_SAMPLES = 1500
P_MIN = 0.01
CHEAP = CostModel(verify_ms=(1.0,) * 6, draft_step_ms=0.01)


@pytest.fixture(scope="module")
def micro(tiny_models):
    return tiny_models.load("micro")


@pytest.fixture(scope="module")
def prompt(micro):
    vocab = micro.model.config.vocab_size
    return [(5 * i + 3) % vocab for i in range(12)]


def exact_probs(micro, prompt, top_k: int = 0, top_p: float = 1.0):
    """Exact probabilities at temperature 1: p(x1) ``(V,)``, p(x1, x2) ``(V, V)``,
    p(x3 | x1, x2) ``(V, V, V)`` and p(x3) ``(V,)``, from batched forward passes over every prefix."""
    model, vocab = micro.model, micro.model.config.vocab_size

    def probs(batch):
        with torch.inference_mode():
            return logits_to_probs(model(torch.tensor(batch)).logits[:, -1].double(), 1.0, top_k, top_p).double()

    p1 = probs([prompt])[0]
    p2 = probs([prompt + [a] for a in range(vocab)])  # p(x2 | x1)
    p3 = probs([prompt + [a, b] for a, b in itertools.product(range(vocab), repeat=2)]).view(vocab, vocab, vocab)
    joint12 = p1[:, None] * p2
    return p1, joint12, p3, (joint12[:, :, None] * p3).sum((0, 1))


@pytest.fixture(scope="module")
def exact(micro, prompt):
    return exact_probs(micro, prompt)


@pytest.fixture(scope="module")
def passages(exact):
    """One passage per first token a: ``[a, b, c]`` with b, c the target's likeliest next two
    tokens. The n-gram drafter then proposes 2 tokens after every x1, often (not always) accepted."""
    _, joint12, p3, _ = exact
    out = []
    for a in range(joint12.shape[0]):
        b = int(joint12[a].argmax())
        out.append([a, b, int(p3[a, b].argmax())])
    return out


def pvalue(counts: Counter, probs: dict, n: int) -> float:
    """Chi-square goodness of fit, cells with expected count < 5 pooled into one."""
    observed, expected, rest_o, rest_e = [], [], 0, 0.0
    for cell, p in probs.items():
        if p * n >= 5:
            observed.append(counts.get(cell, 0))
            expected.append(p * n)
        else:
            rest_o += counts.get(cell, 0)
            rest_e += p * n
    if rest_e > 0:
        observed.append(rest_o)
        expected.append(rest_e)
    total = sum(expected)
    return chisquare(observed, [e * n / total for e in expected]).pvalue


@pytest.mark.parametrize("drafting,top_k,top_p", [("off", 0, 1.0), ("ngram", 0, 1.0), ("draft_model", 0, 1.0),
                                                   ("auto", 0, 1.0), ("ngram", 6, 0.9), ("draft_model", 6, 0.9)])
def test_first_tokens_follow_the_target_distribution(tiny_models, micro, prompt, exact, passages, drafting, top_k,
                                                     top_p):
    """x1 comes from the prefill; x2 and x3 mostly from one round that drafts 2 tokens (budget 4)."""
    p1, joint12, _, p3 = exact if (top_k, top_p) == (0, 1.0) else exact_probs(micro, prompt, top_k, top_p)
    vocab = micro.model.config.vocab_size
    engine = SpeculativeEngine(micro, tiny_models.load("micro_draft") if drafting in ("draft_model", "auto") else None,
                               config=EngineConfig(max_ngram=1, min_ngram=1, draft_min_confidence=0.0,
                                                   policy=PolicyConfig(prior_first=0.7, prior_next=0.7)),
                               costs=CHEAP)
    # "auto": passages for half of the first tokens only, so the policy drafts with the n-gram
    # drafter after those (it is cheaper at equal α) and with the draft model after the others.
    contexts = passages[::2] if drafting == "auto" else passages
    first, pairs, third = Counter(), Counter(), Counter()
    proposed = accepted = 0
    used = Counter()
    for seed in range(N_SAMPLES):
        config = GenerationConfig(budget=Budget(max_new_tokens=4, eos_token_ids=()),
                                  sampling=Sampling(temperature=1.0, top_k=top_k, top_p=top_p, seed=seed),
                                  speculation=Speculation(drafting=drafting, num_speculative_tokens=2))
        result = engine.generate(prompt, config, contexts=contexts)
        x1, x2, x3, _ = result.token_ids
        first[x1] += 1
        pairs[(x1, x2)] += 1
        third[x3] += 1
        for name, d in result.stats.drafters.items():
            proposed, accepted = proposed + d.proposed, accepted + d.accepted
            used[name] += d.proposed
    if drafting != "off":  # speculation happened, with both acceptances and rejections
        assert proposed >= N_SAMPLES and 0.2 < accepted / proposed < 0.9, (proposed, accepted)
        assert set(used) == ({"ngram", "draft_model"} if drafting == "auto" else {drafting})
        assert min(used.values()) >= 100, used
    cells = range(vocab)
    assert pvalue(first, {a: float(p1[a]) for a in cells}, N_SAMPLES) > P_MIN
    assert pvalue(pairs, {(a, b): float(joint12[a, b]) for a in cells for b in cells}, N_SAMPLES) > P_MIN
    assert pvalue(third, {a: float(p3[a]) for a in cells}, N_SAMPLES) > P_MIN


def test_same_seed_same_sample(tiny_models, micro, prompt):
    engine = SpeculativeEngine(micro, tiny_models.load("micro_draft"),
                               config=EngineConfig(min_ngram=1, draft_min_confidence=0.0), costs=CHEAP)
    for drafting in ("auto", "ngram", "draft_model"):
        config = GenerationConfig(budget=Budget(max_new_tokens=12, eos_token_ids=()),
                                  sampling=Sampling(temperature=0.8, top_k=10, top_p=0.95, seed=7),
                                  speculation=Speculation(drafting=drafting))
        assert engine.generate(prompt, config).token_ids == engine.generate(prompt, config).token_ids


COST_TABLES = [CHEAP, CostModel(verify_ms=(1.0, 1.5, 2.0, 2.5), draft_step_ms=0.5),
               CostModel(verify_ms=(1.0,) * 17, draft_step_ms=0.001)]


def test_a_seed_gives_the_same_sample_whatever_the_drafting(tiny_models, micro, prompt):
    """The token at each position depends only on (seed, position): the same sample in every
    drafting mode, at every γ (fixed or the policy's), under every cost table (a restart with
    a new calibration builds a new engine), while speculation really happens."""
    draft = tiny_models.load("micro_draft")
    samples = []
    for seed in (7, 8, 9):
        outs, proposed, accepted = set(), 0, 0
        for costs in COST_TABLES:
            engine = SpeculativeEngine(micro, draft, config=EngineConfig(min_ngram=1, draft_min_confidence=0.0),
                                       costs=costs)
            for mode in ("off", "ngram", "draft_model", "auto"):
                for gamma in (1, 3, 8):
                    for fixed in ((False, True) if mode in ("ngram", "draft_model") else (False,)):
                        config = GenerationConfig(budget=Budget(max_new_tokens=16, eos_token_ids=()),
                                                  sampling=Sampling(temperature=0.9, top_k=12, top_p=0.95, seed=seed),
                                                  speculation=Speculation(drafting=mode, num_speculative_tokens=gamma,
                                                                          mode="fixed" if fixed else "adaptive"))
                        contexts = [list(next(iter(outs)))[3:]] if outs else []  # n-gram drafts that get accepted
                        result = engine.generate(prompt, config, contexts=contexts)
                        outs.add(tuple(result.token_ids))
                        proposed += sum(d.proposed for d in result.stats.drafters.values())
                        accepted += sum(d.accepted for d in result.stats.drafters.values())
        assert len(outs) == 1, (seed, outs)
        assert proposed > 100 and 0 < accepted < proposed
        samples.append(outs.pop())
    assert len(set(samples)) == 3  # different seeds, different samples


def test_without_a_seed_draws_differ(micro, prompt):
    engine = SpeculativeEngine(micro, config=EngineConfig(min_ngram=1), costs=CHEAP)
    config = GenerationConfig(budget=Budget(max_new_tokens=12, eos_token_ids=()),
                              sampling=Sampling(temperature=1.0),
                              speculation=Speculation(drafting="ngram"))
    assert len({tuple(engine.generate(prompt, config).token_ids) for _ in range(4)}) > 1


def test_a_seed_reproduces_after_other_requests(tiny_models, micro, prompt):
    """Answers to other prompts (the engine's answer history) and the acceptance they taught
    the policy never reach a seeded sample."""
    engine = SpeculativeEngine(micro, config=EngineConfig(min_ngram=1), costs=CHEAP)
    config = GenerationConfig(budget=Budget(max_new_tokens=12, eos_token_ids=()),
                              sampling=Sampling(temperature=0.8, seed=7),
                              speculation=Speculation(drafting="ngram"))
    first = engine.generate(prompt, config).token_ids
    for other in (list(prompt[1:]), list(prompt[:-1]) + list(prompt[:3])):
        engine.generate(other, GenerationConfig(budget=Budget(max_new_tokens=20, eos_token_ids=())))
    assert len(engine.core.history) == 3
    assert engine.generate(prompt, config).token_ids == first


def test_a_tiny_temperature_is_a_point_mass_not_nan():
    probs = logits_to_probs(torch.tensor([[1.0, 2.0, 2.0 - 1e-3, -float("inf")]]), 1e-45)
    assert torch.equal(probs, torch.tensor([[0.0, 1.0, 0.0, 0.0]]))


@pytest.mark.parametrize("top_p", [1e-300, 1e-45, 0.0])
def test_a_top_p_no_token_reaches_keeps_the_most_likely_one(top_p):
    """Issue 46: ``top_p`` 1e-300 (0 in float32) once filtered out every token, and sampling then
    answered token id 0 ("!") over and over; the most likely token is always kept."""
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 5
    kept = filtered_logits(logits, 1.0, 0, top_p) > float("-inf")
    assert kept.sum(-1).tolist() == [1, 1, 1]
    assert torch.equal(kept.float().argmax(-1), logits.argmax(-1))
