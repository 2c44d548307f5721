"""The speedup speculation could reach with our drafter: a hindsight schedule's bound.

On a CPU a verification pass over k rows costs more than one one-token step (2-3.5 steps at 8
rows on 2 cores), so how much drafting can gain depends on the drafts and on the pass costs.
The bound: replay the greedy answer, ask the n-gram drafter at every position what it would
propose (γ up to the engine's ceiling clipped by the budget left, as a round is:
:func:`decoding.planning.round.gamma_ceiling`; from the same passages, prompt and answer history), and
read off how many of those tokens greedy decoding would accept. A schedule that knows this in
hindsight drafts exactly the accepted tokens where that pays, and nothing elsewhere; its cost
is the cheapest sequence of passes that commits the answer (dynamic programming over positions),
each pass priced by the engine's measured pass costs (``verify(k)``: one target pass over k
new tokens, :class:`~decoding.planning.policy.CostModel`). Its speedup over one-token steps is
``n · verify(1) / T``; ``ours_auto`` measured as a share of it says how much of what the drafter
offers the cost-aware policy takes. Not counted: drafting's own time (a dictionary lookup for
the n-gram drafter), and the draft model (the bound is the n-gram drafter's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from decoding.drafters.base import DraftRequest
from decoding.drafters.ngram import AnswerHistory, NGramDrafter
from decoding.planning.policy import CostModel
from decoding.planning.round import gamma_ceiling


def accepted_lengths(prompt_ids: Sequence[int], contexts: Sequence[Sequence[int]], output: Sequence[int],
                     num_speculative_tokens: int, history: AnswerHistory | None = None, max_ngram: int = 4,
                     min_ngram: int = 1) -> list[int]:
    """At each output position i (after ``output[:i]`` is committed): how many tokens of the n-gram
    drafter's proposal greedy decoding accepts: the common prefix of the proposal and ``output[i:]``.
    The proposal is at most the round's γ ceiling (:func:`~decoding.planning.round.gamma_ceiling`:
    ``num_speculative_tokens``, and ``len(output) - i - 1``, the last token being a pass's own).

    Args:
        prompt_ids: the prompt's token ids.
        contexts: the retrieved passages' token ids (the drafter's seeds).
        output: the greedy answer's token ids.
        history: earlier answers the drafter may draft from (None: none).
    """
    drafter = NGramDrafter(max_ngram, min_ngram, history=history)
    drafter.begin(DraftRequest(list(prompt_ids), [list(c) for c in contexts]))
    accepted = []
    for i in range(len(output)):
        proposal = drafter.propose(gamma_ceiling(num_speculative_tokens, len(output) - i)).tokens
        a = 0
        while a < len(proposal) and proposal[a] == output[i + a]:
            a += 1
        accepted.append(a)
        drafter.observe([output[i]])
    return accepted


def hindsight_schedule(accepted: Sequence[int], costs: CostModel) -> tuple[float, list[int]]:
    """The cheapest passes that commit the answer when each position's acceptance is known: a pass
    at position i drafting g ≤ ``accepted[i]`` tokens costs ``verify(g + 1)`` and commits g + 1.

    Returns:
        Its cost (ms) and the γ of each of its passes, in order.
    """
    n = len(accepted)
    best = [0.0] * (n + 1)
    choice = [0] * n
    for i in range(n - 1, -1, -1):
        best[i], choice[i] = min((costs.verify(g + 1) + best[min(n, i + g + 1)], g) for g in range(accepted[i] + 1))
    gammas, i = [], 0
    while i < n:
        gammas.append(choice[i])
        i += choice[i] + 1
    return best[0], gammas


@dataclass(frozen=True)
class Bound:
    """One answer's bound.

    Attributes:
        tokens: the answer's length (tokens).
        plain_ms: one one-token step per token (``tokens · verify(1)``).
        oracle_ms: the hindsight schedule's cost.
        drafted: the tokens the hindsight schedule drafts (all accepted).
    """

    tokens: int
    plain_ms: float
    oracle_ms: float
    drafted: int

    @property
    def speedup(self) -> float:
        """``plain_ms / oracle_ms`` (1.0 for an empty answer)."""
        return self.plain_ms / self.oracle_ms if self.oracle_ms else 1.0


def bound(prompt_ids: Sequence[int], contexts: Sequence[Sequence[int]], output: Sequence[int], costs: CostModel,
          num_speculative_tokens: int, history: AnswerHistory | None = None) -> Bound:
    """The hindsight bound of one answer (see the module docstring); ``num_speculative_tokens``: the
    engine's γ ceiling."""
    accepted = accepted_lengths(prompt_ids, contexts, output, num_speculative_tokens, history)
    oracle, gammas = hindsight_schedule(accepted, costs)
    return Bound(len(output), len(output) * costs.verify(1), oracle, sum(gammas))
