"""How many tokens each request of a batch drafts this round — γ per request from the batch's cost.

Speculation and batching compete for the same spare rows of a target pass: on a CPU (or a
GPU at small batch) a pass is bound by reading the weights, so rows are nearly free up to
a point, whoever fills them — a request's drafted tokens or another request's next token.
As the batch grows the spare rows are taken by requests, and drafting shrinks and stops.

:func:`allocate` maximises the batch's *goodput* (committed tokens per ms of the round,
SmartSpec, Liu et al. 2024, arXiv:2406.14066): start with every request at γ = 0 (one row
each, one token each), then repeatedly make the step — one request to a larger γ — that adds
the most expected tokens per ms added to the round, among the steps that raise the batch's
expected tokens per ms (the greedy rule for a concave knapsack; a step may jump several
tokens to cross a step in the cost curve); the round's cost comes from
:class:`~decoding.planning.online_costs.OnlineCosts` at the batch's total size. Each request's
expected tokens per γ is its own policy's
(:meth:`~decoding.planning.policy.DrafterPolicy.curve`: measured acceptance per drafting state), so
a request copying a long span drafts while one on generated text does not. To keep every
request's latency in check, a round may cost at most ``max_slowdown`` × the round without
drafting, and hold at most ``max_rows`` rows.

:class:`BatchSpeculation` also gives the baselines the load eval compares against: a
vLLM-style static table of γ by batch size (``num_speculative_tokens_per_batch_size``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

#: A request's options: ``{γ: (expected committed tokens, drafting ms)}`` for γ ≥ 1 (γ = 0 is one token, 0 ms).
Curve = dict[int, tuple[float, float]]


@dataclass(frozen=True)
class BatchSpeculation:
    """An engine's batch settings. A request's ``Speculation.mode`` picks ``"adaptive"``
    (:func:`allocate` in a batch; its own policy alone) or ``"table"``.

    Attributes:
        table: ``((min batch size, γ), …)`` for ``"table"`` requests (vLLM's static schedule,
            drafted as a fixed γ); the entry with the largest size ≤ the batch applies.
        max_rows: most rows (tokens) one batched pass may hold.
        max_slowdown: a round may cost at most this × the same round without drafting.
    """

    table: tuple[tuple[int, int], ...] = ((1, 8), (2, 4), (4, 2), (8, 1), (16, 0))
    max_rows: int = 32
    max_slowdown: float = 3.0

    def __post_init__(self) -> None:
        """Raises ValueError: an empty or negative table, ``max_rows`` < 1 or ``max_slowdown`` < 1."""
        if not self.table or any(b < 1 or g < 0 for b, g in self.table):
            raise ValueError(f"the γ table needs (batch size ≥ 1, γ ≥ 0) entries, got {self.table}")
        if self.max_rows < 1 or not self.max_slowdown >= 1.0:
            raise ValueError(f"max_rows must be ≥ 1 and max_slowdown ≥ 1, got {self.max_rows}, {self.max_slowdown}")

    def table_gamma(self, batch_size: int) -> int:
        """γ of the table entry for ``batch_size``."""
        fitting = [g for b, g in sorted(self.table) if b <= batch_size]
        return fitting[-1] if fitting else sorted(self.table)[0][1]


@dataclass(frozen=True)
class Allocation:
    """The outcome of :func:`allocate`: γ per request and the round it expects."""

    gammas: list[int]
    rows: int
    expected_tokens: float
    round_ms: float

    @property
    def goodput(self) -> float:
        """Expected committed tokens per ms of the round."""
        return self.expected_tokens / self.round_ms


def allocate(curves: Sequence[Curve], cost: Callable[[int], float], max_rows: int = 32,
             max_slowdown: float = 3.0) -> Allocation:
    """γ per request maximising the batch's expected committed tokens per ms (greedy).

    Args:
        curves: per request, its options (:data:`Curve`; empty = it cannot draft).
        cost: ms of one target pass over that many rows (all requests' new tokens).
        max_rows: most rows the pass may hold.
        max_slowdown: the round may cost at most this × ``cost(len(curves))`` (no drafting).

    Returns:
        An :class:`Allocation`; with one request this is the γ maximising E(γ) / (cost(γ + 1) + drafting).
    """
    gammas = [0] * len(curves)
    expected, drafting, rows = [1.0] * len(curves), [0.0] * len(curves), len(curves)
    base = cost(rows)
    total_e, total_ms = float(len(curves)), base
    while True:
        best = None
        for i, curve in enumerate(curves):
            for g, (e, ms) in curve.items():
                added = g - gammas[i]
                if added <= 0 or rows + added > max_rows:
                    continue
                round_ms = cost(rows + added) + sum(drafting) - drafting[i] + ms
                gain = e - expected[i]
                if round_ms > max_slowdown * base or gain <= 0:
                    continue
                if (total_e + gain) / round_ms <= total_e / total_ms * (1 + 1e-9):
                    continue  # the batch's rate would not rise
                ratio = gain / max(round_ms - total_ms, 1e-6)  # tokens gained per ms added
                if best is None or (ratio, gain) > best[0]:
                    best = ((ratio, gain), i, g, e, ms, round_ms)
        if best is None:
            return Allocation(gammas, rows, total_e, total_ms)
        _, i, g, e, ms, round_ms = best
        rows += g - gammas[i]
        total_e += e - expected[i]
        gammas[i], expected[i], drafting[i], total_ms = g, e, ms, round_ms
