"""Per-request decoding statistics, and the timers that book wall time into them."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

TARGET = "target"  # the producer of tokens no drafter proposed (first token, corrections, bonus tokens)


@dataclass
class DrafterStats:
    """Counts for one drafter in one request.

    Attributes:
        rounds: verification rounds it drafted.
        proposed: tokens it proposed (and the target verified).
        accepted: of those, tokens the target accepted.
        ms: wall time of its proposals (milliseconds).
    """

    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    ms: float = 0.0

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

    ``switches`` lists every change of plan (``{"at_token", "from", "to", "reason"}``;
    ``"ngram+draft_model"`` is a copied span the draft model extends). Every emitted token
    is credited to its producer: the drafter whose proposal the target accepted, or
    ``"target"`` (:attr:`produced`, :attr:`token_share`).
    """

    prompt_tokens: int = 0
    prefix_reused_tokens: int = 0  # prompt positions whose KV came from a parked prompt (decoding.kv.prefix_cache)
    new_tokens: int = 0
    prefill_ms: float = 0.0
    ttft_ms: float = 0.0
    decode_ms: float = 0.0
    total_ms: float = 0.0
    overhead_ms: float = 0.0  # decode-phase time outside target passes and drafting_ms: lookups, policy, bookkeeping
    drafting_ms: float = 0.0  # proposals the cost model prices (drafters with a step cost: draft-model passes)
    target_passes: int = 0
    decode_tokens: int = 0
    finish_reason: str | None = None
    loop_cut_tokens: int = 0  # generated, then removed by the loop stop (not in decode_tokens)
    drafters: dict[str, DrafterStats] = field(default_factory=dict)
    switches: list[dict[str, Any]] = field(default_factory=list)
    accepted_by_position: list[list[int]] = field(default_factory=list)  # [proposed, accepted] per draft slot
    block_sizes: list[int] = field(default_factory=list)
    gammas: list[int] = field(default_factory=list)  # γ drafted per decode-phase pass (0: a plain step)
    generation_settings: dict[str, Any] = field(default_factory=dict)  # effective logits settings (decoding.logits)
    draft_prefill: str | None = None  # whether a draft model with its own KV cache prefilled the prompt, and why
    backend: str = ""  # what ran the target ("llama.cpp", "torch": decoding.backends.target.Target.backend)
    batch_size_sum: int = 0  # requests sharing each decode-phase pass, summed over the passes
    max_batch_size: int = 0
    drafted_tokens: int = 0  # tokens drafted (and verified) over all passes: γ summed
    rounds_by_batch: dict[str, int] = field(default_factory=dict)  # "batch B, γ G": rounds so planned
    sources: list[str] = field(default_factory=list, repr=False)  # producer of each emitted token
    origins: list[str] = field(default_factory=list, repr=False)  # what each drafted token was copied from ("")

    @property
    def tau(self) -> float:
        """τ: tokens committed per decode-phase target pass (0 before any pass)."""
        return self.decode_tokens / self.target_passes if self.target_passes else 0.0

    def drafter(self, name: str) -> DrafterStats:
        """The counts of drafter ``name`` (created empty on first use)."""
        return self.drafters.setdefault(name, DrafterStats())

    @property
    def produced(self) -> dict[str, int]:
        """Emitted tokens per producer (drafter name or ``"target"``); sums to ``len(sources)``."""
        return dict(Counter(self.sources))

    @property
    def token_share(self) -> dict[str, float]:
        """Share of the emitted tokens each producer made: tokens accepted from drafter X ÷
        tokens emitted, and ``"target"`` for the rest (sums to 1; empty without tokens)."""
        n = len(self.sources)
        return {k: v / n for k, v in self.produced.items()} if n else {}

    def record_first(self) -> None:
        """Book the prefill's token (always the target's)."""
        self.sources.append(TARGET)
        self.origins.append("")

    def record_round(self, segments: Sequence[tuple[str, int] | tuple[str, int, str]], accepted: int, committed: int,
                     batch_size: int = 1) -> None:
        """Book one verification round.

        Args:
            segments: ``(drafter name, tokens proposed)`` or ``(drafter name, tokens proposed,
                origin)`` in draft order (empty = a plain step); ``origin`` as
                :attr:`decoding.drafters.base.Draft.origin`.
            accepted: drafted tokens the target accepted (a prefix of the draft).
            committed: tokens committed (``accepted + 1``, fewer when a stop cut the block).
            batch_size: requests that shared the round's target pass (this one included).
        """
        self.target_passes += 1
        self.batch_size_sum += batch_size
        self.max_batch_size = max(self.max_batch_size, batch_size)
        drafted = sum(segment[1] for segment in segments)
        self.drafted_tokens += drafted
        self.gammas.append(drafted)
        key = f"batch {batch_size}, γ {drafted}"
        self.rounds_by_batch[key] = self.rounds_by_batch.get(key, 0) + 1
        self.decode_tokens += committed
        self.block_sizes.append(committed)
        offset = 0
        for name, proposed, *origin in segments:
            if proposed <= 0:
                continue
            got = min(max(accepted - offset, 0), proposed)
            d = self.drafter(name)
            d.rounds += 1
            d.proposed += proposed
            d.accepted += got
            kept = max(min(got, committed - offset), 0)
            self.sources += [name] * kept
            self.origins += [origin[0] if origin else ""] * kept
            offset += proposed
        rest = committed - min(accepted, committed)
        self.sources += [TARGET] * rest
        self.origins += [""] * rest
        total = sum(segment[1] for segment in segments)
        while len(self.accepted_by_position) < total:
            self.accepted_by_position.append([0, 0])
        for i in range(total):
            self.accepted_by_position[i][0] += 1
            self.accepted_by_position[i][1] += int(i < accepted)

    def book_drafting(self, drafter: str | None, ms: float, priced: bool = True) -> None:
        """Book ``ms`` of proposals: to ``drafter``'s counts (when named) and, when the cost
        model prices them (a draft model's forwards), to :attr:`drafting_ms`."""
        if drafter is not None:
            self.drafter(drafter).ms += ms
        if priced:
            self.drafting_ms += ms

    @contextmanager
    def drafting(self, drafter: str | None = None, priced: bool = True) -> Iterator[None]:
        """Time the block as drafting (:meth:`book_drafting`)."""
        clock = Stopwatch()
        try:
            yield
        finally:
            self.book_drafting(drafter, clock.ms, priced)

    @contextmanager
    def overhead(self) -> Iterator[None]:
        """Time the block as :attr:`overhead_ms`, less the :attr:`drafting_ms` booked inside it."""
        clock, drafting = Stopwatch(), self.drafting_ms
        try:
            yield
        finally:
            self.overhead_ms += clock.ms - (self.drafting_ms - drafting)

    def truncate(self, kept: int) -> None:
        """Keep the producers of the first ``kept`` emitted tokens (after a loop stop's cut)."""
        del self.sources[kept:]
        del self.origins[kept:]

    @property
    def copied_from_passages(self) -> int:
        """Emitted tokens the n-gram drafter copied from a retrieved passage and the target
        accepted: quoted from the sources by construction."""
        return sum(1 for o in self.origins if o == "passage")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (adds τ, per-drafter α, and per decode-phase pass the mean
        batch size, 1.0 alone, and the mean γ drafted; 0 before any pass)."""
        out = asdict(self)
        del out["sources"], out["origins"]
        out["copied_from_passages"] = self.copied_from_passages
        out["copied_share"] = round(self.copied_from_passages / len(self.sources), 3) if self.sources else 0.0
        out["tau"] = round(self.tau, 3)
        out["mean_batch_size"] = round(_per_pass(self.batch_size_sum, self.target_passes), 3)
        out["mean_gamma"] = round(_per_pass(self.drafted_tokens, self.target_passes), 3)
        out["produced"] = self.produced
        out["token_share"] = {k: round(v, 3) for k, v in self.token_share.items()}
        out["drafters"] = {k: {**asdict(v), "ms": round(v.ms, 2), "alpha": round(v.alpha, 3)}
                           for k, v in self.drafters.items()}
        for k in ("prefill_ms", "ttft_ms", "decode_ms", "total_ms", "overhead_ms", "drafting_ms"):
            out[k] = round(out[k], 2)
        return out


def _per_pass(total: int, passes: int) -> float:
    """``total`` per target pass (0 before any pass)."""
    return total / passes if passes else 0.0


class Stopwatch:
    """Wall time since it was made (or :meth:`restart`-ed), in milliseconds."""

    def __init__(self) -> None:
        self._t0 = time.perf_counter()

    def restart(self) -> None:
        """Count from now."""
        self._t0 = time.perf_counter()

    @property
    def ms(self) -> float:
        """Milliseconds elapsed."""
        return (time.perf_counter() - self._t0) * 1000


class RequestClock:
    """The wall-clock marks of one request, booked into its :class:`GenerationStats` (ms):
    :meth:`start` at admission, :meth:`prefilled` (``prefill_ms``), :meth:`first_token`
    (``ttft_ms``; the decode phase starts), :meth:`decoded` (``decode_ms``) and
    :meth:`finished` (``total_ms``)."""

    def __init__(self, stats: GenerationStats) -> None:
        self.stats = stats
        self._request = Stopwatch()
        self._decode = Stopwatch()

    def start(self) -> None:
        """The request starts now."""
        self._request.restart()
        self._decode.restart()

    def prefilled(self) -> None:
        """The target's prefill pass is done."""
        self.stats.prefill_ms = self._request.ms

    def first_token(self) -> None:
        """The first token is chosen: time to first token; the decode phase starts."""
        self.stats.ttft_ms = self._request.ms
        self._decode.restart()

    def decoded(self) -> None:
        """The decode phase is over."""
        self.stats.decode_ms = self._decode.ms

    def finished(self) -> None:
        """The request is over."""
        self.stats.total_ms = self._request.ms
