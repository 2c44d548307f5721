"""The drafter interface: a small object that proposes tokens (vLLM ``spec_decode`` style).

The verifier does not care who proposed: it sees a :class:`Draft` and the target's logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch


@dataclass
class Draft:
    """Up to γ proposed continuation tokens.

    Attributes:
        tokens: proposed token ids, in order (may be empty: nothing to propose).
        probs: the drafter's distribution q at each proposed position, float32 of shape
            ``(len(tokens), vocab)``; ``None`` means a point mass on each token (n-gram).
        match_length: for the n-gram drafter, the length of the suffix n-gram that matched.
        unanimous: for the n-gram drafter, whether every occurrence of the matched n-gram
            continues with the same next token (ambiguous matches are accepted far less often).
    """

    tokens: list[int]
    probs: torch.Tensor | None = None
    match_length: int = 0
    unanimous: bool = True

    def truncated(self, n: int) -> "Draft":
        """The first ``n`` proposed tokens (and their q rows)."""
        return Draft(self.tokens[:n], None if self.probs is None else self.probs[:n], self.match_length,
                     self.unanimous)


class Drafter(Protocol):
    """Proposes tokens and observes every committed token.

    ``begin`` is called once per request after the target's prefill, ``propose``
    before each verification round and ``observe`` after every commit.
    """

    name: str

    def begin(self, prompt_ids: Sequence[int], contexts: Sequence[Sequence[int]], target_cache: object) -> None: ...

    def propose(self, committed: Sequence[int], max_tokens: int) -> Draft: ...

    def observe(self, new_tokens: Sequence[int]) -> None: ...
