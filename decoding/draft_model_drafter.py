"""Draft-model drafter: a small causal LM of the target's family proposes tokens.

It keeps its own KV cache in step with the committed sequence: before drafting it
rolls back to the longest prefix it shares with what was committed (its own rejected
proposals go) and feeds the committed tokens it has not seen in one forward (catching
up after rounds the n-gram drafter drafted). It stops early when its top probability
falls below ``min_confidence``. When the draft model has the target's KV layout (a
draft derived from the target), it starts from the target's prompt KV cache instead of
prefilling the prompt itself.
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import DynamicCache

from decoding.drafter import Draft, DraftRequest, Offer
from decoding.kv_cache import PreallocatedCache, crop_cache
from decoding.models import LoadedModel
from decoding.sampling import TokenSelector


class VocabularyMismatchError(ValueError):
    """The draft model's tokenizer/vocabulary differs from the target's."""


def check_compatible(target: LoadedModel, draft: LoadedModel) -> None:
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
        share_target_prefill: start from the target's prompt KV cache (only for drafts
            with the target's KV layout; ``None`` = decide from the configs).
        step_ms: measured cost of one draft step (ms, :func:`decoding.calibration.calibrate`);
            ``None`` = not measured, so the cost-aware policy never picks it.

    A :class:`~decoding.drafter.Drafter`; with ``after`` it continues a span another
    drafter proposed in the same round (a copied span that ran out).
    """

    name = "draft_model"

    def __init__(self, draft: LoadedModel, target: LoadedModel, min_confidence: float = 0.2,
                 share_target_prefill: bool | None = None, step_ms: float | None = None) -> None:
        self.draft = draft
        self.step_ms = step_ms
        self.model = draft.model
        self.min_confidence = min_confidence
        same = _same_kv_layout(draft.model, target.model) and draft.dtype == target.dtype
        self.share_target_prefill = same if share_target_prefill is None else share_target_prefill
        self._cache: PreallocatedCache | None = None
        self._cached: list[int] = []
        self._committed: list[int] = []
        self._prefix_kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._sampling = TokenSelector()
        # Same tokenizer, but the embedding may be padded differently (Qwen2.5-0.5B vs -7B):
        # q must live on the target's vocabulary and never propose an id the target lacks.
        self._target_vocab = int(target.model.config.vocab_size)

    def begin(self, request: DraftRequest) -> None:
        """Reset per request; remember (by reference, no copy) the target's prompt KV.

        ``request.sampling`` is the request's :class:`~decoding.sampling.TokenSelector` (its
        logits processors, greedy or Gumbel-max with the target's noise); ``None`` = plain greedy.
        """
        self._cache, self._cached = None, []
        self._committed = list(request.prompt_ids)
        self._reserve = request.output_reserve
        self._sampling = request.sampling or TokenSelector()
        self._prefix_kv = None
        if self.share_target_prefill and isinstance(request.target_cache, DynamicCache):
            # The prompt's positions: the target's later passes write after them (a dynamic
            # cache, into new tensors) and crops never reach them, so no copy is needed.
            self._prefix_kv = [(layer.keys, layer.values) for layer in request.target_cache.layers]

    def observe(self, new_tokens: Sequence[int]) -> None:
        """Committed tokens, in order (the draft cache catches up lazily, at the next proposal)."""
        self._committed.extend(int(t) for t in new_tokens)

    def offer(self, max_tokens: int, after: Sequence[int] = ()) -> Offer:
        """Up to ``max_tokens`` (clipped to the draft's context window) at ``step_ms`` each;
        no state beyond the round's phase."""
        room = min(max_tokens, self.draft.max_positions - len(self._committed) - len(after))
        return Offer(self.name, max(room, 0), (), "draft model", self.step_ms)

    def _start_cache(self) -> None:
        self._cache = PreallocatedCache(len(self._committed) + self._reserve)  # regrows past it
        if self._prefix_kv is not None:
            for i, (k, v) in enumerate(self._prefix_kv):
                self._cache.update(k, v, i)
            self._cached = self._committed[: self._prefix_kv[0][0].shape[-2]]
            self._prefix_kv = None
        else:
            self._cached = []

    def _forward(self, ids: list[int]) -> torch.Tensor:
        x = torch.tensor([ids], device=self.draft.device)
        logits = self.model(input_ids=x, cache=self._cache, use_cache=True, logits_to_keep=1).logits[0, -1]
        extra = self._target_vocab - logits.shape[-1]
        if extra < 0:
            return logits[: self._target_vocab]
        return torch.nn.functional.pad(logits, (0, extra), value=float("-inf")) if extra else logits

    @torch.inference_mode()
    def propose(self, max_tokens: int, after: Sequence[int] = ()) -> Draft:
        """Draft up to ``max_tokens`` tokens after the committed sequence + ``after``
        (one forward over what the draft cache lacks, then one step per token).

        Each token is the request's choice rule applied to the draft's logits (processed with
        the draft's prefix, like the target's): greedy argmax, or when sampling
        ``argmax(log q_t + g_t)`` with the target's Gumbel noise for that output position, so
        the draft proposes what the target would draw with the same noise (coupled).

        Returns:
            A :class:`Draft` (``probs`` is ``None``: verification is exact-match).
        """
        seq = self._committed + [int(t) for t in after]  # what the proposal continues
        # Stay inside the draft's own context window (it may be shorter than the target's).
        max_tokens = min(max_tokens, self.draft.max_positions - len(seq))
        if max_tokens <= 0:
            return Draft([])
        if self._cache is None:
            self._start_cache()
        lcp = 0
        for a, b in zip(self._cached, seq):
            if a != b:
                break
            lcp += 1
        lcp = min(lcp, len(seq) - 1)  # always feed at least the last token
        if max(seq[lcp:]) >= self.model.config.vocab_size:
            return Draft([])  # the target emitted an id past the draft's (padded) vocabulary
        crop_cache(self._cache, lcp)
        logits = self._forward(seq[lcp:])
        tokens: list[int] = []
        fed: list[int] = []  # drafted tokens whose KV is now in the draft cache
        for i in range(max_tokens):
            x, confidence = self._sampling.choose_with_confidence(seq + tokens, logits)
            if confidence < self.min_confidence:
                break
            tokens.append(x)
            if i + 1 < max_tokens:
                logits = self._forward([x])
                fed.append(x)
        self._cached = seq + fed
        return Draft(tokens)
