"""One round's plan: how many tokens (γ) each request drafts, and with which drafters.

Everything that decides γ reads here, over values a request hands in (:class:`RoundRequest`),
so a round reads plan → propose → verify → commit (:meth:`decoding.batch.Batch.step`):

1. :func:`gamma_ceiling` — the most a round may draft: the request's ``num_speculative_tokens``,
   clipped by its remaining budget and the context window (the argument gpt-fast's
   ``speculate_k`` is, vLLM's ``num_speculative_tokens``);
2. :func:`candidate_chains` — the plans the policy weighs (each drafter's offer, a copied span
   extended by another drafter);
3. by the request's :class:`~decoding.config.SpeculationMode`: ``fixed`` drafts its ceiling with
   its one drafter, ``table`` the ceiling of vLLM's static table by batch size
   (:meth:`~decoding.planning.batch_policy.BatchSpeculation.table_gamma`), ``adaptive`` (and ``off``,
   which has no drafters) its own policy's choice alone (:func:`plan_alone`, expected tokens per
   ms, Leviathan et al. 2023 eq. 1) or γ per request from the batch's cost in a batch
   (:func:`plan_allocated`, :func:`~decoding.planning.batch_policy.allocate`).

:func:`plan_round` does all three for one round of a batch; an adaptive plan also names the
free offers it declines (:func:`with_declined`), which the request measures off-policy
(:mod:`decoding.planning.shadow`). The hindsight bound
(``evals/oracle.py``) clips its γ with the same :func:`gamma_ceiling`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

from decoding.config import SpeculationMode
from decoding.drafters.base import Drafter, Offer
from decoding.planning.batch_policy import BatchSpeculation, allocate
from decoding.planning.policy import PLAIN, CostModel, Decision, DrafterPolicy, Segment

#: What target passes cost: ``costs_at(context, rows)`` is a :class:`CostModel` of passes over
#: 1..``rows`` new tokens after ``context`` cached tokens (summed over a batch), in ms
#: (:meth:`~decoding.planning.online_costs.OnlineCosts.cost_model`).
PassCosts = Callable[[int, int], CostModel]


@dataclass(frozen=True)
class RoundRequest:
    """What planning reads of one running request this round.

    Attributes:
        mode: its speculation mode.
        room: the most tokens it may draft this round (:func:`gamma_ceiling`).
        drafters: its drafters (empty: it decodes plainly).
        policy: its policy over the engine's acceptance table (read, not changed, by planning).
        context_tokens: positions in its target KV cache (what its pass attends over).
    """

    mode: SpeculationMode
    room: int
    drafters: Sequence[Drafter]
    policy: DrafterPolicy
    context_tokens: int


def gamma_ceiling(num_speculative_tokens: int, remaining: int, context_room: int | None = None) -> int:
    """The most tokens a round may draft (γ ceiling), ≥ 0.

    Args:
        num_speculative_tokens: the request's γ ceiling (``Speculation.num_speculative_tokens``).
        remaining: tokens the budget still allows; the round's pass commits one token of its own
            (the bonus token), so at most ``remaining - 1`` are drafted.
        context_room: positions left in the target's context window (``None``: unbounded).
    """
    room = min(num_speculative_tokens, remaining - 1)
    return max(0, room if context_room is None else min(room, context_room))


def candidate_chains(drafters: Sequence[Drafter], room: int) -> list[list[Offer]]:
    """The plans the policy weighs this round: every free offer (``step_ms`` 0, a lookup:
    the n-gram drafter's match) alone, and each one that runs out before ``room``
    followed by each other drafter's offer to extend it (a copied span the draft model
    continues); a costly drafter's offer alone (the draft model) only when no free offer
    has anything (a generated span). So the n-gram drafter drafts where a match exists, the
    draft model where none does, and the policy picks γ (or plain decoding) by their
    measured acceptance. Empty without room (``room`` ≤ 0: :func:`gamma_ceiling`) or drafters."""
    if room <= 0 or not drafters:
        return []
    offers = [d.offer(room) for d in drafters]
    free = any(o.max_tokens > 0 and o.step_ms == 0 for o in offers)
    chains = [[o] for o in offers if o.max_tokens > 0 and (o.step_ms == 0 or not free)]
    for d, o in zip(drafters, offers, strict=True):
        if 0 < o.max_tokens < room and o.step_ms == 0:
            span = d.propose(o.max_tokens).tokens
            chains += [[o, e.offer(room - len(span), span)] for e in drafters if e is not d]
    return chains


def with_declined(plan: Decision, chains: Sequence[Sequence[Offer]], policy: DrafterPolicy) -> Decision:
    """``plan`` with the free offers among ``chains`` that it does not draft (each drafter's
    whole offer, keyed in this round's phase): what the request measures off-policy
    (:mod:`decoding.planning.shadow`)."""
    used = {s.offer.drafter for s in plan.segments}
    free = {o.drafter: o for chain in chains for o in chain[:1] if o.step_ms == 0 and o.drafter not in used}
    return replace(plan, declined=tuple(Segment(o, o.max_tokens, policy.key(o)) for o in free.values()))


def fixed_plan(request: RoundRequest, gamma: int) -> Decision:
    """``gamma`` tokens from the request's first drafter, bypassing the policy (fixed γ, as
    gpt-fast's ``speculate_k``); plain without room or drafters."""
    if gamma <= 0 or not request.drafters:
        return PLAIN
    return request.policy.fixed(request.drafters[0].offer(gamma), gamma)


def plan_alone(request: RoundRequest, costs_at: PassCosts, calibrated_rows: int) -> Decision:
    """The plan of an adaptive request decoding alone: its policy's choice over
    :func:`candidate_chains`, target passes priced at its context over ``calibrated_rows`` sizes
    (:func:`plan_round`); plain without room or drafters (then no costs are read)."""
    if request.room <= 0 or not request.drafters:
        return PLAIN
    policy = replace(request.policy, costs=costs_at(request.context_tokens, calibrated_rows))
    chains = candidate_chains(request.drafters, request.room)
    return with_declined(policy.choose(chains, request.room), chains, policy)


def plan_allocated(adaptive: Sequence[RoundRequest], other_rows: int, batch_size: int, costs: CostModel,
                   speculation: BatchSpeculation) -> list[Decision]:
    """Plans for the adaptive requests of a batch: γ per request from the batch's cost
    (:func:`~decoding.planning.batch_policy.allocate`, SmartSpec, Liu et al. 2024), each with its reason.

    Args:
        adaptive: the batch's adaptive requests.
        other_rows: rows the other requests' plans take in the pass (their γ + 1 each).
        batch_size: requests in the batch (for the reason).
        costs: the batch's pass costs at its total context, over at least
            ``speculation.max_rows + other_rows + len(adaptive)`` rows.
        speculation: the batch's row and slowdown limits.
    """
    chains = [candidate_chains(r.drafters, r.room) for r in adaptive]
    curves = [r.policy.curve(c, r.room) for r, c in zip(adaptive, chains, strict=True)]
    allocation = allocate([{g: (e, ms) for g, (e, ms, _) in c.items()} for c in curves],
                          lambda rows: costs.verify(rows + other_rows),
                          max(speculation.max_rows - other_rows, len(adaptive)), speculation.max_slowdown)
    words = (f"batch of {batch_size}: {allocation.rows + other_rows} rows, expected "
             f"{allocation.round_ms:.0f} ms and {allocation.goodput * 1000:.1f} tokens/s for the batch")
    plans = []
    for request, chain, curve, gamma in zip(adaptive, chains, curves, allocation.gammas, strict=True):
        if gamma == 0:
            plan = Decision((), f"{words}; drafting would not raise it")
        else:
            e, _, best = curve[gamma]
            plan = Decision(best.segments, f"{words}; γ={gamma}, {e:.2f} tokens expected")
        plans.append(with_declined(plan, chain, request.policy))
    return plans


def plan_round(requests: Sequence[RoundRequest], speculation: BatchSpeculation, costs_at: PassCosts,
               calibrated_rows: int) -> list[Decision]:
    """Each running request's plan for this round, in order: a ``fixed`` request drafts its
    ceiling; a ``table`` request the table's γ for this batch size (at most its ceiling); an
    ``adaptive`` one its own policy's choice when it is alone (:func:`plan_alone`), else γ from
    :func:`plan_allocated` over the batch's adaptive requests, around the rows the others take.

    Args:
        requests: the batch's running requests.
        speculation: the batch's settings (table, row and slowdown limits).
        costs_at: what target passes cost (:data:`PassCosts`).
        calibrated_rows: the sizes a request decoding alone is priced over (past them the
            costs extrapolate): the engine's calibrated ``num_speculative_tokens + 1``.
    """
    n = len(requests)
    plans: dict[int, Decision] = {}
    for i, r in enumerate(requests):
        if r.mode is SpeculationMode.FIXED:
            plans[i] = fixed_plan(r, r.room)
        elif r.mode is SpeculationMode.TABLE:
            plans[i] = fixed_plan(r, min(speculation.table_gamma(n), r.room))
        elif n == 1:
            plans[i] = plan_alone(r, costs_at, calibrated_rows)
    adaptive = [i for i in range(n) if i not in plans]
    if adaptive:
        other_rows = sum(p.gamma + 1 for p in plans.values())
        context = sum(r.context_tokens for r in requests)
        costs = costs_at(context, speculation.max_rows + other_rows + len(adaptive))  # once a round
        allocated = plan_allocated([requests[i] for i in adaptive], other_rows, n, costs, speculation)
        plans.update(zip(adaptive, allocated, strict=True))
    return [plans[i] for i in range(n)]
