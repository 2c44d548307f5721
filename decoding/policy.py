"""Which drafter, and how many tokens, per round — chosen from measured numbers.

Every proposal falls into a *drafting state*: for the n-gram drafter, the length of
the suffix match (1, 2, 3, 4+), whether every matching occurrence agrees on the next
token, and whether the previous round of the same drafter was accepted in full (we are
inside a copied span); for the draft model, only the last. Per state we keep decayed
counts of two measured acceptance rates:

* α₁ — the first drafted token is accepted;
* αₙ — a later drafted token is accepted given the one before it was.

A round that drafts γ tokens then commits E(γ) = 1 + α₁ (1 - αₙ^γ) / (1 - αₙ) tokens
in expectation (the bonus token included; with α₁ = αₙ = α this is Leviathan et al.
2023, eq. 1) and costs one target pass over γ + 1 tokens plus γ draft-model steps, from
the hardware's calibrated :class:`CostModel`. The policy picks the (drafter, γ) with
the highest E / cost, and decodes plainly when nothing beats one token per
single-token pass.

The counts live in an :class:`AcceptanceTable` owned by the engine, so what one request
measured informs the next; a state not visited drifts back toward its prior, so a state
benched early is retried. Splitting by match length is what brings the n-gram drafter
back when a long match reappears after its short matches stopped paying.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from decoding.drafter import Draft

NGRAM, DRAFT_MODEL = "ngram", "draft_model"


@dataclass(frozen=True)
class CostModel:
    """Measured costs on this hardware, in milliseconds.

    Attributes:
        verify_ms: ``verify_ms[n - 1]`` is one target forward over n new tokens.
        draft_step_ms: one draft-model step over 1 token (``None`` = no draft model).
    """

    verify_ms: tuple[float, ...]
    draft_step_ms: float | None = None

    def __post_init__(self) -> None:
        """Raises ValueError: an empty table, or a cost that is not a finite positive number."""
        costs = [*self.verify_ms, *([] if self.draft_step_ms is None else [self.draft_step_ms])]
        if not self.verify_ms or not all(math.isfinite(c) and c > 0 for c in costs):
            raise ValueError(f"costs must be finite positive ms with at least one verify cost, got {self}")

    def verify(self, n_tokens: int) -> float:
        """Cost of a target pass over ``n_tokens`` (linear extrapolation past the table)."""
        table = self.verify_ms
        if n_tokens <= len(table):
            return table[n_tokens - 1]
        slope = (table[-1] - table[0]) / max(len(table) - 1, 1)
        return table[-1] + slope * (n_tokens - len(table))


@dataclass(frozen=True)
class PolicyConfig:
    """Knobs of the cost-aware policy.

    Attributes:
        decay: weight kept by a state's counts each time it is updated (memory of
            ~1 / (1 - decay) rounds).
        recovery: weight kept by every *other* state's counts per round; a state not
            visited slowly returns to its prior.
        prior_strength: pseudo-rounds given to the prior.
        long_match: suffix-match length (tokens) from which matches share one state.
        prior_first / prior_next: initial α₁ and αₙ of every state.
        min_gain: speculate only when the expected rate beats plain decoding by this factor.
    """

    decay: float = 0.98
    recovery: float = 0.999
    prior_strength: float = 2.0
    long_match: int = 4
    prior_first: float = 0.5
    prior_next: float = 0.8
    min_gain: float = 1.0

    def __post_init__(self) -> None:
        """Raises ValueError: a weight or prior outside [0, 1], a non-positive prior strength
        or match length, or a non-finite gain."""
        unit = {"decay": self.decay, "recovery": self.recovery, "prior_first": self.prior_first,
                "prior_next": self.prior_next}
        bad = [f"{k}={v}" for k, v in unit.items() if not 0.0 <= v <= 1.0]
        if self.prior_strength <= 0 or not math.isfinite(self.prior_strength):
            bad.append(f"prior_strength={self.prior_strength} (must be > 0)")
        if self.long_match < 1:
            bad.append(f"long_match={self.long_match} (must be >= 1)")
        if not math.isfinite(self.min_gain) or self.min_gain <= 0:
            bad.append(f"min_gain={self.min_gain}")
        if bad:
            raise ValueError(f"invalid PolicyConfig: {', '.join(bad)}")


@dataclass(frozen=True)
class Decision:
    """One round's choice: ``drafter`` None means a plain decode step; γ tokens to draft."""

    drafter: str | None
    gamma: int
    reason: str


def expected_tokens(alpha_first: float, alpha_next: float, gamma: int) -> float:
    """E(γ) = 1 + α₁ (1 - αₙ^γ) / (1 - αₙ): tokens committed by a round drafting γ, bonus included."""
    if gamma <= 0:
        return 1.0
    if alpha_next >= 1.0:
        return 1.0 + alpha_first * gamma
    return 1.0 + alpha_first * (1.0 - alpha_next**gamma) / (1.0 - alpha_next)


@dataclass
class _Counts:
    """Decayed acceptance counts of one drafting state."""

    first_accepted: float = 0.0
    first_tried: float = 0.0
    next_accepted: float = 0.0
    next_tried: float = 0.0


@dataclass
class AcceptanceTable:
    """Measured acceptance per drafting state, shared by the requests of one engine.

    Not thread-safe on its own: the engine runs one request at a time.
    """

    config: PolicyConfig = field(default_factory=PolicyConfig)
    counts: dict[tuple, _Counts] = field(default_factory=dict)

    def alphas(self, state: tuple) -> tuple[float, float]:
        """(α₁, αₙ) of ``state``: its counts smoothed with the prior."""
        c, cfg = self.counts.get(state, _Counts()), self.config
        k = cfg.prior_strength
        return ((c.first_accepted + cfg.prior_first * k) / (c.first_tried + k),
                (c.next_accepted + cfg.prior_next * k) / (c.next_tried + k))

    def update(self, state: tuple, proposed: int, accepted: int) -> None:
        """Book one round of ``state``: ``accepted`` of ``proposed`` drafted tokens (``proposed`` >= 1)."""
        cfg = self.config
        for key, c in self.counts.items():
            w = cfg.decay if key == state else cfg.recovery
            c.first_accepted, c.first_tried, c.next_accepted, c.next_tried = (
                w * c.first_accepted, w * c.first_tried, w * c.next_accepted, w * c.next_tried)
        c = self.counts.setdefault(state, _Counts())
        c.first_tried += 1
        c.first_accepted += accepted >= 1
        if accepted >= 1:  # positions 2..: tried while the previous one was accepted
            tried = min(accepted, proposed - 1)
            c.next_tried += tried
            c.next_accepted += min(accepted - 1, tried)

    def snapshot(self) -> dict[str, dict[str, float]]:
        """``{state: {"alpha_first", "alpha_next", "rounds"}}``: what the policy has learned (eval reports)."""
        return {_state_name(s): {"alpha_first": round(a1, 3), "alpha_next": round(an, 3),
                                 "rounds": round(self.counts[s].first_tried, 1)}
                for s in sorted(self.counts, key=str) for a1, an in [self.alphas(s)]}


def _describe(state: tuple) -> str:
    """A drafting state in words, for switch reasons."""
    if state[0] == NGRAM:
        _, n, unanimous, continuing = state
        return (f"{n}-gram match ({'unanimous' if unanimous else 'ambiguous'}"
                f"{', continuing a copied span' if continuing else ''})")
    return f"draft model{' (continuing an accepted run)' if state[1] else ''}"


def _state_name(state: tuple) -> str:
    """A drafting state as a compact key, e.g. ``ngram:4+:unanimous:continuing``."""
    if state[0] == NGRAM:
        _, n, unanimous, continuing = state
        return f"ngram:{n}{':unanimous' if unanimous else ':ambiguous'}" \
               f"{':continuing' if continuing else ''}"
    return f"draft_model{':continuing' if state[1] else ''}"


@dataclass
class DrafterPolicy:
    """Per-request policy state over the engine's shared :class:`AcceptanceTable`.

    Args:
        costs: the calibrated costs.
        table: measured acceptance (updated by :meth:`update`).
        drafters: which drafters this request may use (``{"ngram", "draft_model"}`` or a subset).
    """

    costs: CostModel
    table: AcceptanceTable = field(default_factory=AcceptanceTable)
    drafters: frozenset[str] = frozenset({NGRAM, DRAFT_MODEL})
    current: str | None = "start"
    _last_full: str | None = None  # drafter whose previous round was accepted in full

    def ngram_state(self, draft: Draft) -> tuple:
        """``("ngram", match bucket, unanimous, continuing)``; buckets "1", "2", ... "<long_match>+"."""
        long = self.table.config.long_match
        bucket = f"{long}+" if draft.match_length >= long else str(draft.match_length)
        return (NGRAM, bucket, draft.unanimous, self._last_full == NGRAM)

    def draft_model_state(self) -> tuple:
        """``("draft_model", continuing)``."""
        return (DRAFT_MODEL, self._last_full == DRAFT_MODEL)

    def _best_gamma(self, state: tuple, gamma_max: int, step_ms: float) -> tuple[int, float]:
        """(γ, expected tokens per ms) maximising the rate; γ = 0 is a plain step."""
        a1, an = self.table.alphas(state)
        best = (0, 1.0 / self.costs.verify(1))
        for g in range(1, gamma_max + 1):
            rate = expected_tokens(a1, an, g) / (self.costs.verify(g + 1) + g * step_ms)
            if rate > best[1]:
                best = (g, rate)
        return best

    def choose(self, ngram_draft: Draft | None, draft_model_ready: bool, gamma_max: int) -> Decision:
        """Pick the drafter and γ for the next round.

        Args:
            ngram_draft: the n-gram drafter's proposal (``None`` when it is not used).
            draft_model_ready: whether a draft model is loaded for this request.
            gamma_max: most tokens any drafter may propose (budget and context clipped).
        """
        plain_rate = 1.0 / self.costs.verify(1)
        options: list[tuple[float, str, int, tuple]] = []
        if NGRAM in self.drafters and ngram_draft is not None and ngram_draft.tokens and gamma_max > 0:
            state = self.ngram_state(ngram_draft)
            g, rate = self._best_gamma(state, min(gamma_max, len(ngram_draft.tokens)), 0.0)
            if g:
                options.append((rate, NGRAM, g, state))
        if (DRAFT_MODEL in self.drafters and draft_model_ready and gamma_max > 0
                and self.costs.draft_step_ms is not None):
            state = self.draft_model_state()
            g, rate = self._best_gamma(state, gamma_max, self.costs.draft_step_ms)
            if g:
                options.append((rate, DRAFT_MODEL, g, state))
        best = max(options, default=None, key=lambda o: o[0])
        if best is None or best[0] < plain_rate * self.table.config.min_gain:
            return Decision(None, 0, "no drafter expected to beat plain decoding")
        rate, name, gamma, state = best
        a1, an = self.table.alphas(state)
        return Decision(name, gamma, f"{_describe(state)}: α̂₁={a1:.2f} α̂ₙ={an:.2f}, "
                                     f"γ={gamma} expected {rate / plain_rate:.2f}x plain decoding")

    def update(self, name: str | None, draft: Draft | None, accepted: int) -> None:
        """Fold one round's outcome into the table.

        Args:
            name: the drafter used (None for a plain step).
            draft: what it proposed.
            accepted: how many of the proposed tokens were accepted.
        """
        if name is None or draft is None or not draft.tokens:
            self._last_full = None
            return
        state = self.ngram_state(draft) if name == NGRAM else self.draft_model_state()
        self.table.update(state, len(draft.tokens), accepted)
        self._last_full = name if accepted == len(draft.tokens) else None
