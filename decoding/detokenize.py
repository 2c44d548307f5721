"""Streaming text deltas that never split a multi-byte UTF-8 character."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase


def decode_text(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int], skip_special_tokens: bool) -> str:
    """The text of one id sequence (``tokenizer.decode``, which transformers types as
    ``str | list[str]``: a list only for a batch of sequences).

    Raises:
        TypeError: the tokenizer returned something else than one string.
    """
    text = tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)
    if not isinstance(text, str):
        raise TypeError(f"{type(tokenizer).__name__}.decode of one sequence returned {type(text).__name__}")
    return text


@dataclass
class IncrementalDetokenizer:
    """Turns a growing list of output ids into text deltas.

    A delta is emitted only up to the last complete character (a trailing U+FFFD from a
    partial byte sequence is held back) and, when stop strings are set, short of the
    last ``holdback`` characters that could still become a stop string. The
    concatenated deltas plus :meth:`finish` equal the final (non-streamed) text.
    """

    tokenizer: PreTrainedTokenizerBase
    holdback: int = 0
    emitted: str = ""

    def push(self, output_ids: list[int]) -> str:
        """Delta after the output grew to ``output_ids`` (all output ids so far)."""
        text = decode_text(self.tokenizer, output_ids, skip_special_tokens=True)
        safe = len(text) - self.holdback
        while safe > 0 and text[safe - 1] == "\ufffd":
            safe -= 1
        if safe <= len(self.emitted) or not text.startswith(self.emitted):
            return ""
        delta = text[len(self.emitted) : safe]
        self.emitted += delta
        return delta

    def finish(self, final_text: str) -> str:
        """The rest of ``final_text`` after what was emitted."""
        if not final_text.startswith(self.emitted):  # cannot happen for prefix-stable tokenizers
            raise RuntimeError("streamed text is not a prefix of the final text")
        delta = final_text[len(self.emitted) :]
        self.emitted = final_text
        return delta
