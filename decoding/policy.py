"""Which drafter, and how many tokens, per round — chosen from measured numbers.

Expected tokens committed by one round that drafts γ tokens with per-token acceptance
α is E(γ) = (1 - α^(γ+1)) / (1 - α) (Leviathan et al. 2023, eq. 1, bonus token
included). The round costs one target pass over γ + 1 tokens plus γ draft-model steps
(the n-gram drafter is free). The policy picks the (drafter, γ) with the highest
E / cost and decodes plainly when nothing beats 1 token per single-token pass.

α per drafter is an exponential moving average over its recent rounds. The n-gram
drafter keeps two: for short and for long suffix matches, so a long match that
reappears brings it back even after its short matches stopped paying. An unused
estimate drifts back toward its prior, so a drafter benched early gets retried.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from decoding.drafter import Draft


@dataclass(frozen=True)
class CostModel:
    """Measured costs on this hardware, in milliseconds.

    Attributes:
        verify_ms: ``verify_ms[n - 1]`` is one target forward over n new tokens.
        draft_step_ms: one draft-model step over 1 token (``None`` = no draft model).
    """

    verify_ms: tuple[float, ...]
    draft_step_ms: float | None = None

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
        ema_weight: weight of the newest round in each α moving average.
        recovery: per unused round, fraction by which an α estimate returns to its prior.
        long_match: suffix-match length (tokens) counted as a long n-gram match.
        prior_ngram_short / prior_ngram_long / prior_draft_model: initial α estimates.
        min_gain: speculate only when the expected rate beats plain decoding by this factor.
    """

    ema_weight: float = 0.3
    recovery: float = 0.05
    long_match: int = 3
    prior_ngram_short: float = 0.5
    prior_ngram_long: float = 0.8
    prior_draft_model: float = 0.8
    min_gain: float = 1.02


@dataclass(frozen=True)
class Decision:
    """One round's choice: ``drafter`` None means a plain decode step; γ tokens to draft."""

    drafter: str | None
    gamma: int
    reason: str


def expected_tokens(alpha: float, gamma: int) -> float:
    """E(γ) = (1 - α^(γ+1)) / (1 - α): tokens committed per round, bonus included."""
    alpha = min(max(alpha, 0.0), 0.999)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


@dataclass
class DrafterPolicy:
    """Per-request policy state (create one per request)."""

    costs: CostModel
    config: PolicyConfig = field(default_factory=PolicyConfig)
    alphas: dict[str, float] = field(default_factory=dict)
    current: str | None = "start"

    def __post_init__(self) -> None:
        c = self.config
        self._priors = {"ngram_short": c.prior_ngram_short, "ngram_long": c.prior_ngram_long,
                        "draft_model": c.prior_draft_model}
        self.alphas = dict(self._priors)

    def _ngram_key(self, draft: Draft) -> str:
        return "ngram_long" if draft.match_length >= self.config.long_match else "ngram_short"

    def _best_gamma(self, alpha: float, gamma_max: int, step_ms: float) -> tuple[int, float]:
        best = (0, 1.0 / self.costs.verify(1))
        for g in range(1, gamma_max + 1):
            rate = expected_tokens(alpha, g) / (self.costs.verify(g + 1) + g * step_ms)
            if rate > best[1]:
                best = (g, rate)
        return best

    def choose(self, ngram_draft: Draft | None, draft_model_ready: bool, gamma_max: int) -> Decision:
        """Pick the drafter and γ for the next round.

        Args:
            ngram_draft: the n-gram drafter's proposal (``None`` when it is disabled).
            draft_model_ready: whether a draft model may be used this round.
            gamma_max: most tokens any drafter may propose (budget and context clipped).
        """
        plain_rate = 1.0 / self.costs.verify(1)
        options: list[tuple[float, str, int, str]] = []
        if ngram_draft is not None and ngram_draft.tokens and gamma_max > 0:
            key = self._ngram_key(ngram_draft)
            g, rate = self._best_gamma(self.alphas[key], min(gamma_max, len(ngram_draft.tokens)), 0.0)
            if g:
                options.append((rate, "ngram", g, f"{ngram_draft.match_length}-gram match, α̂={self.alphas[key]:.2f}"))
        if draft_model_ready and gamma_max > 0 and self.costs.draft_step_ms is not None:
            g, rate = self._best_gamma(self.alphas["draft_model"], gamma_max, self.costs.draft_step_ms)
            if g:
                options.append((rate, "draft_model", g, f"α̂={self.alphas['draft_model']:.2f}"))
        best = max(options, default=None)
        if best is None or best[0] < plain_rate * self.config.min_gain:
            decision = Decision(None, 0, "no drafter expected to beat plain decoding")
        else:
            decision = Decision(best[1], best[2], best[3])
        return decision

    def update(self, name: str | None, draft: Draft | None, accepted: int) -> None:
        """Fold one round's outcome into the α estimates.

        Args:
            name: the drafter used (None for a plain step).
            draft: what it proposed (its length and, for n-gram, match length).
            accepted: how many of the proposed tokens were accepted.
        """
        used = None
        if name is not None and draft is not None and draft.tokens:
            used = self._ngram_key(draft) if name == "ngram" else name
            # Per-token acceptance seen this round: accepted of the positions actually tested.
            tested = min(accepted + 1, len(draft.tokens))
            observed = accepted / tested
            w = self.config.ema_weight
            self.alphas[used] = (1 - w) * self.alphas[used] + w * observed
        r = self.config.recovery
        for key, prior in self._priors.items():
            if key != used:
                self.alphas[key] += r * (prior - self.alphas[key])
