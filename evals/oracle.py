"""The speedup speculation could reach with our drafter: a hindsight schedule's bound.

On a CPU a verification pass over k rows costs more than one one-token step (on 2 cores 1.3 steps
at 2 rows and 3.1 at 7 with the build's several-row kernel), so how much drafting can gain depends
on the drafts and on the pass costs.
The bound: replay the greedy answer, ask the n-gram drafter at every decode position (every
token after the prefill's first) what it would propose (γ up to the engine's ceiling clipped by
the budget left, as a round is: :func:`decoding.planning.round.gamma_ceiling`; from the same
passages, prompt and answer history), and read off how many of those tokens greedy decoding
would accept. A schedule that knows this in hindsight drafts exactly the accepted tokens where
that pays, and nothing elsewhere; its cost is the cheapest sequence of passes that commits the
answer (dynamic programming over positions), each pass priced by the engine's measured pass
costs (``verify(k)``: one target pass over k new tokens,
:class:`~decoding.planning.policy.CostModel`). Its speedup over one-token steps is
``n · verify(1) / T``; ``ours_auto`` measured as a share of it says how much of what the drafter
offers the cost-aware policy takes. Not counted: drafting's own time (a dictionary lookup for
the n-gram drafter), and the draft model (the bound is the n-gram drafter's).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Iterable, Sequence

from decoding.drafters.base import DraftRequest
from decoding.drafters.ngram import NGramDrafter
from decoding.planning.policy import CostModel, state_name
from decoding.planning.round import gamma_ceiling


@dataclass(frozen=True)
class Position:
    """One decode position of a replay: what the n-gram drafter offered there and what greedy
    decoding accepts of it.

    Attributes:
        state: the offer's acceptance-table state without a phase, e.g.
            ``ngram:4+:unanimous:passage`` (:func:`~decoding.planning.policy.state_name`); empty
            when it offers nothing.
        proposed: tokens proposed (0: nothing offered).
        accepted: the common prefix of the proposal and the rest of the answer (tokens).
    """

    state: str
    proposed: int
    accepted: int


def replay(drafter: NGramDrafter, prompt_ids: Sequence[int], contexts: Sequence[Sequence[int]],
           output: Sequence[int], num_speculative_tokens: int) -> list[Position]:
    """At each decode position i ≥ 1 (after ``output[:i]`` is committed; ``output[0]`` is the
    prefill's token, drafted by no one): the n-gram drafter's offer and how many of its tokens
    greedy decoding accepts, the common prefix of the proposal and ``output[i:]``.
    The proposal is at most the round's γ ceiling (:func:`~decoding.planning.round.gamma_ceiling`:
    ``num_speculative_tokens``, and ``len(output) - i - 1``, the last token being a pass's own).

    Args:
        drafter: the engine's n-gram drafter (a copy is begun here; the engine's is not changed),
            with its answer history.
        prompt_ids: the prompt's token ids.
        contexts: the retrieved passages' token ids (the drafter's seeds).
        output: the greedy answer's token ids.

    Returns:
        ``len(output) - 1`` positions (none for an answer of ≤ 1 token).
    """
    drafter = copy.copy(drafter)
    drafter.begin(DraftRequest(list(prompt_ids), [list(c) for c in contexts]))
    drafter.observe(list(output[:1]))
    positions = []
    for i in range(1, len(output)):
        room = gamma_ceiling(num_speculative_tokens, len(output) - i)
        offer, proposal = drafter.offer(room), drafter.propose(room).tokens
        a = 0
        while a < len(proposal) and proposal[a] == output[i + a]:
            a += 1
        positions.append(Position(state_name((offer.drafter, *offer.state)) if proposal else "", len(proposal), a))
        drafter.observe([output[i]])
    return positions


def accepted_lengths(drafter: NGramDrafter, prompt_ids: Sequence[int], contexts: Sequence[Sequence[int]],
                     output: Sequence[int], num_speculative_tokens: int) -> list[int]:
    """The accepted tokens of :func:`replay`'s positions, in order."""
    return [p.accepted for p in replay(drafter, prompt_ids, contexts, output, num_speculative_tokens)]


def state_acceptance(positions: Iterable[Position]) -> dict[str, dict[str, float]]:
    """Acceptance per drafting state over every replayed position where the drafter offered
    something, counted as the policy counts a drafted round
    (:meth:`~decoding.planning.policy.AcceptanceTable.update`, without decay): α₁ = the first
    token accepted, αₙ = a later token accepted given the one before it was. Measured at every
    position, not only where a policy chose to draft, so it has no selection bias: what the
    policy's priors (:data:`~decoding.drafters.ngram.STATE_PRIORS`) are read from.

    Returns:
        ``{state: {"alpha_first", "alpha_next", "positions"}}``, states sorted by name.
    """
    counts: dict[str, list[int]] = {}
    for p in positions:
        if not p.proposed:
            continue
        c = counts.setdefault(p.state, [0, 0, 0, 0])  # positions, first accepted, next tried, next accepted
        c[0] += 1
        c[1] += p.accepted >= 1
        if p.accepted >= 1:
            tried = min(p.accepted, p.proposed - 1)
            c[2] += tried
            c[3] += min(p.accepted - 1, tried)
    return {state: {"alpha_first": round(c[1] / c[0], 3), "alpha_next": round(c[3] / c[2], 3) if c[2] else None,
                    "positions": c[0]} for state, c in sorted(counts.items())}


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


def schedule_ms(gammas: Sequence[int], costs: CostModel) -> float:
    """What a schedule's passes cost (ms) at ``costs``: ``verify(γ + 1)`` per pass drafting γ — the
    price the bound puts on a schedule actually run (e.g. ``ours_auto``'s, from its stats), so the
    two compare with no timing noise."""
    return sum(costs.verify(g + 1) for g in gammas)


@dataclass(frozen=True)
class Bound:
    """One answer's bound.

    Attributes:
        tokens: the answer's length (tokens, the prefill's first included).
        plain_ms: one one-token step per decode token (``(tokens - 1) · verify(1)``).
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


def bound(accepted: Sequence[int], output: Sequence[int], costs: CostModel) -> Bound:
    """The hindsight bound of one answer (see the module docstring) from its positions'
    accepted tokens (:func:`replay`)."""
    oracle, gammas = hindsight_schedule(accepted, costs)
    return Bound(len(output), len(accepted) * costs.verify(1), oracle, sum(gammas))
