"""Per-request generation settings."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass


@dataclass(frozen=True)
class GenerationConfig:
    """What to generate and how to stop.

    Raises:
        TypeError / ValueError: on construction, for a field of the wrong type or range.

    Attributes:
        max_new_tokens: hard budget of generated tokens (EOS included); 0 returns nothing.
        temperature: 0 selects greedy decoding (the exactness contract); > 0 samples.
        top_k: keep the k most likely tokens when sampling (0 = off).
        top_p: nucleus sampling mass (1.0 = off).
        seed: seed of the sampling generator (``None`` = nondeterministic).
        stop_strings: generation ends at the token that completes any of them;
            the returned text ends just before the stop string.
        eos_token_ids: token ids that end generation (included in the ids, not in
            the text). ``None`` uses the model's; an empty tuple disables EOS.
        drafting: which drafters the cost-aware policy may use: ``"auto"`` (both),
            ``"ngram"``, ``"draft_model"``, or ``"off"`` (plain one-token-per-pass
            decoding in our loop).
        num_speculative_tokens: γ ceiling per round; the policy may choose fewer.
        fixed_gamma: bypass the policy: every round drafts ``num_speculative_tokens``
            with the one drafter ``drafting`` names (prompt-lookup style; an ablation
            and a test hook). Needs ``drafting`` ``"ngram"`` or ``"draft_model"``.
        loop_span: the loop stop's span L in tokens (:class:`decoding.stopping.LoopDetector`):
            when the last L output tokens occurred twice before, generation ends with
            ``finish_reason`` ``"repetition"``, the output cut before the repeats.
            0 (the default) = no loop stop: plain greedy semantics.
    """

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop_strings: tuple[str, ...] = ()
    eos_token_ids: tuple[int, ...] | None = None
    drafting: str = "auto"
    num_speculative_tokens: int = 16
    fixed_gamma: bool = False
    loop_span: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.stop_strings, str) or not all(isinstance(s, str) for s in self.stop_strings):
            raise TypeError(f"stop_strings must be a sequence of strings, got {self.stop_strings!r}")
        if self.eos_token_ids is not None and (not isinstance(self.eos_token_ids, (tuple, list))
                                               or not all(_is_int(t) for t in self.eos_token_ids)):
            raise TypeError(f"eos_token_ids must be a tuple of ints or None, got {self.eos_token_ids!r}")
        for name in ("max_new_tokens", "top_k", "num_speculative_tokens", "loop_span"):
            if not _is_int(getattr(self, name)):
                raise TypeError(f"{name} must be an int, got {getattr(self, name)!r}")
        if self.seed is not None and not _is_int(self.seed):
            raise TypeError(f"seed must be an int or None, got {self.seed!r}")
        if not isinstance(self.fixed_gamma, bool):
            raise TypeError(f"fixed_gamma must be a bool, got {self.fixed_gamma!r}")
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"{name} must be a number, got {value!r}")
        if not (math.isfinite(self.temperature) and math.isfinite(self.top_p)):
            raise ValueError(f"temperature and top_p must be finite, got {self.temperature}, {self.top_p}")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed!r}")
        if self.eos_token_ids is not None and any(t < 0 for t in self.eos_token_ids):
            raise ValueError(f"eos_token_ids must be non-negative, got {self.eos_token_ids!r}")
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.loop_span < 0:
            raise ValueError(f"loop_span must be >= 0 (0 = no loop stop), got {self.loop_span}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if self.drafting not in ("auto", "ngram", "draft_model", "off"):
            raise ValueError(f"drafting must be auto|ngram|draft_model|off, got {self.drafting!r}")
        if self.num_speculative_tokens < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got {self.num_speculative_tokens}")
        if self.fixed_gamma and self.drafting not in ("ngram", "draft_model"):
            raise ValueError(f"fixed_gamma needs drafting 'ngram' or 'draft_model', got {self.drafting!r}")
        if any(not s for s in self.stop_strings):
            raise ValueError("stop strings must be non-empty")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _is_int(value: object) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
