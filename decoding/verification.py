"""Verification of drafted tokens against one target forward pass.

Every decoding mode verifies by exact match: the target's choice at each position is the
argmax of its *scores* (:meth:`decoding.sampling.TokenSelector.scores`) — the processed
logits when greedy, the filtered log-probabilities plus that position's Gumbel noise when
sampling (the Gumbel-max trick, noise seeded by (seed, position) only; see
:mod:`decoding.sampling`). Keep the longest drafted prefix that equals the target's
choices, then the target's own token at the first disagreement (or the bonus token after
a fully accepted draft). The committed block is therefore exactly what decoding one token
per target pass with the same scores would emit — plain greedy decoding, or the same
seeded sample — whoever drafted.

Sampling this way is exact (each token is a sample from the target's processed
distribution) and drafter-invariant (Daliri, Musco & Suresh 2024, arXiv:2408.07978); it
replaces the rejection sampling of Leviathan et al. 2023 (arXiv:2211.17192) / Chen et al.
2023 (arXiv:2302.01318), whose accepted tokens depend on the drafter's q, so a sample
changed with γ, the drafter or the measured cost table.
"""

from __future__ import annotations

import torch


def verify_greedy(draft_tokens: list[int], target_scores: torch.Tensor) -> tuple[list[int], int]:
    """Exact-match verification.

    Args:
        draft_tokens: k proposed ids.
        target_scores: ``(k + 1, vocab)``; row i scores the target's next token after the
            committed sequence plus ``draft_tokens[:i]`` (logits, processed logits, or
            Gumbel-perturbed log-probabilities); its argmax is the target's choice.

    Returns:
        ``(block, n_accepted)``: the tokens to commit (``n_accepted`` drafted ones plus
        the target's next token, so ``len(block) == n_accepted + 1``) and n_accepted.
    """
    choice = target_scores.argmax(dim=-1)  # (k+1,)
    k = len(draft_tokens)
    if k:
        draft = torch.tensor(draft_tokens, device=choice.device)
        n_accepted = int((choice[:k] == draft).to(torch.int32).cumprod(0).sum().item())
    else:
        n_accepted = 0
    return draft_tokens[:n_accepted] + [int(choice[n_accepted].item())], n_accepted
