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


def pending_stop_length(text: str, stop_strings: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that a stop string starts with (a stop string
    the next tokens may still complete); 0 when none does. A whole stop string is not pending.

    Example: ``pending_stop_length("the disk is fu", ["full"])`` is 2 (``"fu"``).
    """
    if not text:
        return 0
    last = text[-1]
    best = 0
    for stop in stop_strings:
        for k in range(min(len(stop) - 1, len(text)), best, -1):
            if stop[k - 1] == last and text.endswith(stop[:k]):
                best = k
                break
    return best


@dataclass
class IncrementalDetokenizer:
    """Turns a growing list of output ids into text deltas.

    A delta is emitted only up to the last complete character (a trailing U+FFFD from a
    partial byte sequence is held back) and, when stop strings are set, short of the text
    that could still become one: the longest tail of the output that a stop string starts
    with (:func:`pending_stop_length`, on the text *with* special tokens, where stop strings
    are matched), not the stop string's whole length, so a 2,000-character stop string does
    not hold back 2,000 characters of answer. The concatenated deltas plus :meth:`finish`
    equal the final (non-streamed) text.
    """

    tokenizer: PreTrainedTokenizerBase
    stop_strings: tuple[str, ...] = ()
    emitted: str = ""

    def push(self, output_ids: list[int]) -> str:
        """Delta after the output grew to ``output_ids`` (all output ids so far)."""
        text = decode_text(self.tokenizer, output_ids, skip_special_tokens=True)
        safe = len(text) - self._pending(output_ids)
        while safe > 0 and text[safe - 1] == "\ufffd":
            safe -= 1
        if safe <= len(self.emitted) or not text.startswith(self.emitted):
            return ""
        delta = text[len(self.emitted) : safe]
        self.emitted += delta
        return delta

    def _pending(self, output_ids: list[int]) -> int:
        """Characters at the end of the output that may start a stop string. Counted on the
        text with special tokens, whose tail holds at least as many characters as the same
        ids' text without them, so holding back that many is always enough."""
        if not self.stop_strings:
            return 0
        # Each id decodes to >= 1 character except partial UTF-8 bytes (<= 3 per character).
        window = 4 * max(len(s) for s in self.stop_strings) + 4
        full = decode_text(self.tokenizer, output_ids[-window:], skip_special_tokens=False)
        partial = len(full) - len(full.rstrip("\ufffd"))  # a character still being completed
        return pending_stop_length(full[: len(full) - partial], self.stop_strings) + partial

    def finish(self, final_text: str) -> str:
        """The rest of ``final_text`` after what was emitted."""
        if not final_text.startswith(self.emitted):  # cannot happen for prefix-stable tokenizers
            raise RuntimeError("streamed text is not a prefix of the final text")
        delta = final_text[len(self.emitted) :]
        self.emitted = final_text
        return delta
