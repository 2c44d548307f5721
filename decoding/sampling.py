"""Turning logits into a distribution and drawing from it."""

from __future__ import annotations

import torch


def logits_to_probs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Temperature, top-k and top-p (nucleus, Holtzman et al. 2020) applied to logits.

    Args:
        logits: ``(..., vocab)`` any float dtype.
        temperature: > 0.
        top_k: keep the k largest logits (0 = all).
        top_p: keep the smallest set of tokens whose mass reaches top_p (1.0 = all).

    Returns:
        float32 probabilities of the same shape, each row summing to 1.
    """
    logits = logits.float()
    # Shift the maximum to 0 before scaling: a tiny temperature then sends the other logits
    # to -inf (a point mass), never to inf - inf = nan.
    logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop_sorted = cum - torch.softmax(sorted_logits, dim=-1) >= top_p  # mass before this token already >= p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.softmax(logits, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """Draw one token id from a 1-D float32 distribution ``(vocab,)``."""
    return int(torch.multinomial(probs, 1, generator=generator).item())


class SamplingParams:
    """A request's sampling settings and its seeded random generator.

    Args:
        temperature: > 0.
        top_k, top_p: see :func:`logits_to_probs`.
        seed: seeds ``generator`` (``None`` = nondeterministic).
        device: where the generator lives (the target's device).
    """

    def __init__(self, temperature: float, top_k: int, top_p: float, seed: int | None, device: torch.device) -> None:
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.generator = torch.Generator(device=device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """``(..., vocab)`` logits → float32 probabilities with this request's processing."""
        return logits_to_probs(logits, self.temperature, self.top_k, self.top_p)
