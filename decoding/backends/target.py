"""The target seam: what the decode loop asks of the model that verifies.

Two backends implement it — :class:`decoding.backends.models.LoadedModel` (a transformers model in
torch: CUDA, any Hugging Face id or folder) and :class:`decoding.backends.llamacpp.LlamaCppModel` (a
GGUF's own quantized kernels through llama.cpp, the CPU default). The engine, the drafters,
the policy, batching, stops and sampling see only this protocol: prefill a prompt into a
request's KV cache, run one pass over new tokens of one or several requests (verification),
roll a cache back to the committed length, copy a cache's first positions into a new one
(prefix reuse), release it.

A request's KV cache is an opaque handle made by :meth:`Target.new_cache`; the backend alone
reads it. Logits are float tensors ``(tokens, vocab)`` on :attr:`Target.device`, whatever the
backend computes in.
"""

from __future__ import annotations

from typing import Protocol, Sequence, TypeVar

import torch
from transformers import PreTrainedTokenizerBase

C = TypeVar("C")


class KVCache(Protocol):
    """One request's KV cache on the target (a backend's own object)."""

    def get_seq_length(self) -> int:
        """Positions held (tokens)."""
        ...


class Target(Protocol):
    """A target model as the decode loop sees it (see the module docstring).

    Attributes:
        name: the id or path it was loaded from.
        tokenizer: its Hugging Face tokenizer (prompts are built and outputs decoded with it).
        generation_defaults: the checkpoint's own generation settings that differ from "off"
            (:func:`decoding.backends.models.generation_defaults`); ``{}`` for a GGUF.
        backend: ``"torch"`` or ``"llama.cpp"`` (reports and logs only: no caller branches on it).
        model_type: the architecture's family name (``"qwen2"``, ``"llama"``), which picks the
            prompt style; ``None`` when unknown.
        max_positions: one request's context window in tokens (prompt + output): the one
            definition of it, capped by ``max_model_len`` when the target is loaded
            (:func:`decoding.backends.models.load_target`) and checked once per request
            (:meth:`decoding.core.EngineCore.check_request`).
    """

    name: str
    tokenizer: PreTrainedTokenizerBase
    generation_defaults: dict[str, object]
    backend: str
    model_type: str | None
    max_positions: int

    @property
    def device(self) -> torch.device:
        """Where its logits live."""
        ...

    @property
    def dtype(self) -> torch.dtype:
        """What its weights compute in (torch), or its logits' dtype (a quantized backend)."""
        ...

    @property
    def vocab_size(self) -> int:
        """Rows of its LM head: the logits' last dimension."""
        ...

    @property
    def packed(self) -> bool:
        """Whether :meth:`forward` over several requests runs them in one pass (else one after
        the other: still exact, not faster)."""
        ...

    def eos_token_ids(self) -> tuple[int, ...]:
        """Token ids that end an answer (may be empty)."""
        ...

    def new_cache(self, capacity: int) -> KVCache:
        """An empty KV cache for one request, reserving ``capacity`` positions (tokens).

        Raises:
            RuntimeError: the backend has no room for another request (every sequence slot taken).
        """
        ...

    def chunk_ends(self, length: int) -> list[int]:
        """Where a ``length``-token prompt's prefill chunks end (positions, ascending, the last is
        ``length``): fixed by the prompt's length alone, so whether one call runs the whole prompt, a
        batch runs it chunk by chunk between decode rounds, or a request reuses a parked prefix up to
        one of them, the KV cache (and the answer) is the same."""
        ...

    def prefill(self, prompt_ids: Sequence[int], cache: KVCache) -> torch.Tensor:
        """Run ``prompt_ids`` into ``cache`` after the positions it holds (empty, or the chunks
        of the same prompt before them), on :meth:`chunk_ends` boundaries; the last
        position's logits ``(vocab,)``."""
        ...

    def forward(self, rows: Sequence[tuple[Sequence[int], KVCache]]) -> list[torch.Tensor]:
        """One pass over each request's new tokens, appended to its cache.

        Args:
            rows: per request ``(new token ids, its cache)``, at least one token each.
        Returns:
            Per request, float logits ``(len(new token ids), vocab)``.
        """
        ...

    def rollback(self, cache: KVCache, keep: int) -> None:
        """Forget the positions of ``cache`` past ``keep`` (the rejected drafted tokens)."""
        ...

    def release(self, cache: KVCache) -> None:
        """Free ``cache`` (its memory, or its sequence slot); it is not used again."""
        ...

    def fork(self, cache: KVCache, keep: int, capacity: int) -> KVCache:
        """A new KV cache holding a bitwise copy of the first ``keep`` positions of ``cache``
        (left unchanged), reserving ``capacity`` positions: exact prefix reuse
        (:mod:`decoding.kv.prefix_cache`).

        Raises:
            RuntimeError: the backend has no room for another cache (every sequence slot taken).
        """
        ...


def backend_cache(cache: KVCache, kind: type[C], backend: str) -> C:
    """``cache`` as the ``kind`` of cache the ``backend`` made it (a backend reads only its own).

    Raises:
        TypeError: a cache made by another backend.
    """
    if not isinstance(cache, kind):
        raise TypeError(f"a {backend} target runs on its own caches ({kind.__name__}), got {type(cache).__name__}")
    return cache
