"""Verification of drafted tokens against one target forward pass.

Greedy: keep the longest drafted prefix that equals the target's argmax, then the
target's own token at the first disagreement (or the bonus token after a fully
accepted draft). The committed block is therefore exactly what plain greedy decoding
would emit.

Sampling: speculative sampling of Leviathan et al. 2023 (arXiv:2211.17192) and Chen
et al. 2023 (arXiv:2302.01318): accept drafted x with probability min(1, p(x)/q(x));
on rejection sample from norm(max(0, p - q)). A drafter without probabilities (the
n-gram drafter) is a point mass q = δ_x.
"""

from __future__ import annotations

import torch

from decoding.drafter import Draft
from decoding.sampling import sample


def verify_greedy(draft_tokens: list[int], target_logits: torch.Tensor) -> tuple[list[int], int]:
    """Greedy verification.

    Args:
        draft_tokens: k proposed ids.
        target_logits: ``(k + 1, vocab)``; row i is the target's prediction after the
            committed sequence plus ``draft_tokens[:i]``.

    Returns:
        ``(block, n_accepted)``: the tokens to commit (``n_accepted`` drafted ones plus
        the target's next token, so ``len(block) == n_accepted + 1``) and n_accepted.
    """
    choice = target_logits.argmax(dim=-1)  # (k+1,)
    k = len(draft_tokens)
    if k:
        draft = torch.tensor(draft_tokens, device=choice.device)
        n_accepted = int((choice[:k] == draft).to(torch.int32).cumprod(0).sum().item())
    else:
        n_accepted = 0
    return draft_tokens[:n_accepted] + [int(choice[n_accepted].item())], n_accepted


def verify_sampling(draft: Draft, target_probs: torch.Tensor, generator: torch.Generator | None) -> tuple[list[int], int]:
    """Rejection-sampling verification (the emitted distribution equals the target's).

    Args:
        draft: k proposed ids; ``draft.probs`` is q as ``(k, vocab)`` float32 or ``None``
            for a point mass.
        target_probs: p as ``(k + 1, vocab)`` float32, processed with the same
            temperature / top-k / top-p as q.
        generator: the request's random generator.

    Returns:
        ``(block, n_accepted)`` as in :func:`verify_greedy`.
    """
    block: list[int] = []
    for i, x in enumerate(draft.tokens):
        p = target_probs[i]
        q_x = 1.0 if draft.probs is None else float(draft.probs[i, x])
        u = float(torch.rand((), generator=generator, device=p.device))
        if q_x > 0 and u < min(1.0, float(p[x]) / q_x):
            block.append(x)
            continue
        if draft.probs is None:
            residual = p.clone()
            residual[x] = 0.0
        else:
            residual = torch.clamp(p - draft.probs[i], min=0.0)
        total = float(residual.sum())
        block.append(sample(residual / total if total > 0 else p, generator))
        return block, i
    block.append(sample(target_probs[len(draft.tokens)], generator))
    return block, len(draft.tokens)
