"""Which drafters, and how many tokens, per round — chosen from measured numbers.

Every round, each drafter the request may use makes an :class:`~decoding.drafters.base.Offer`:
how many tokens it could propose and its *drafting state* — for the n-gram drafter the
length of the suffix match (1, 2, 3, 4+) and whether every matching occurrence agrees on
the next token; for the draft model nothing. The policy adds the round's *phase*: the
same drafter's previous round was accepted in full (``continuing`` a copied span or an
accepted run), or the drafter ``extending`` the span another drafter proposed before it
in the same round. Per (drafter, state, phase) we keep decayed counts of two measured
acceptance rates:

* α₁ — the first drafted token is accepted;
* αₙ — a later drafted token is accepted given the one before it was.

A round that drafts γ tokens then commits E(γ) = 1 + α₁ (1 - αₙ^γ) / (1 - αₙ) tokens
in expectation (the bonus token included; with α₁ = αₙ = α this is Leviathan et al.
2023, eq. 1) and costs one target pass over γ + 1 tokens plus γ drafting steps (and a drafter's
one-off ``setup_ms``), from the hardware's calibrated :class:`CostModel`. A *chained* round — a copied span that
runs out before γ, extended by another drafter — sums the same series over both
segments (the extension is reached only when the whole span is accepted). The policy
picks the plan with the highest E / cost, and decodes plainly when nothing beats one
token per single-token pass.

The counts live in an :class:`AcceptanceTable` owned by the engine, so what one request
measured informs the next; a state not visited drifts back toward its prior, so a state
benched early is retried, and a free drafter's proposal the plan declines is measured all the
same against the tokens the target then commits (:mod:`decoding.planning.shadow`). Splitting
by match length is what brings the n-gram drafter back when a long match reappears after its
short matches stopped paying.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from decoding.drafters.base import Offer

CONTINUING, EXTENDING = "continuing", "extending"  # round phases (see the module docstring)


@dataclass(frozen=True)
class CostModel:
    """Measured costs on this hardware, in milliseconds.

    Attributes:
        verify_ms: ``verify_ms[n - 1]`` is one target forward over n new tokens.
        draft_step_ms: one draft-model step over 1 token (``None`` = no draft model);
            the engine hands it to its draft-model drafter as the offers' ``step_ms``.
        draft_feed_ms: ``draft_feed_ms[n - 1]`` is one draft-model forward over n tokens
            (empty = not measured); prices what the draft must feed before drafting.
    """

    verify_ms: tuple[float, ...]
    draft_step_ms: float | None = None
    draft_feed_ms: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        """Raises ValueError: an empty table, or a cost that is not a finite positive number."""
        costs = [*self.verify_ms, *self.draft_feed_ms, *([] if self.draft_step_ms is None else [self.draft_step_ms])]
        if not self.verify_ms or not all(math.isfinite(c) and c > 0 for c in costs):
            raise ValueError(f"costs must be finite positive ms with at least one verify cost, got {self}")

    def verify(self, n_tokens: int) -> float:
        """Cost of a target pass over ``n_tokens`` (linear extrapolation past the table)."""
        table = self.verify_ms
        if n_tokens <= len(table):
            return table[n_tokens - 1]
        slope = (table[-1] - table[0]) / max(len(table) - 1, 1)
        return table[-1] + slope * (n_tokens - len(table))


def draft_prefill_pays(costs: CostModel, prompt_tokens: int, expected_tokens: float, agreement: float,
                       max_gamma: int) -> tuple[bool, str]:
    """Whether prefilling a draft model with a KV cache of its own pays over one answer.

    Such a draft must first run over the whole prompt (``prompt_tokens``); at
    ``draft_feed_ms`` extrapolated linearly that costs ``feed(prompt_tokens)`` ms. It then
    saves, per token it drafts, the best over γ ≤ ``max_gamma`` of ``verify(1) − (γ·step +
    verify(γ+1)) / E[γ]`` with ``E[γ] = (1 − α^(γ+1)) / (1 − α)`` tokens per round at acceptance
    α = ``agreement`` (Leviathan et al. 2023, eq. 1). It pays when ``expected_tokens`` (the
    tokens it would draft: generated spans of a typical answer) × that saving exceeds the
    prefill.

    Returns:
        ``(pays, reason)`` with the numbers (ms) in the reason.
    """
    if costs.draft_step_ms is None:
        return False, "no draft step cost measured"
    table = costs.draft_feed_ms or (costs.draft_step_ms,)
    prefill = table[-1] * prompt_tokens / len(table) if prompt_tokens > len(table) else table[prompt_tokens - 1]
    alpha = min(max(agreement, 0.0), 0.999)
    plain = costs.verify(1)
    saving = max(plain - (g * costs.draft_step_ms + costs.verify(g + 1)) * (1 - alpha) / (1 - alpha ** (g + 1))
                 for g in range(1, max(max_gamma, 1) + 1))
    gain = expected_tokens * saving
    pays = gain > prefill
    reason = (f"draft prefill {prefill:.0f} ms over {prompt_tokens} prompt tokens vs {gain:.0f} ms saved "
              f"({expected_tokens:.0f} drafted tokens x {saving:.1f} ms at agreement {agreement:.2f})")
    return pays, reason


@dataclass(frozen=True)
class PolicyConfig:
    """Knobs of the cost-aware policy.

    Attributes:
        decay: weight kept by a state's counts each time it is updated (memory of
            ~1 / (1 - decay) rounds).
        recovery: weight kept by every *other* state's counts per round; a state not
            visited slowly returns to its prior.
        prior_strength: pseudo-rounds given to the prior.
        prior_first / prior_next: initial α₁ and αₙ of every state.
        min_gain: speculate only when the expected rate beats plain decoding by this factor.
    """

    decay: float = 0.98
    recovery: float = 0.999
    prior_strength: float = 2.0
    prior_first: float = 0.5
    prior_next: float = 0.8
    min_gain: float = 1.0

    def __post_init__(self) -> None:
        """Raises ValueError: a weight or prior outside [0, 1], a non-positive prior
        strength, or a non-finite or non-positive gain."""
        unit = {"decay": self.decay, "recovery": self.recovery, "prior_first": self.prior_first,
                "prior_next": self.prior_next}
        bad = [f"{k}={v}" for k, v in unit.items() if not 0.0 <= v <= 1.0]
        if self.prior_strength <= 0 or not math.isfinite(self.prior_strength):
            bad.append(f"prior_strength={self.prior_strength} (must be > 0)")
        if not math.isfinite(self.min_gain) or self.min_gain <= 0:
            bad.append(f"min_gain={self.min_gain}")
        if bad:
            raise ValueError(f"invalid PolicyConfig: {', '.join(bad)}")


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


def state_key(offer: Offer, phase: str = "") -> tuple[str, ...]:
    """The acceptance-table key of an offer in a phase: ``(drafter, *state, phase)``."""
    return (offer.drafter, *offer.state, phase)


def state_name(key: tuple[str, ...]) -> str:
    """A state key as a compact name, e.g. ``ngram:4+:unanimous:continuing``."""
    return ":".join(part for part in key if part)


@dataclass
class AcceptanceTable:
    """Measured acceptance per drafting state (:func:`state_key`), shared by the requests
    of one engine.

    Not thread-safe on its own: the engine runs one request at a time.
    """

    config: PolicyConfig = field(default_factory=PolicyConfig)
    counts: dict[tuple[str, ...], _Counts] = field(default_factory=dict)
    priors: dict[str, tuple[float, float]] = field(default_factory=dict)

    def set_prior(self, drafter: str, alpha_first: float, alpha_next: float) -> None:
        """Start every state of ``drafter`` from a measured (α₁, αₙ) instead of the
        config's prior — e.g. a draft model's agreement with the target measured at load —
        so a drafter that pays is tried before it has any counts. ``drafter`` may also name
        a state's prefix (``"ngram:4+:unanimous"``): the longest prefix with a prior wins.

        Raises:
            ValueError: an α outside [0, 1].
        """
        if not (0.0 <= alpha_first <= 1.0 and 0.0 <= alpha_next <= 1.0):
            raise ValueError(f"priors must lie in [0, 1], got {alpha_first}, {alpha_next}")
        self.priors[drafter] = (alpha_first, alpha_next)

    def alphas(self, state: tuple[str, ...]) -> tuple[float, float]:
        """(α₁, αₙ) of ``state``: its counts smoothed with the prior of its longest prefix that
        has one (:meth:`set_prior`: the state's, its drafter's), else the config's."""
        c, cfg = self.counts.get(state, _Counts()), self.config
        k = cfg.prior_strength
        prefixes = (state_name(state[:n]) for n in range(len(state), 0, -1))
        first, nxt = next((self.priors[p] for p in prefixes if p in self.priors), (cfg.prior_first, cfg.prior_next))
        return ((c.first_accepted + first * k) / (c.first_tried + k),
                (c.next_accepted + nxt * k) / (c.next_tried + k))

    def update(self, state: tuple[str, ...], proposed: int, accepted: int) -> None:
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
        """``{state name: {"alpha_first", "alpha_next", "rounds"}}``: what the policy has learned (eval reports)."""
        return {state_name(s): {"alpha_first": round(a1, 3), "alpha_next": round(an, 3),
                                "rounds": round(self.counts[s].first_tried, 1)}
                for s in sorted(self.counts, key=str) for a1, an in [self.alphas(s)]}


@dataclass(frozen=True)
class Segment:
    """One drafter's part of a round: ``tokens`` to draft from ``offer``, booked under ``key``."""

    offer: Offer
    tokens: int
    key: tuple[str, ...]


@dataclass(frozen=True)
class Decision:
    """One round's plan: segments drafted in order, each continuing the one before (no
    segment = a plain decode step); ``declined``: free offers (a lookup's) it does not draft,
    whose proposals are measured off-policy (:mod:`decoding.planning.shadow`)."""

    segments: tuple[Segment, ...]
    reason: str
    declined: tuple[Segment, ...] = ()

    @property
    def drafter(self) -> str | None:
        """The drafters in order, e.g. ``"ngram+draft_model"``; ``None`` for a plain step."""
        return "+".join(s.offer.drafter for s in self.segments) or None

    @property
    def gamma(self) -> int:
        """Tokens planned in all."""
        return sum(s.tokens for s in self.segments)


PLAIN = Decision((), "plain")


def _describe(segment: Segment) -> str:
    """A segment's state in words, for switch reasons."""
    phase = segment.key[-1]
    words = {CONTINUING: ", continuing an accepted run", EXTENDING: ", extending the span before it"}.get(phase, "")
    return f"{segment.offer.description or segment.offer.drafter}{words}"


@dataclass
class DrafterPolicy:
    """Per-request policy state over the engine's shared :class:`AcceptanceTable`.

    Args:
        costs: the calibrated target costs (the drafters' own step costs come with their offers).
        table: measured acceptance (updated by :meth:`update`).
    """

    costs: CostModel
    table: AcceptanceTable = field(default_factory=AcceptanceTable)
    current: str | None = "start"
    _last_full: str | None = None  # drafter whose previous round ended with all its tokens accepted

    def key(self, offer: Offer, extending: bool = False) -> tuple[str, ...]:
        """The table key of ``offer`` this round (its phase from the previous round)."""
        phase = EXTENDING if extending else CONTINUING if self._last_full == offer.drafter else ""
        return state_key(offer, phase)

    def expected(self, segments: Sequence[Segment]) -> tuple[float, float]:
        """A plan's expected committed tokens (bonus token included) and its drafting cost
        (ms: the drafters' steps and set-up, without the target pass)."""
        expected, reach, drafting = 1.0, 1.0, 0.0
        for s in segments:
            a1, an = self.table.alphas(s.key)
            for j in range(s.tokens):
                reach *= a1 if j == 0 else an
                expected += reach
            drafting += s.tokens * (s.offer.step_ms or 0.0) + (s.offer.setup_ms if s.tokens else 0.0)
        return expected, drafting

    def _rate(self, segments: Sequence[Segment]) -> float:
        """Expected committed tokens per ms of a plan (its target pass and drafting)."""
        expected, drafting = self.expected(segments)
        return expected / (self.costs.verify(sum(s.tokens for s in segments) + 1) + drafting)

    def curve(self, chains: Sequence[Sequence[Offer]], room: int) -> dict[int, tuple[float, float, Decision]]:
        """The best plan per γ for a batch's allocation (:func:`decoding.planning.batch_policy.allocate`):
        ``{γ: (expected tokens, drafting ms, plan)}`` for γ = 1..``room`` where some
        chain can draft γ; the most expected tokens wins, the cheaper drafting on a tie. The
        target pass is priced by the batch, not here."""
        best: dict[int, tuple[float, float, Decision]] = {}
        for chain in chains:
            if not chain or room <= 0 or any(o.max_tokens <= 0 or o.step_ms is None for o in chain):
                continue
            head = tuple(Segment(o, o.max_tokens, self.key(o, extending=i > 0)) for i, o in enumerate(chain[:-1]))
            last, drafted = chain[-1], sum(s.tokens for s in head)
            key = self.key(last, extending=len(chain) > 1)
            for g in range(1, min(last.max_tokens, room - drafted) + 1):
                plan = head + (Segment(last, g, key),)
                e, ms = self.expected(plan)
                gamma = drafted + g
                if gamma not in best or (e, -ms) > (best[gamma][0], -best[gamma][1]):
                    best[gamma] = (e, ms, Decision(plan, ""))
        return best

    def _best(self, chain: Sequence[Offer], room: int) -> tuple[float, tuple[Segment, ...]] | None:
        """The best plan over ``chain``: every offer but the last in full, the last with the
        γ that maximises the rate; ``None`` when the chain cannot draft."""
        if any(o.max_tokens <= 0 or o.step_ms is None for o in chain):
            return None
        head = tuple(Segment(o, o.max_tokens, self.key(o, extending=i > 0)) for i, o in enumerate(chain[:-1]))
        last = chain[-1]
        key = self.key(last, extending=len(chain) > 1)
        left = min(last.max_tokens, room - sum(s.tokens for s in head))
        plans = [head + (Segment(last, g, key),) for g in range(1, left + 1)]
        return max(((self._rate(p), p) for p in plans), default=None, key=lambda rp: rp[0])

    def choose(self, chains: Sequence[Sequence[Offer]], room: int) -> Decision:
        """Pick the plan for the next round.

        Args:
            chains: the candidate plans, each a sequence of offers drafted one after the
                other (a single offer, or a span that runs out followed by an extension).
            room: most tokens the round may draft (the γ ceiling clipped by budget and context:
                :func:`decoding.planning.round.gamma_ceiling`).
        """
        plain_rate = 1.0 / self.costs.verify(1)
        options = [b for c in chains if c and room > 0 for b in [self._best(c, room)] if b is not None]
        best = max(options, default=None, key=lambda o: o[0])
        if best is None or best[0] < plain_rate * self.table.config.min_gain:
            return Decision((), "no drafter expected to beat plain decoding")
        rate, segments = best
        words = " then ".join(f"{_describe(s)}: α̂₁={a1:.2f} α̂ₙ={an:.2f}, γ={s.tokens}"
                              for s in segments for a1, an in [self.table.alphas(s.key)])
        return Decision(segments, f"{words}; expected {rate / plain_rate:.2f}x plain decoding")

    def fixed(self, offer: Offer, gamma: int) -> Decision:
        """A plan that bypasses the policy: ``gamma`` tokens from ``offer``'s drafter (fixed γ)."""
        return Decision((Segment(offer, gamma, self.key(offer)),), "fixed γ")

    def update(self, decision: Decision, proposed: Sequence[int], accepted: int) -> None:
        """Fold one round's outcome into the table.

        Args:
            decision: the round's plan.
            proposed: tokens each segment actually proposed (a drafter may stop early).
            accepted: how many of all the proposed tokens were accepted (a prefix).
        """
        self._last_full = None
        offset = 0
        for segment, n in zip(decision.segments, proposed, strict=False):
            if n <= 0:
                continue
            if accepted < offset:  # this segment was never reached
                break
            got = min(accepted - offset, n)
            self.table.update(segment.key, n, got)
            self._last_full = segment.offer.drafter if got == n else None
            offset += n
