"""Exact prefix reuse: a new request starts from the KV cache of an earlier prompt that shares
its first tokens, only where the reused positions are bitwise what its own prefill would write.

A finished request parks its target KV cache here with its prompt and the prompt's last
logits. A new request takes the parked prompt it can reuse most of:

- the **same prompt** (a question asked again): every position is reused and the stored
  logits give the first token, so nothing is prefilled — a memo of the same computation;
- a prompt that **shares a prefix** (the instruction block, a conversation's earlier turns):
  positions ``[0, P)`` are copied, where ``P`` is the common prefix rounded down to one of the
  new prompt's prefill chunk ends (:meth:`Target.chunk_ends <decoding.backends.target.Target.chunk_ends>`)
  short of its last token. Each reused position was prefilled over the same tokens by the
  same kind of call (on llama.cpp one of 8 rows or more, whose bits do not depend on the call's
  size: :func:`~decoding.backends.llamacpp.chunk_ends`), so its keys and values are the ones a fresh
  prefill computes; the rest of the prompt is prefilled from ``P`` on the same boundaries as ever. Positions the
  parked request generated (verification passes, other matrix shapes) are never reused.
  On torch a prefill is one forward over the whole prompt (``generate()``'s), so only the
  same prompt qualifies there.

The same idea as vLLM's automatic prefix caching (block hashes over full blocks) and
SGLang's RadixAttention, restricted to whole prefill chunks so that reuse is exact by
construction rather than within numerical noise.

Memory: at most ``max_entries`` parked caches. On llama.cpp a parked cache is a sequence slot
of the KV already allocated up front (the service sizes ``n_seq_max`` as the batch plus two):
a new request that finds no free slot evicts the least recently used parked one. On torch a
parked cache keeps its own buffers (the prompt and answer positions × layers × 2 × KV heads ×
head dim × dtype bytes).

Entries are partitioned like the answer history (an access scope): a request reuses only
prompts of its own partition, so the time to first token says nothing about another scope's
questions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from decoding.backends.target import KVCache, Target

log = logging.getLogger(__name__)


@dataclass
class Parked:
    """A finished request's target KV cache, kept for reuse.

    Attributes:
        prompt: its prompt ids (positions ``[0, len(prompt))`` of ``cache`` are their prefill).
        cache: its KV cache (later positions hold its answer: never reused).
        logits: float logits ``(vocab,)`` of the prompt's last position.
        partition: the access scope it may be reused in.
    """

    prompt: tuple[int, ...]
    cache: KVCache
    logits: torch.Tensor
    partition: str


@dataclass(frozen=True)
class Reuse:
    """What a new request starts from.

    Attributes:
        cache: its own KV cache, holding ``tokens`` positions of its prompt.
        tokens: prompt positions already in ``cache`` (0: nothing reused).
        logits: the last prompt position's logits ``(vocab,)`` when the whole prompt is
            reused (nothing to prefill), else ``None``; the parked tensor itself, read only.
    """

    cache: KVCache
    tokens: int
    logits: torch.Tensor | None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Tokens ``a`` and ``b`` share from the start."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def reusable_tokens(prompt: Sequence[int], parked: Sequence[int], chunk_ends: Sequence[int]) -> int:
    """Positions of ``parked``'s prefill a request with ``prompt`` may reuse exactly: all of
    them for the same prompt, else the common prefix rounded down to one of ``prompt``'s prefill
    ``chunk_ends`` (:meth:`~decoding.backends.target.Target.chunk_ends`) and short of the prompt's
    last token (whose logits the request needs); 0 when none fits."""
    if tuple(prompt) == tuple(parked):
        return len(prompt)
    shared = min(common_prefix(prompt, parked), len(prompt) - 1)
    return max((end for end in chunk_ends if end <= shared), default=0)


class PrefixCache:
    """Parked KV caches of one target and the rule for reusing them (see the module docstring).

    Args:
        target: the target model whose caches are parked.
        max_entries: parked caches kept at most (0 turns reuse off).

    Not thread-safe on its own: the engine calls it under its lock.
    """

    def __init__(self, target: Target, max_entries: int = 2) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        self.target, self.max_entries = target, max_entries
        self.entries: list[Parked] = []  # least recently used first

    def take(self, prompt: Sequence[int], capacity: int, partition: str = "") -> Reuse:
        """A KV cache for ``prompt`` reserving ``capacity`` positions, with the longest exactly
        reusable prefix of a parked prompt of ``partition`` already in it.

        Raises:
            RuntimeError: the target has no room for another cache even with nothing parked.
        """
        ends = self.target.chunk_ends(len(prompt))
        best, best_tokens = None, 0
        for entry in self.entries:
            if entry.partition == partition:
                tokens = reusable_tokens(prompt, entry.prompt, ends)
                if tokens > best_tokens:
                    best, best_tokens = entry, tokens
        if best is None:
            return Reuse(self._make(lambda: self.target.new_cache(capacity)), 0, None)
        source = best
        self.entries.remove(source)
        try:
            cache = self._make(lambda: self.target.fork(source.cache, best_tokens, capacity))
            self.entries.append(source)  # now the most recently used
        except RuntimeError:  # no room for a copy even with nothing else parked: take the parked cache itself
            cache = source.cache
            self.target.rollback(cache, best_tokens)
        whole = best_tokens == len(prompt)
        return Reuse(cache, best_tokens, source.logits if whole else None)

    def park(self, prompt: Sequence[int], cache: KVCache, logits: torch.Tensor, partition: str = "") -> None:
        """Keep ``cache`` (whose first ``len(prompt)`` positions are ``prompt``'s prefill, whose
        last logits are ``logits``) for later requests; the same prompt parked before is
        replaced, and past ``max_entries`` the least recently used entry is released."""
        if self.max_entries == 0:
            self.target.release(cache)
            return
        key = tuple(prompt)
        for entry in [e for e in self.entries if e.prompt == key and e.partition == partition]:
            self._evict(entry)
        self.entries.append(Parked(key, cache, logits, partition))
        while len(self.entries) > self.max_entries:
            self._evict(self.entries[0])

    def clear(self) -> None:
        """Release every parked cache."""
        while self.entries:
            self._evict(self.entries[0])

    def _make(self, make: Callable[[], KVCache]) -> KVCache:
        """``make()``, evicting the least recently used parked caches while the target has no
        room for another.

        Raises:
            RuntimeError: no room, and nothing left to evict.
        """
        while True:
            try:
                return make()
            except RuntimeError:
                if not self.entries:
                    raise
                self._evict(self.entries[0])

    def _evict(self, entry: Parked) -> None:
        self.entries.remove(entry)
        self.target.release(entry.cache)
