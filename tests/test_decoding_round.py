"""A round's plan (decoding/planning/round.py) as pure functions, and the one γ-ceiling bound."""

from __future__ import annotations

import pytest

from decoding.config import NUM_SPECULATIVE_TOKENS_RANGE, Speculation, SpeculationMode
from decoding.core import EngineConfig
from decoding.drafters.base import Draft, Offer
from decoding.planning.batch_policy import BatchSpeculation
from decoding.planning.policy import PLAIN, CostModel, DrafterPolicy
from decoding.planning.round import RoundRequest, candidate_chains, gamma_ceiling, plan_round

FLAT = CostModel(verify_ms=(1.0, 1.02, 1.04, 1.06, 1.08))


class Copier:
    """A free drafter (a lookup) with ``span`` tokens to copy."""

    name = "ngram"

    def __init__(self, span: int) -> None:
        self.span = span

    def offer(self, max_tokens: int, after=()) -> Offer:
        n = min(self.span, max_tokens)
        return Offer(self.name, n, ("4+", "unanimous"), "copy", 0.0) if n else Offer(self.name, 0)

    def propose(self, max_tokens: int, after=()) -> Draft:
        return Draft(list(range(min(self.span, max_tokens))))


def request(mode: SpeculationMode, room: int, span: int = 8) -> RoundRequest:
    return RoundRequest(mode, room, [Copier(span)], DrafterPolicy(FLAT), 10)  # type: ignore[list-item]


def costs_at(context: int, rows: int) -> CostModel:
    return CostModel(tuple(1.0 + 0.02 * i for i in range(rows)))


def test_the_gamma_ceiling_is_clipped_by_the_budget_and_the_context_window():
    assert gamma_ceiling(8, remaining=100) == 8
    assert gamma_ceiling(8, remaining=4) == 3  # the pass commits one token of its own
    assert gamma_ceiling(8, remaining=100, context_room=2) == 2
    assert gamma_ceiling(8, remaining=1) == 0 and gamma_ceiling(8, remaining=5, context_room=-3) == 0


def test_candidate_chains_without_room_or_drafters_are_none():
    assert candidate_chains([], 8) == [] and candidate_chains([Copier(3)], 0) == []  # type: ignore[list-item]
    assert [[o.max_tokens for o in c] for c in candidate_chains([Copier(3)], 8)] == [[3]]  # type: ignore[list-item]


def test_a_round_plans_fixed_table_and_adaptive_requests():
    spec = BatchSpeculation(table=((1, 6), (2, 2)))
    plans = plan_round([request(SpeculationMode.FIXED, 5), request(SpeculationMode.TABLE, 5),
                        request(SpeculationMode.TABLE, 1), request(SpeculationMode.ADAPTIVE, 0)], spec, costs_at, 5)
    assert [p.gamma for p in plans[:3]] == [5, 2, 1]  # fixed: its ceiling; table: the table's γ, clipped
    assert plans[3].gamma == 0 and plans[3].reason.startswith("batch of 4")
    alone = plan_round([request(SpeculationMode.ADAPTIVE, 4)], spec, costs_at, 5)
    assert alone[0].gamma == 4 and alone[0].drafter == "ngram"  # a near-free pass: draft the whole span
    assert plan_round([request(SpeculationMode.OFF, 0)], spec, costs_at, 5) == [PLAIN]


def test_a_plan_names_the_free_offers_it_declines():
    steep = CostModel(tuple(10.0 * (i + 1) for i in range(9)))  # every drafted token costs a full step
    declined = plan_round([request(SpeculationMode.ADAPTIVE, 4)], BatchSpeculation(), lambda c, r: steep, 5)[0]
    assert declined.gamma == 0 and [(s.offer.drafter, s.tokens) for s in declined.declined] == [("ngram", 4)]
    assert declined.declined[0].key == ("ngram", "4+", "unanimous", "")  # measured off-policy in this state
    drafted = plan_round([request(SpeculationMode.ADAPTIVE, 4)], BatchSpeculation(), costs_at, 5)[0]
    assert drafted.gamma == 4 and drafted.declined == ()
    batch = plan_round([request(SpeculationMode.ADAPTIVE, 4)] * 2, BatchSpeculation(), lambda c, r: CostModel(
        tuple(10.0 * (i + 1) for i in range(r))), 5)
    assert all(p.gamma == 0 and len(p.declined) == 1 for p in batch)  # a batch's allocation declines them too


def test_speculation_modes_parse_from_strings_and_gamma_has_one_bound():
    assert Speculation(mode="table").mode is SpeculationMode.TABLE and SpeculationMode.TABLE == "table"
    assert f"{SpeculationMode.FIXED}" == "fixed"
    low, high = NUM_SPECULATIVE_TOKENS_RANGE
    for bad in (low - 1, high + 1):
        with pytest.raises(ValueError, match="num_speculative_tokens"):
            Speculation(num_speculative_tokens=bad)
        with pytest.raises(ValueError, match="num_speculative_tokens"):
            EngineConfig(num_speculative_tokens=bad)
    with pytest.raises(TypeError):
        EngineConfig(num_speculative_tokens=True)
    assert Speculation(num_speculative_tokens=high).num_speculative_tokens == high
