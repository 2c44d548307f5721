"""One commit boundary for every stop condition.

A verified block is committed token by token through :meth:`StopChecker.accept`: the
budget (``max_new_tokens`` and the model's context window), the first EOS and the
first completed stop string each cut the block at the same token plain greedy
decoding with the same stop handling would end on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from transformers import PreTrainedTokenizerBase


@dataclass
class StopChecker:
    """Decides where a committed block ends.

    Args:
        tokenizer: used to decode a short tail window when stop strings are set.
        eos_token_ids: ids that end generation (the EOS is kept in the ids).
        stop_strings: strings that end generation at the token completing them.
        max_new_tokens: budget of new tokens (already clipped to the context window).
    """

    tokenizer: PreTrainedTokenizerBase
    eos_token_ids: frozenset[int]
    stop_strings: tuple[str, ...]
    max_new_tokens: int
    output: list[int] = field(default_factory=list)
    finish_reason: str | None = None

    def __post_init__(self) -> None:
        # Each token decodes to >= 1 character except partial UTF-8 bytes (<= 3 per char).
        longest = max((len(s) for s in self.stop_strings), default=0)
        self._window = 4 * longest + 4

    @property
    def remaining(self) -> int:
        """Tokens still allowed by the budget."""
        return self.max_new_tokens - len(self.output)

    def accept(self, block: Sequence[int]) -> list[int]:
        """Commit the longest allowed prefix of ``block``; sets :attr:`finish_reason` when done.

        Returns:
            The tokens committed from this block (also appended to :attr:`output`).
        """
        committed: list[int] = []
        for t in block:
            if self.remaining <= 0:
                self.finish_reason = "length"
                break
            self.output.append(t)
            committed.append(t)
            if t in self.eos_token_ids:
                self.finish_reason = "eos"
                break
            if self.stop_strings and self._completes_stop_string():
                self.finish_reason = "stop"
                break
        if self.finish_reason is None and self.remaining <= 0:
            self.finish_reason = "length"
        return committed

    def _completes_stop_string(self) -> bool:
        tail = self.tokenizer.decode(self.output[-self._window :], skip_special_tokens=True)
        return any(s in tail for s in self.stop_strings)

    def final_text(self) -> str:
        """The decoded output (special tokens skipped), cut before the first stop string."""
        text = self.tokenizer.decode(self.output, skip_special_tokens=True)
        return cut_at_stop_string(text, self.stop_strings) if self.finish_reason == "stop" else text


def cut_at_stop_string(text: str, stop_strings: Sequence[str]) -> str:
    """``text`` up to (excluding) the earliest occurrence of any stop string."""
    hits = [i for i in (text.find(s) for s in stop_strings) if i >= 0]
    return text[: min(hits)] if hits else text
