"""Target pass costs learned online from the passes the engine actually runs.

A cost table measured once at start-up is only as good as the moment it was measured: a
server calibrated while the machine was busy measured 261, 523, 784 … ms for 1, 2, 3 …
tokens (exactly linear; the quiet machine gives 62, 62, 64 …) and, believing every drafted
token costs a full step, never drafted again. Here every target pass the engine runs is
booked by its size — ``rows``, all new tokens of the pass, over every request of a batch —
and the context it attended over; the estimate for a size is the median of its recent
passes (robust to a GC pause or a neighbour's burst), so the table follows the machine.

A size the engine has not run recently is estimated *optimistically*: interpolated
between the sizes it has run, and flat beyond the largest (a pass over more tokens never
costs less, so flat is a lower bound). The policy then tries it when the estimate says it
pays; one real pass replaces the guess. Samples expire after ``max_age`` passes, so a size
benched by one unlucky pass is retried later. Before the first pass, the start-up
calibration (``prior``) is the estimate, scaled by how far a ``reference`` model's measured
passes are from its own calibration (a draft model that has not run yet is as much faster or
slower than calibrated as the target turned out to be). This is the "optimism in the face of
uncertainty" rule of bandit exploration; the cost of a wrong guess is one pass.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import deque
from dataclasses import dataclass, field

from decoding.planning.policy import CostModel


@dataclass
class OnlineCosts:
    """Per-size medians of measured target passes, in milliseconds.

    Args:
        prior: start-up calibration, ``prior[n - 1]`` = a pass over n tokens (ms) after
            ``prior_context`` cached tokens; the estimate until passes are measured.
        prior_context: the context the prior was measured at (tokens).
        window: passes kept per (size, context bin).
        context_bin: width of a context bin (tokens of KV cache attended over, summed over
            the batch's requests).
        max_age: passes after which a sample is forgotten.
        reference: another model's online costs; until this one has measured a pass its prior
            is scaled by the reference's :meth:`level`.

    Thread-safe (the engine books passes from whichever thread runs a round).
    """

    prior: tuple[float, ...]
    prior_context: int = 1024
    window: int = 16
    context_bin: int = 1024
    max_age: int = 4000
    reference: "OnlineCosts | None" = None
    _samples: dict[tuple[int, int], deque[tuple[int, float]]] = field(default_factory=dict, repr=False)
    _passes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        """Raises ValueError: an empty prior, a cost that is not a finite positive number, or
        a non-positive window, bin or age."""
        if not self.prior or not all(math.isfinite(c) and c > 0 for c in self.prior):
            raise ValueError(f"the prior must be finite positive ms, got {self.prior}")
        if min(self.window, self.context_bin, self.max_age) <= 0:
            raise ValueError("window, context_bin and max_age must be positive")

    def observe(self, rows: int, context: int, ms: float) -> None:
        """Book one measured pass over ``rows`` new tokens after ``context`` cached tokens
        (summed over a batch), ``ms`` of wall time. Non-finite or non-positive times are ignored."""
        if rows <= 0 or not math.isfinite(ms) or ms <= 0:
            return
        with self._lock:
            self._passes += 1
            key = (rows, max(context, 0) // self.context_bin)
            self._samples.setdefault(key, deque(maxlen=self.window)).append((self._passes, ms))

    def _medians(self, context: int) -> dict[int, float]:
        """``{rows: median ms}`` over fresh samples, each size from its context bin nearest ``context``."""
        want, oldest = max(context, 0) // self.context_bin, self._passes - self.max_age
        best: dict[int, tuple[int, float]] = {}
        for (rows, b), samples in self._samples.items():
            fresh = [ms for stamp, ms in samples if stamp > oldest]
            if fresh and (rows not in best or abs(b - want) < best[rows][0]):
                best[rows] = (abs(b - want), statistics.median(fresh))
        return {rows: ms for rows, (_, ms) in best.items()}

    def estimate(self, rows: int, context: int) -> float:
        """Expected wall time (ms) of a pass over ``rows`` new tokens after ``context`` cached
        tokens: the median of recent passes of that size, else interpolated between measured
        sizes (flat past the largest), else the prior."""
        with self._lock:
            medians = self._medians(context)
        return self._estimate(rows, medians)

    def _estimate(self, rows: int, medians: dict[int, float]) -> float:
        if rows in medians:
            return medians[rows]
        below = [r for r in medians if r < rows]
        above = [r for r in medians if r > rows]
        if below and above:
            lo, hi = max(below), min(above)
            return medians[lo] + (medians[hi] - medians[lo]) * (rows - lo) / (hi - lo)
        if below:
            return medians[max(below)]
        if above:  # smaller than anything measured: the prior's shape, at the measured level
            r = min(above)
            return medians[r] * self._prior(rows) / self._prior(r)
        return self._prior(rows) * (self.reference.level() if self.reference is not None else 1.0)

    def level(self) -> float:
        """Measured ÷ calibrated: the median over measured sizes of a size's median pass over
        its prior (1.0 before any pass); 4.0 means passes run 4× slower than calibrated."""
        with self._lock:
            medians = self._medians(self.prior_context)
        if not medians:
            return 1.0
        return statistics.median(ms / self._prior(rows) for rows, ms in medians.items())

    def _prior(self, rows: int) -> float:
        return CostModel(self.prior).verify(rows)

    def cost_model(self, context: int, max_rows: int, draft_step_ms: float | None = None,
                   draft_feed_ms: tuple[float, ...] = ()) -> CostModel:
        """A :class:`~decoding.planning.policy.CostModel` for one request's policy: passes over 1..``max_rows``
        tokens after ``context`` cached tokens, with the draft model's costs unchanged."""
        with self._lock:
            medians = self._medians(context)
        return CostModel(tuple(self._estimate(n, medians) for n in range(1, max(max_rows, 1) + 1)),
                         draft_step_ms, draft_feed_ms)

    def snapshot(self, context: int | None = None, max_rows: int = 17) -> dict[str, object]:
        """What has been learned, for stats and ``/metrics``: passes booked and the estimate per size (ms)."""
        context = self.prior_context if context is None else context
        with self._lock:
            medians = self._medians(context)
            passes = self._passes
        return {"passes": passes, "context": context,
                "estimate_ms": [round(self._estimate(n, medians), 2) for n in range(1, max_rows + 1)],
                "measured_sizes": sorted(medians)}
