"""Per-request decoding statistics."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class DrafterStats:
    """Counts for one drafter in one request.

    Attributes:
        rounds: verification rounds it drafted.
        proposed: tokens it proposed (and the target verified).
        accepted: of those, tokens the target accepted.
    """

    rounds: int = 0
    proposed: int = 0
    accepted: int = 0

    @property
    def alpha(self) -> float:
        """Acceptance rate α = accepted ÷ proposed (0 when nothing was proposed)."""
        return self.accepted / self.proposed if self.proposed else 0.0


@dataclass
class GenerationStats:
    """What one request cost and how speculation went.

    Times are milliseconds of wall clock. τ (mean accepted length) counts tokens
    committed per decode-phase target forward pass (the prefill pass and the first
    token it yields are excluded); after a loop stop only the tokens kept count, so
    repeats the user never sees do not inflate τ.
    """

    prompt_tokens: int = 0
    new_tokens: int = 0
    prefill_ms: float = 0.0
    ttft_ms: float = 0.0
    decode_ms: float = 0.0
    total_ms: float = 0.0
    overhead_ms: float = 0.0  # n-gram drafter + policy + bookkeeping
    draft_model_ms: float = 0.0  # draft-model forward passes (excluded from overhead_ms)
    target_passes: int = 0
    decode_tokens: int = 0
    finish_reason: str | None = None
    loop_cut_tokens: int = 0  # generated, then removed by the loop stop (not in decode_tokens)
    drafters: dict[str, DrafterStats] = field(default_factory=dict)
    switches: list[dict] = field(default_factory=list)
    accepted_by_position: list[list[int]] = field(default_factory=list)  # [proposed, accepted] per draft slot
    block_sizes: list[int] = field(default_factory=list)

    @property
    def tau(self) -> float:
        return self.decode_tokens / self.target_passes if self.target_passes else 0.0

    def drafter(self, name: str) -> DrafterStats:
        return self.drafters.setdefault(name, DrafterStats())

    def record_round(self, name: str | None, proposed: int, accepted: int, committed: int) -> None:
        """Book one verification round (``name`` None = a plain decode step)."""
        self.target_passes += 1
        self.decode_tokens += committed
        self.block_sizes.append(committed)
        if name is None:
            return
        d = self.drafter(name)
        d.rounds += 1
        d.proposed += proposed
        d.accepted += accepted
        while len(self.accepted_by_position) < proposed:
            self.accepted_by_position.append([0, 0])
        for i in range(proposed):
            self.accepted_by_position[i][0] += 1
            self.accepted_by_position[i][1] += int(i < accepted)

    def to_dict(self) -> dict:
        """JSON-serialisable summary (adds τ and per-drafter α)."""
        out = asdict(self)
        out["tau"] = round(self.tau, 3)
        out["drafters"] = {k: {**asdict(v), "alpha": round(v.alpha, 3)} for k, v in self.drafters.items()}
        for k in ("prefill_ms", "ttft_ms", "decode_ms", "total_ms", "overhead_ms", "draft_model_ms"):
            out[k] = round(out[k], 2)
        return out
