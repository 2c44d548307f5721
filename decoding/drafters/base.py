"""The drafter interface: a small object that proposes tokens (vLLM ``spec_decode`` style).

The engine drives a list of drafters through :class:`Drafter`: per round, every drafter the
request's :class:`DraftingMode` selects makes an :class:`Offer` (cheap: what it could propose
now), the policy picks a plan of one or more offers, the chosen drafters propose, and the
verifier sees one :class:`Draft` and the target's logits, whoever proposed it. Only the
draft-model drafter is known by type (:mod:`decoding.request`: a batch runs its proposals
together, and whether it prefills the prompt is priced).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    from decoding.sampling import TokenSelector


class DraftingMode(str, Enum):
    """Which drafters a request may use (``Speculation.drafting``).

    ``AUTO`` lets the cost-aware policy choose among all the engine's drafters per round;
    ``NGRAM`` / ``DRAFT_MODEL`` restrict it to the drafter of that name; ``OFF`` decodes
    plainly (one token per target pass, in our loop). A ``str`` enum: ``"ngram"`` and
    ``DraftingMode.NGRAM`` compare equal and serialise alike.
    """

    AUTO = "auto"
    NGRAM = "ngram"
    DRAFT_MODEL = "draft_model"
    OFF = "off"

    def __str__(self) -> str:
        """The value (``"ngram"``), as in f-strings, logs and CLI output."""
        return self.value

    def selects(self, drafter_name: str) -> bool:
        """Whether this mode lets the drafter called ``drafter_name`` propose."""
        return self is DraftingMode.AUTO or (self is not DraftingMode.OFF and self.value == drafter_name)

    @property
    def single(self) -> bool:
        """The mode names one drafter (``NGRAM`` or ``DRAFT_MODEL``)."""
        return self not in (DraftingMode.AUTO, DraftingMode.OFF)


@dataclass
class Draft:
    """Up to γ proposed continuation tokens.

    Attributes:
        tokens: proposed token ids, in order (may be empty: nothing to propose).
        match_length: for the n-gram drafter, the length of the suffix n-gram that matched.
        unanimous: for the n-gram drafter, whether every occurrence of the matched n-gram
            continues with the same next token (ambiguous matches are accepted far less often).
        origin: for the n-gram drafter, what it copied from: ``"passage"`` (a retrieved
            passage), ``"output"``, ``"prompt"`` or ``"history"``; empty for a model's draft.
            Accepted tokens copied from a passage are quoted from the sources by construction
            (``GenerationStats.copied_from_passages``).
    """

    tokens: list[int]
    match_length: int = 0
    unanimous: bool = True
    origin: str = ""

    def truncated(self, n: int) -> Draft:
        """The first ``n`` proposed tokens (the rest of the draft as it is)."""
        return Draft(self.tokens[:n], self.match_length, self.unanimous, self.origin)


def join_drafts(drafts: Sequence[Draft]) -> Draft:
    """One draft from consecutive segments (a copied span, then a draft model extending it):
    their tokens in order; a lone non-empty segment is returned as it is."""
    kept = [d for d in drafts if d.tokens]
    if len(kept) == 1:
        return kept[0]
    return Draft([t for d in kept for t in d.tokens])


@dataclass(frozen=True)
class DraftRequest:
    """What a drafter learns about a request when it starts (after the target's prefill).

    Attributes:
        prompt_ids: the prompt as fed to the target (token ids).
        contexts: token ids of each retrieved passage, best first (drafting sources).
        target_cache: the target's KV cache holding the prompt (a
            :class:`decoding.kv.cache.PreallocatedCache`; a draft with the target's KV
            layout and dtype drafts over it, with no cache or prefill of its own).
        sampling: the request's token selector (logits processors, greedy or seeded
            Gumbel-max); ``None`` = plain greedy.
        reproducible: a seeded sample: drafting must not depend on earlier requests.
        output_reserve: positions past the prompt a drafter's own KV cache reserves up
            front (tokens: the answer budget, capped, plus γ); it regrows past them.
        prefill_draft: a draft model with a KV cache of its own runs over the prompt now,
            so that its first proposal is cheap (the engine decides whether that pays).
        history_partition: the answer-history partition it may draft from
            (:attr:`decoding.config.Speculation.history_partition`).
    """

    prompt_ids: list[int]
    contexts: list[list[int]] = field(default_factory=list)
    target_cache: object = None
    sampling: TokenSelector | None = None
    reproducible: bool = False
    output_reserve: int = 0
    prefill_draft: bool = False
    history_partition: str = ""


@dataclass(frozen=True)
class Offer:
    """What a drafter could propose this round, known before it spends anything.

    Attributes:
        drafter: the drafter's name.
        max_tokens: most tokens it can propose now (0: nothing to offer). Fewer than were
            asked for means its proposal ends there (a copied span runs out), so another
            drafter may extend it.
        state: the features its acceptance depends on, e.g. ``("4+", "unanimous")`` for an
            n-gram match; the policy keeps measured acceptance per (drafter, state).
        description: the state in words, for switch reasons.
        step_ms: cost of drafting one token (ms; 0 for a lookup); ``None`` = not measured,
            so the policy never picks it (a fixed-γ request still can).
        setup_ms: cost spent once before the first drafted token (ms), e.g. a draft model
            feeding the tokens its KV cache lacks (the span drafted before it this round).
    """

    drafter: str
    max_tokens: int
    state: tuple[str, ...] = ()
    description: str = ""
    step_ms: float | None = 0.0
    setup_ms: float = 0.0


class Drafter(Protocol):
    """Proposes tokens and observes every committed token.

    Each request works on its own shallow copy (``copy.copy``) of the engine's drafter, made
    before :meth:`begin`, so requests decoding at once never share drafting state: set every
    per-request attribute in :meth:`begin` (expensive resources — a draft model — stay shared).

    Per request: :meth:`begin` once after the target's prefill; per round :meth:`offer`
    (cheap), then :meth:`propose` if the policy chose it; :meth:`observe` after every
    commit (including the prefill's token). ``after`` is what earlier drafters proposed
    in the same round: the proposal continues ``committed + after``.
    """

    name: str

    def begin(self, request: DraftRequest) -> None:
        """Reset for a new request."""
        ...

    def offer(self, max_tokens: int, after: Sequence[int] = ()) -> Offer:
        """What it could propose after ``committed + after`` (at most ``max_tokens``)."""
        ...

    def propose(self, max_tokens: int, after: Sequence[int] = ()) -> Draft:
        """Up to ``max_tokens`` tokens continuing ``committed + after``."""
        ...

    def observe(self, new_tokens: Sequence[int]) -> None:
        """Committed tokens, in order."""
        ...
