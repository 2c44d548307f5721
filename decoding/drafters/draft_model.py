"""Draft-model drafter: a small causal LM of the target's family proposes tokens.

It keeps its own KV cache in step with the committed sequence: before drafting it
rolls back to the longest prefix it shares with what was committed (its own rejected
proposals go) and feeds the committed tokens it has not seen in one forward (catching
up after rounds the n-gram drafter drafted). It stops early when its top probability
falls below ``min_confidence``.

When the draft model has the target's KV layout and dtype (a draft derived from the
target), it keeps no KV cache of its own: it attends to the keys and values the target
has verified, in the target's own cache, and writes its few proposal positions after
them, which it crops away before the target's pass (that pass writes those positions
anew, so verification never reads a draft's K/V). So there is no draft prefill, no
catch-up forward after rounds other drafters drafted, and no second copy of the context
(~85 MB at 1,900 positions for SmolLM2-135M). Each proposal feeds only the newest
committed token and the tokens drafted before it in the round. Measured for the lean
int4 draft at a 1,200-token context: a forward over 8 tokens costs 149 ms and over 16
tokens 258 ms, against 45 ms for one. What is fed is priced in the offer
(``Offer.setup_ms``, from the draft's measured forward costs), so the policy extends a
copied span only where that pays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import torch
from transformers import DynamicCache

from decoding.backends.models import LoadedModel
from decoding.backends.target import Target
from decoding.drafters.base import Draft, DraftRequest, Offer
from decoding.kv.cache import PreallocatedCache, crop_cache
from decoding.planning.online_costs import OnlineCosts
from decoding.sampling import TokenSelector


class VocabularyMismatchError(ValueError):
    """The draft model's tokenizer/vocabulary differs from the target's."""


def check_compatible(target: Target, draft: LoadedModel) -> None:
    """Raise :class:`VocabularyMismatchError` (naming both models) unless the draft's
    vocabulary equals the target's token for token."""
    tv, dv = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    if tv != dv:
        only_t = len(set(tv.items()) - set(dv.items()))
        raise VocabularyMismatchError(
            f"draft model {draft.name!r} does not share the vocabulary of target model {target.name!r} "
            f"({len(dv)} vs {len(tv)} tokens, {only_t} target entries differ)"
        )


def _same_kv_layout(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    keys = ("num_hidden_layers", "num_key_value_heads", "hidden_size", "num_attention_heads", "head_dim")
    return all(getattr(a.config, k, None) == getattr(b.config, k, None) for k in keys)


class DraftModelDrafter:
    """Proposes up to γ tokens with a small causal LM.

    Args:
        draft: the loaded draft model (vocabulary already checked).
        min_confidence: stop drafting when the draft's top probability drops below this.
        use_target_cache: draft over the target's KV cache (the K/V it verified, prompt and
            answer alike) instead of a cache of its own; only for drafts with the target's
            KV layout and dtype. ``None`` = decide from the configs (same layers, heads,
            head size and dtype).
        step_ms: measured cost of one draft step (ms, :func:`decoding.planning.calibration.calibrate`);
            ``None`` = not measured, so the cost-aware policy never picks it.
        feed_ms: ``feed_ms[n - 1]`` is one draft forward over n tokens (ms); prices feeding
            more than one token before drafting (``Offer.setup_ms``). Empty = not measured
            (feeding is then priced as one step per token).
        costs: the draft's forward costs learned online (:class:`~decoding.planning.online_costs.OnlineCosts`,
            its prior ``feed_ms``); every forward is booked into it and the offers are priced
            from it. ``None`` keeps ``step_ms`` / ``feed_ms`` fixed.

    A :class:`~decoding.drafters.base.Drafter`; with ``after`` it continues a span another
    drafter proposed in the same round (a copied span that ran out).
    """

    name = "draft_model"

    def __init__(self, draft: LoadedModel, target: Target, min_confidence: float = 0.2,
                 use_target_cache: bool | None = None, step_ms: float | None = None,
                 feed_ms: Sequence[float] = (), costs: OnlineCosts | None = None) -> None:
        self.draft = draft
        self.step_ms = step_ms
        self.feed_ms = tuple(feed_ms)
        self.costs = costs if step_ms is not None else None
        self.model = draft.model
        self.min_confidence = min_confidence
        # Only a torch target's KV cache can be drafted over (another backend's is its own).
        same = isinstance(target, LoadedModel) and _same_kv_layout(draft.model, target.model) \
            and draft.dtype == target.dtype
        self.use_target_cache = same if use_target_cache is None else use_target_cache
        self._cache: PreallocatedCache | None = None
        self._cached: list[int] = []
        self._committed: list[int] = []
        self._reserve = 0  # positions past the prompt its own cache reserves (set per request)
        self._target_cache: DynamicCache | None = None
        self._sampling = TokenSelector()
        # Same tokenizer, but the embedding may be padded differently (Qwen2.5-0.5B vs -7B):
        # q must live on the target's vocabulary and never propose an id the target lacks.
        self._target_vocab = target.vocab_size

    def begin(self, request: DraftRequest) -> None:
        """Reset per request; remember the target's KV cache (by reference: a draft that
        shares the target's layout drafts over it).

        ``request.sampling`` is the request's :class:`~decoding.sampling.TokenSelector` (its
        logits processors, greedy or Gumbel-max with the target's noise); ``None`` = plain greedy.
        """
        self._cache, self._cached = None, []
        self._committed = list(request.prompt_ids)
        self._reserve = request.output_reserve
        self._sampling = request.sampling or TokenSelector()
        self._target_cache = None
        if self.use_target_cache and isinstance(request.target_cache, DynamicCache):
            self._target_cache = request.target_cache
        elif request.prefill_draft and len(self._committed) > 1:
            self.prefill()

    @property
    def needs_prefill(self) -> bool:
        """The draft keeps a KV cache of its own (another layout than the target's): before its
        first proposal it must run over the whole prompt."""
        return not self.use_target_cache

    @torch.inference_mode()
    def prefill(self) -> None:
        """Run the draft over the committed tokens but the newest into its own cache now, so the
        first proposal feeds one token (its offers' ``setup_ms`` drops to ~0)."""
        cache = self._start_cache()
        ids = self._committed[:-1]
        if max(ids) < self.model.config.vocab_size:
            self._forward(ids, cache)
            self._cached = list(ids)

    def observe(self, new_tokens: Sequence[int]) -> None:
        """Committed tokens, in order (the draft cache catches up lazily, at the next proposal)."""
        self._committed.extend(int(t) for t in new_tokens)

    def offer(self, max_tokens: int, after: Sequence[int] = ()) -> Offer:
        """Up to ``max_tokens`` (clipped to the draft's context window) at ``step_ms`` each,
        plus ``setup_ms`` when more than one token must be fed first; no state beyond the
        round's phase."""
        room = min(max_tokens, self.draft.max_positions - len(self._committed) - len(after))
        return Offer(self.name, max(room, 0), (), "draft model", self._feed_cost(1), self._setup_ms(len(after)))

    def _feed_cost(self, n: int) -> float | None:
        """A draft forward over ``n`` tokens (ms): learned online when it can be, else the
        calibration; ``None`` when the draft step was not measured."""
        return None if self.step_ms is None else self._feed_ms(n, self.step_ms)

    def _feed_ms(self, n: int, step_ms: float) -> float:
        if self.costs is not None:
            return self.costs.estimate(n, len(self._committed))
        table = self.feed_ms
        if not table:
            return n * step_ms
        return table[n - 1] if n <= len(table) else table[-1] * n / len(table)

    def _setup_ms(self, n_after: int) -> float:
        """Cost (ms) of the forward before the first drafted token beyond one step: it feeds
        the committed tokens neither cached nor copyable from the target, and ``n_after``."""
        target = self._target_cache
        known = self._verified_length(target) if target is not None else self._shared_prefix(self._committed)
        n = max(len(self._committed) - known, 1) + n_after
        if n <= 1 or self.step_ms is None:
            return 0.0
        return max(self._feed_ms(n, self.step_ms) - self._feed_ms(1, self.step_ms), 0.0)

    def _verified_length(self, target_cache: DynamicCache) -> int:
        """Committed positions whose K/V the target's cache holds (all but the newest token)."""
        return min(target_cache.get_seq_length(), len(self._committed) - 1)

    def _shared_prefix(self, seq: Sequence[int]) -> int:
        """Length of the prefix of ``seq`` whose K/V the draft cache holds."""
        n = 0
        for a, b in zip(self._cached, seq, strict=False):
            if a != b:
                break
            n += 1
        return n

    def _start_cache(self) -> PreallocatedCache:
        """A fresh cache of the draft's own (reserving the committed tokens and the output)."""
        self._cache = PreallocatedCache(len(self._committed) + self._reserve)  # regrows past it
        self._cached = []
        return self._cache

    def _forward(self, ids: list[int], cache: DynamicCache) -> torch.Tensor:
        """One draft forward over ``ids`` after ``cache``: the last position's logits on the
        target's vocabulary ``(target vocab,)``; booked into the online costs."""
        x = torch.tensor([ids], device=self.draft.device)
        t, context = time.perf_counter(), cache.get_seq_length()
        logits = self.model(input_ids=x, cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1]
        self._book(len(ids), context, t)
        return self._on_target_vocab(logits)

    def _book(self, rows: int, context: int, t0: float) -> None:
        if self.costs is not None:
            if self.draft.device.type == "cuda":
                torch.cuda.synchronize(self.draft.device)
            self.costs.observe(rows, context, (time.perf_counter() - t0) * 1000)

    def _on_target_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits ``(draft vocab,)`` cut or padded with -inf to the target's vocabulary."""
        extra = self._target_vocab - logits.shape[-1]
        if extra < 0:
            return logits[: self._target_vocab]
        return torch.nn.functional.pad(logits, (0, extra), value=float("-inf")) if extra else logits

    # -- a proposal in steps (so that several requests' proposals can share each forward) ----------
    def _open(self, max_tokens: int, after: Sequence[int]) -> "_Proposal | None":
        """Start a proposal of up to ``max_tokens`` after the committed sequence + ``after``: the
        cache rolled back to what it shares with that sequence; ``None`` when nothing can be drafted."""
        seq = self._committed + [int(t) for t in after]  # what the proposal continues
        # Stay inside the draft's own context window (it may be shorter than the target's).
        max_tokens = min(max_tokens, self.draft.max_positions - len(seq))
        if max_tokens <= 0:
            return None
        cache: DynamicCache
        if self._target_cache is not None:  # draft over the target's verified K/V
            cache, known = self._target_cache, self._verified_length(self._target_cache)
        else:
            cache = self._cache if self._cache is not None else self._start_cache()
            known = min(self._shared_prefix(seq), len(seq) - 1)  # feed at least one
        if max(seq[known:]) >= self.model.config.vocab_size:
            return None  # the target emitted an id past the draft's (padded) vocabulary
        crop_cache(cache, known)
        return _Proposal(seq, cache, known, max_tokens, seq[known:])

    def _take(self, p: "_Proposal", logits: torch.Tensor) -> bool:
        """Choose the next token from the logits of ``p.feed``; whether ``p`` needs another forward."""
        if p.tokens:
            p.fed += p.feed  # a drafted token's KV is now in the cache
        x, confidence = self._sampling.choose_with_confidence(p.seq + p.tokens, logits)
        if confidence < self.min_confidence:
            return False
        p.tokens.append(x)
        p.feed = [x]
        return len(p.tokens) < p.max_tokens

    def _close(self, p: "_Proposal") -> Draft:
        """End a proposal: the target's cache cropped back (its pass writes those positions
        itself), or the draft cache's contents remembered."""
        if self._target_cache is not None:
            crop_cache(p.cache, p.known)
        else:
            self._cached = p.seq + p.fed  # what its own cache now holds
        return Draft(p.tokens)

    @staticmethod
    @torch.inference_mode()
    def propose_together(requests: Sequence[tuple["DraftModelDrafter", int, Sequence[int]]]) -> list[Draft]:
        """Several requests' draft-model proposals, their forwards shared: each step feeds every
        still-drafting request's tokens through one :func:`~decoding.backends.packed_pass.packed_pass` of the
        draft model (each over its own KV cache), so a batch of B requests drafting γ tokens runs γ
        draft passes, not B·γ. One request, or a draft without the packed layout, steps alone.

        Args:
            requests: ``(drafter, max_tokens, after)`` per request, as :meth:`DraftModelDrafter.propose`;
                the drafters share one draft model (per-request copies of one drafter).

        Returns:
            One :class:`Draft` per request, in order; each is what ``propose`` alone would return.
        """
        from decoding.backends.packed_pass import packed_pass, supports_packed_pass

        opened = [(d, d._open(n, after)) for d, n, after in requests]
        live = [(d, p) for d, p in opened if p is not None]
        packed = len(live) > 1 and supports_packed_pass(live[0][0].model)
        try:
            while live:
                if packed and len(live) > 1:
                    t, context = time.perf_counter(), sum(p.cache.get_seq_length() for _, p in live)
                    rows = packed_pass(live[0][0].model, [(p.feed, p.cache) for _, p in live], last_only=True)
                    live[0][0]._book(sum(len(p.feed) for _, p in live), context, t)
                    logits = [d._on_target_vocab(r[-1]) for (d, _), r in zip(live, rows, strict=True)]
                else:
                    logits = [d._forward(p.feed, p.cache) for d, p in live]
                live = [(d, p) for (d, p), row in zip(live, logits, strict=True) if d._take(p, row)]
        finally:
            drafts = [Draft([]) if p is None else d._close(p) for d, p in opened]
        return drafts

    @torch.inference_mode()
    def propose(self, max_tokens: int, after: Sequence[int] = ()) -> Draft:
        """Draft up to ``max_tokens`` tokens after the committed sequence + ``after``
        (one forward over what the cache lacks, then one step per token).

        Each token is the request's choice rule applied to the draft's logits (processed with
        the draft's prefix, like the target's): greedy argmax, or when sampling
        ``argmax(log q_t + g_t)`` with the target's Gumbel noise for that output position, so
        the draft proposes what the target would draw with the same noise (coupled).

        Returns:
            A :class:`Draft` (verification is exact-match: the target's choice rule decides).
        """
        return DraftModelDrafter.propose_together([(self, max_tokens, after)])[0]


@dataclass
class _Proposal:
    """One request's proposal in progress: the sequence it continues, the cache and how much
    of it is kept, the budget, what the next forward feeds, the tokens drafted so far and
    those of them already fed."""

    seq: list[int]
    cache: DynamicCache
    known: int
    max_tokens: int
    feed: list[int]
    tokens: list[int] = field(default_factory=list)
    fed: list[int] = field(default_factory=list)
