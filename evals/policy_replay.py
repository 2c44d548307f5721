"""The drafting policy replayed offline: its share of the hindsight bound in seconds, not minutes.

``copilot eval latency`` times every mode on the real target (10–15 minutes a set on 2 cores). The
policy's choices, though, depend only on what the drafters offer and what greedy decoding accepts,
so once the target's greedy answers are recorded (:func:`record`: one real greedy decode a question)
the policy can run again and again over a :class:`ReplayTarget`, whose argmax at every position is
the recorded answer: the real engine (batch, round plan, policy, shadows, n-gram drafter, answer
history) decides, and its schedule (γ per pass) is priced at the calibrated pass costs, like the
latency eval's ``policy share`` (:func:`evals.oracle.schedule_ms`). Timing noise is absent, so two
policies compare on the same answers.

Beside the policy as it serves (its acceptance table learned as the questions go by), the replay
prices a *hindsight-calibrated table*: every drafting state's acceptance measured on the set's own
answers (:func:`evals.oracle.state_acceptance`) and frozen, the best a policy that keys on the
drafter's states (match length, agreement, source) can know. Where the two read alike, the policy
learns what its states can tell, and the rest of the gap to the bound is what those states do not
predict (Leviathan et al. 2023 price a round by one acceptance rate; the bound knows each token).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Sequence

import torch

from decoding import Budget, DraftingMode, GenerationConfig, Speculation, SpeculativeEngine
from decoding.backends.target import Target
from decoding.core import EngineConfig
from decoding.drafters.ngram import NGramDrafter
from decoding.planning.policy import CostModel
from evals.harness import Case
from evals.latency import run_ours
from evals.oracle import Position, bound, replay, schedule_ms, state_acceptance

#: Pseudo-rounds of a hindsight-calibrated prior: no count the replay books can move it.
FROZEN = 1e9


@dataclass(frozen=True)
class Recorded:
    """One question's greedy answer as the target gave it, with what the drafters read.

    Attributes:
        id: the question id.
        prompt_ids: the prompt's token ids.
        context_ids: the retrieved passages' token ids (the n-gram drafter's seeds).
        answer_ids: the greedy answer's token ids, cut by the stops users get.
    """

    id: str
    prompt_ids: list[int]
    context_ids: list[list[int]]
    answer_ids: list[int]


def record(engine: SpeculativeEngine, cases: Sequence[Case], max_new_tokens: int, loop_span: int) -> list[Recorded]:
    """Each case's greedy answer from ``engine``'s real target (our loop, no drafting), in order.

    Costs one plain decode of ``max_new_tokens`` a case (about 8 s for the 1.5B on 2 cores)."""
    return [Recorded(c.question.id, c.prompt_ids, c.context_ids,
                     run_ours(engine, "ours_off", c, max_new_tokens, loop_span).tokens) for c in cases]


@dataclass
class _Cache:
    """A replayed request's KV cache: the token ids it holds."""

    ids: list[int] = field(default_factory=list)

    def get_seq_length(self) -> int:
        return len(self.ids)


class ReplayTarget:
    """A :class:`~decoding.backends.target.Target` whose greedy choice after every prefix of the
    current answer (:meth:`expect`) is the answer's next token, and an end-of-sequence token after
    any other prefix; tokenizer, vocabulary, EOS and chunking are the recorded target's.

    Logits are one-hot float32 ``(vocab,)`` rows on the CPU: verification reads only their argmax.
    """

    backend = "replay"
    generation_defaults: dict[str, object] = {}
    packed = True
    device = torch.device("cpu")
    dtype = torch.float32

    def __init__(self, target: Target) -> None:
        self.name, self.tokenizer = f"replay of {target.name}", target.tokenizer
        self.model_type, self.max_positions = target.model_type, target.max_positions
        self.vocab_size, self.chunk_ends = target.vocab_size, target.chunk_ends
        self._eos = target.eos_token_ids() or (0,)
        self._prompt: list[int] = []
        self._answer: list[int] = []

    def expect(self, prompt_ids: Sequence[int], answer_ids: Sequence[int]) -> None:
        """The answer the next requests replay (for this prompt)."""
        self._prompt, self._answer = list(prompt_ids), list(answer_ids)

    def eos_token_ids(self) -> tuple[int, ...]:
        return tuple(self._eos)

    def new_cache(self, capacity: int) -> _Cache:
        return _Cache()

    def _next(self, ids: list[int]) -> torch.Tensor:
        n = len(ids) - len(self._prompt)
        on_track = 0 <= n < len(self._answer) and ids[len(self._prompt):] == self._answer[:n]
        logits = torch.zeros(self.vocab_size)
        logits[self._answer[n] if on_track else self._eos[0]] = 1.0
        return logits

    def prefill(self, prompt_ids: Sequence[int], cache: _Cache) -> torch.Tensor:
        cache.ids += prompt_ids
        return self._next(cache.ids)

    def forward(self, rows: Sequence[tuple[Sequence[int], _Cache]]) -> list[torch.Tensor]:
        out = []
        for tokens, cache in rows:
            start = len(cache.ids)
            cache.ids += tokens
            out.append(torch.stack([self._next(cache.ids[:start + k + 1]) for k in range(len(tokens))]))
        return out

    def rollback(self, cache: _Cache, keep: int) -> None:
        del cache.ids[keep:]

    def release(self, cache: _Cache) -> None:
        cache.ids.clear()

    def fork(self, cache: _Cache, keep: int, capacity: int) -> _Cache:
        return _Cache(cache.ids[:keep])


@dataclass(frozen=True)
class ReplayedQuestion:
    """One question's replay.

    Attributes:
        id: the question id.
        tokens: the answer's length (tokens).
        oracle_speedup: the hindsight bound over one-token steps (:func:`evals.oracle.bound`).
        policy_share: the policy's schedule priced like the bound, as a share of it (the mean of
            the repeats).
        calibrated_share: the same with the hindsight-calibrated table.
    """

    id: str
    tokens: int
    oracle_speedup: float
    policy_share: float
    calibrated_share: float


def _shares(engine: SpeculativeEngine, target: ReplayTarget, answers: Sequence[Recorded], bounds: Sequence[float],
            costs: CostModel, budget: Budget, repeats: int) -> list[float]:
    """Each answer's policy share (the mean over ``repeats`` replays), questions in order, on ``engine``
    over ``target``."""
    config = GenerationConfig(budget=budget, speculation=Speculation(drafting=DraftingMode.AUTO))
    shares = []
    for answer, speedup in zip(answers, bounds, strict=True):
        target.expect(answer.prompt_ids, answer.answer_ids)
        plain = (len(answer.answer_ids) - 1) * costs.verify(1)
        got = []
        for _ in range(repeats):
            engine.core.prefix_cache.clear()
            ms = schedule_ms(engine.generate(answer.prompt_ids, config, answer.context_ids).stats.gammas, costs)
            got.append(plain / ms / speedup if ms else 1.0)
        shares.append(statistics.mean(got))
    return shares


def replay_policy(target: Target, answers: Sequence[Recorded], costs: CostModel, max_new_tokens: int,
                  loop_span: int = 0, config: EngineConfig | None = None, repeats: int = 2) -> dict:
    """Replay the adaptive policy (``config``'s, default the engine's) and the hindsight-calibrated
    table over ``answers`` in order, each on a fresh engine over one :class:`ReplayTarget` of
    ``target``, priced at ``costs`` (ms per pass over 1, 2, … new tokens), with the budget
    (``max_new_tokens``, ``loop_span``) the answers were recorded with.

    Returns:
        JSON-able ``{"questions": [ReplayedQuestion fields…], "policy_share": {"median", "min"},
        "calibrated_share": {"median", "min"}, "oracle_speedup_median", "states"}``; answers of
        fewer than 2 tokens (nothing to draft) are left out.

    Raises:
        ValueError: ``answers`` has no answer of 2 tokens or more.
    """
    answers = [a for a in answers if len(a.answer_ids) >= 2]
    if not answers:
        raise ValueError("no recorded answer of 2 tokens or more: nothing to replay")
    config = config or EngineConfig()
    gamma_max = len(costs.verify_ms) - 1
    replay_target = ReplayTarget(target)
    scout = SpeculativeEngine(replay_target, config=config, costs=costs)  # its drafter: the policy's history
    drafter = next(d for d in scout.core.drafters if isinstance(d, NGramDrafter))
    positions: list[Position] = []
    bounds = []
    for a in answers:
        replayed = replay(drafter, a.prompt_ids, a.context_ids, a.answer_ids, gamma_max)
        positions += replayed
        bounds.append(bound([p.accepted for p in replayed], a.answer_ids, costs).speedup)
        scout.core.remember(a.prompt_ids, a.answer_ids)
    states = state_acceptance(positions)
    budget = Budget(max_new_tokens=max_new_tokens, loop_span=loop_span)
    adaptive = _shares(SpeculativeEngine(replay_target, config=config, costs=costs), replay_target, answers, bounds,
                       costs, budget, repeats)
    frozen_config = replace(config, policy=replace(config.policy, prior_strength=FROZEN))
    frozen = SpeculativeEngine(replay_target, config=frozen_config, costs=costs)
    for state, acc in states.items():  # α_next is None for a state never accepted past its first token
        alpha_next = acc["alpha_next"] if acc["alpha_next"] is not None else config.policy.prior_next
        frozen.core.acceptance.set_prior(state, acc["alpha_first"], alpha_next)
    calibrated = _shares(frozen, replay_target, answers, bounds, costs, budget, repeats)
    rows = [ReplayedQuestion(a.id, len(a.answer_ids), round(b, 3), round(p, 3), round(c, 3))
            for a, b, p, c in zip(answers, bounds, adaptive, calibrated, strict=True)]
    med = statistics.median
    return {"questions": [vars(r) for r in rows],
            "policy_share": {"median": round(med(adaptive), 3), "min": round(min(adaptive), 3)},
            "calibrated_share": {"median": round(med(calibrated), 3), "min": round(min(calibrated), 3)},
            "oracle_speedup_median": round(med(bounds), 3), "states": states}
