"""Turning the target's logits into tokens: logits processors, then greedy argmax or a
Gumbel-max sample whose noise depends only on (seed, output position).

Sampling uses the Gumbel-max trick (Gumbel 1954; Maddison, Tarlow & Minka 2014, "A*
Sampling", arXiv:1411.0030): with g_j i.i.d. standard Gumbel noise, ``argmax_j(log p_j + g_j)``
is an exact sample from p. The noise for output position t comes from a generator seeded
by a hash of (seed, t) alone (a counter-based stream), so the token at t is a deterministic
function of the prefix and (seed, t): it does not depend on the drafter, γ, how many
positions one verification pass covers, or the policy's cost table. Verification then
becomes exact-match against that token, as in greedy decoding
(:func:`decoding.verification.verify_greedy`), and every position is still an exact
sample from the processed target distribution p_t, because g_t is independent of the
prefix (which only depends on g_0 .. g_{t-1}).

The draft model proposes ``argmax(log q_t + g_t)`` with the *same* noise: a
communication-free Gumbel coupling of q and p. This is Drafter-Invariant Speculative
Decoding (Daliri, Musco & Suresh 2024, "Coupling without Communication and
Drafter-Invariant Speculative Decoding", arXiv:2408.07978): the output is fixed by the seed
whatever the drafter, and the draft agrees with the target with probability
>= (1 - TV(p, q)) / (1 + TV(p, q)) — a little below the 1 - TV of rejection sampling
(Leviathan et al. 2023, arXiv:2211.17192), the price of reproducibility. For the n-gram
drafter (a point mass on x) acceptance is p_t(x), as with rejection sampling.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import cast

import torch
from transformers import LogitsProcessorList

_MASK64 = (1 << 64) - 1


def filtered_logits(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Temperature, top-k and top-p (nucleus, Holtzman et al. 2020) applied to logits.

    Args:
        logits: ``(..., vocab)`` any float dtype.
        temperature: > 0.
        top_k: keep the k largest logits (0 = all).
        top_p: keep the smallest set of tokens whose mass reaches top_p (1.0 = all); the most likely
            token is always kept (``min_tokens_to_keep=1``, as transformers' ``TopPLogitsWarper``), so a
            ``top_p`` too small for any token to reach never empties the row.

    Returns:
        float32 ``(..., vocab)``: log-probabilities up to a per-row constant (the row maximum
        is 0), ``-inf`` for tokens filtered out; ``softmax`` of it is :func:`logits_to_probs`.
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
        drop_sorted[..., 0] = False  # rounding can put the top token's own "mass before" above a tiny top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def logits_to_probs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """float32 probabilities ``(..., vocab)`` (rows sum to 1) after :func:`filtered_logits`."""
    return torch.softmax(filtered_logits(logits, temperature, top_k, top_p), dim=-1)


def position_seed(seed: int, position: int) -> int:
    """Seed of output position ``position``'s Gumbel noise: a SplitMix64 hash (Steele et al.
    2014) of (seed, position), in [0, 2**63). Stable across processes and machines."""
    def mix(x: int) -> int:
        x = (x + 0x9E3779B97F4A7C15) & _MASK64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
        return x ^ (x >> 31)

    return mix(mix(seed & _MASK64) ^ (position & _MASK64)) >> 1


def gumbel_noise(seed: int, position: int, vocab: int, device: torch.device,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """Standard Gumbel noise ``(vocab,)`` float32 for one output position.

    ``-log(-log(u))`` with u uniform from a generator seeded by :func:`position_seed`; u is
    clamped away from 0 so the noise is finite. The same (seed, position, vocab) gives the
    same noise on the same device type (CPU and CUDA generators differ).

    Args:
        generator: a generator on ``device`` to reseed (saves creating one per call).
    """
    generator = generator or torch.Generator(device=device)
    generator.manual_seed(position_seed(seed, position))
    u = torch.rand(vocab, generator=generator, device=device).clamp_(min=torch.finfo(torch.float32).tiny)
    return -torch.log(-torch.log(u))


class TokenSelector:
    """How one request turns logits into tokens.

    Each logits row is processed by ``processors`` with its own prefix (prompt + output so
    far [+ drafted tokens]) as ``input_ids``, then: temperature 0 → greedy argmax; > 0 →
    ``argmax(filtered_logits + g_t)``, the Gumbel-max sample with noise g_t for output
    position t from (seed, t) only (see the module docstring). Either way the chosen token
    is the argmax of :meth:`scores`, so verification is exact-match.

    Args:
        processors: ``transformers.LogitsProcessorList`` (``None`` or empty = none), e.g.
            :meth:`decoding.logits.LogitsSettings.processors`.
        temperature: 0 = greedy; > 0 samples.
        top_k, top_p: see :func:`filtered_logits`.
        seed: base seed of the noise; ``None`` = a fresh random one (nondeterministic draws).
        prompt_length: prompt tokens; output position t of a row = prefix length − prompt length.
        device: where the logits (and the noise) live.
    """

    def __init__(self, processors: LogitsProcessorList | None = None, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int | None = None, prompt_length: int = 0,
                 device: torch.device | str = "cpu") -> None:
        self.processors = processors or LogitsProcessorList()
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.seed = secrets.randbits(63) if seed is None else int(seed)
        self.prompt_length = prompt_length
        self.device = torch.device(device)
        self._generator: torch.Generator | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def process(self, prefix: Sequence[int], draft: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        """Apply the processors row by row.

        Args:
            prefix: prompt + committed output (row 0's ``input_ids``).
            draft: k drafted tokens (row i's ``input_ids`` are ``prefix + draft[:i]``).
            logits: ``(k + 1, vocab)``.

        Returns:
            ``(k + 1, vocab)``: float32 processed logits, or ``logits`` itself (any dtype) when
            there are no processors.
        """
        if not self.processors:
            return logits
        assert logits.shape[0] == len(draft) + 1, (logits.shape, len(draft))
        logits = logits.to(torch.float32, copy=True)  # generate() processes float32 copies too
        ids = torch.tensor([list(prefix) + list(draft)], dtype=torch.long, device=logits.device)
        n = len(prefix)
        rows = [self.processors(cast(torch.LongTensor, ids[:, : n + i]), logits[i : i + 1])
                for i in range(logits.shape[0])]
        return torch.cat(rows)

    def scores(self, prefix: Sequence[int], draft: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        """``(k + 1, vocab)`` scores whose row-wise argmax is the token at each position:
        the processed logits (greedy) or filtered log-probabilities plus Gumbel noise (sampling).
        Arguments as in :meth:`process`."""
        processed = self.process(prefix, draft, logits)
        if self.greedy:
            return processed
        first = len(prefix) - self.prompt_length
        noise = torch.stack([self.noise(first + i, processed.shape[-1]) for i in range(processed.shape[0])])
        return filtered_logits(processed, self.temperature, self.top_k, self.top_p) + noise

    def noise(self, position: int, vocab: int) -> torch.Tensor:
        """Gumbel noise ``(vocab,)`` for output position ``position`` (:func:`gumbel_noise`)."""
        if self._generator is None:
            self._generator = torch.Generator(device=self.device)
        return gumbel_noise(self.seed, position, vocab, self.device, self._generator)

    def choose(self, prefix: Sequence[int], logits: torch.Tensor) -> int:
        """The token after ``prefix`` given its logits ``(vocab,)`` (e.g. the prefill's)."""
        return int(self.scores(prefix, (), logits[None]).argmax())

    def choose_with_confidence(self, prefix: Sequence[int], logits: torch.Tensor) -> tuple[int, float]:
        """As :meth:`choose`, plus the top probability of the processed (and, when sampling,
        filtered) distribution: a drafter's confidence in ``[0, 1]``."""
        processed = self.process(prefix, (), logits[None])[0]
        if self.greedy:
            top, index = torch.softmax(processed.float(), dim=-1).max(dim=-1)
            return int(index), float(top)
        filtered = filtered_logits(processed, self.temperature, self.top_k, self.top_p)
        token = int((filtered + self.noise(len(prefix) - self.prompt_length, filtered.shape[-1])).argmax())
        return token, float(torch.softmax(filtered, dim=-1).max())
