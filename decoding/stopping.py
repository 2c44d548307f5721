"""One commit boundary for every stop condition.

A verified block is committed token by token through :meth:`StopChecker.accept`: the
budget (``max_new_tokens`` and the model's context window), the first EOS, the first
completed stop string and the loop stop each cut the block at the same token plain
greedy decoding with the same stop handling would end on.

Stop strings are matched, as ``generate(stop_strings=...)`` (``StopStringCriteria``) does,
against the output's text *with* special tokens, so ``<|im_end|>`` or ``<|im_start|>user``
fire when the model writes those tokens; the returned text still skips special tokens
(:func:`text_before_stop`).

The loop stop (:class:`LoopDetector`) is defined on token ids alone, so applying it to
plain greedy's output (:func:`apply_stops`) gives exactly the prefix the engine emits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from transformers import PreTrainedTokenizerBase

from decoding.detokenize import decode_text

#: A span that occurs this many times in the output (the last one ending now) is a loop.
LOOP_OCCURRENCES = 3


@dataclass
class LoopDetector:
    """Detects output that cycles, and where the repeats began.

    Definition, for output ids ``o[0..t)`` and span length ``L`` (``span``): after each
    token, the *suffix window* is ``o[t-L..t)``. It *echoes* when the same L ids occurred
    earlier in the output (any earlier start, overlaps allowed). An *echo run* is a
    maximal stretch of consecutive tokens whose windows all echo; it *starts* at the
    first token of the first echoing window. The output **loops** at the first ``t``
    whose window occurred ``LOOP_OCCURRENCES - 1`` (= 2) times before; the output is then
    cut at the start of the current echo run, so the answer keeps one copy of the
    repeated text and none of its repeats.

    A unit of p tokens repeated verbatim (``U U U``) fires L tokens into the third
    copy and keeps ``… U``; two alternating sentences (``A B A B A``) fire inside the
    third ``A``. A passage quoted twice does not fire (one earlier occurrence).

    Attributes:
        span: L in tokens (>= 1).
        cut: set when the output loops: the number of ids to keep.
    """

    span: int
    cut: int | None = None
    _seen: dict[tuple[int, ...], int] = field(default_factory=dict)
    _run_start: int | None = None

    def push(self, output: Sequence[int]) -> bool:
        """Look at the newest token of ``output`` (all ids so far); True when it loops."""
        t = len(output)
        if t < self.span:
            return False
        window = tuple(output[t - self.span:])
        count = self._seen.get(window, 0)
        self._seen[window] = count + 1
        if count == 0:
            self._run_start = None
            return False
        if self._run_start is None:
            self._run_start = t - self.span
        if count + 1 >= LOOP_OCCURRENCES:
            self.cut = self._run_start
            return True
        return False

    def stable_length(self, t: int) -> int:
        """Ids of an output of length ``t`` that no later loop cut can remove.

        A future echo run starts at ``t + 1 - L`` at the earliest; an active one at its start.
        """
        earliest = max(t + 1 - self.span, 0)
        return earliest if self._run_start is None else min(earliest, self._run_start)


@dataclass
class StopChecker:
    """Decides where a committed block ends.

    Args:
        tokenizer: used to decode a short tail window (special tokens included) when stop
            strings are set.
        eos_token_ids: ids that end generation (the EOS is kept in the ids).
        stop_strings: strings that end generation at the token completing them.
        max_new_tokens: budget of new tokens (already clipped to the context window).
        loop_span: L of the loop stop (:class:`LoopDetector`) in tokens; 0 = no loop stop.
            A loop ends generation with ``finish_reason`` ``"repetition"`` and cuts the
            output back to before the repeats.
    """

    tokenizer: PreTrainedTokenizerBase
    eos_token_ids: frozenset[int]
    stop_strings: tuple[str, ...]
    max_new_tokens: int
    loop_span: int = 0
    output: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    generated: int = 0  # ids ever committed, including those a loop stop removed

    def __post_init__(self) -> None:
        # Each token decodes to >= 1 character except partial UTF-8 bytes (<= 3 per char).
        longest = max((len(s) for s in self.stop_strings), default=0)
        self._window = 4 * longest + 4
        self._loops = LoopDetector(self.loop_span) if self.loop_span > 0 else None

    @property
    def remaining(self) -> int:
        """Tokens still allowed by the budget."""
        return self.max_new_tokens - len(self.output)

    @property
    def stable_length(self) -> int:
        """Leading output ids that are final (safe to stream): all of them once finished;
        before that, those no loop cut can remove."""
        if self._loops is None or self.finish_reason is not None:
            return len(self.output)
        return self._loops.stable_length(len(self.output))

    def accept(self, block: Sequence[int]) -> list[int]:
        """Commit the longest allowed prefix of ``block``; sets :attr:`finish_reason` when done.

        Returns:
            The tokens committed from this block (also appended to :attr:`output`). A loop
            stop may also remove ids committed by earlier calls: :attr:`output` is final.
        """
        committed: list[int] = []
        before = len(self.output)
        for t in block:
            if self.remaining <= 0:
                self.finish_reason = "length"
                break
            self.output.append(t)
            committed.append(t)
            self.generated += 1
            if t in self.eos_token_ids:
                self.finish_reason = "eos"
                break
            if self.stop_strings and self._completes_stop_string():
                self.finish_reason = "stop"
                break
            if self._loops is not None and self._loops.push(self.output):
                self.finish_reason = "repetition"
                del self.output[self._loops.cut:]
                return self.output[before:]
        if self.finish_reason is None and self.remaining <= 0:
            self.finish_reason = "length"
        return committed

    def _completes_stop_string(self) -> bool:
        # Special tokens count, as in StopStringCriteria: a stop string may be or contain one.
        tail = decode_text(self.tokenizer, self.output[-self._window :], skip_special_tokens=False)
        return any(s in tail for s in self.stop_strings)

    def final_text(self) -> str:
        """The decoded output (special tokens skipped), cut before the first stop string."""
        if self.finish_reason == "stop":
            return text_before_stop(self.tokenizer, self.output, self.stop_strings)
        return decode_text(self.tokenizer, self.output, skip_special_tokens=True)


def apply_stops(token_ids: Sequence[int], checker: StopChecker) -> tuple[list[int], str | None]:
    """Run plain greedy's ``token_ids`` through a fresh ``checker``: the ids and finish
    reason the engine must produce with the same stop settings (the exactness reference)."""
    checker.accept(token_ids)
    return list(checker.output), checker.finish_reason


def cut_at_stop_string(text: str, stop_strings: Sequence[str]) -> str:
    """``text`` up to (excluding) the earliest occurrence of any stop string."""
    hits = [i for i in (text.find(s) for s in stop_strings) if i >= 0]
    return text[: min(hits)] if hits else text


def text_before_stop(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int], stop_strings: Sequence[str]) -> str:
    """The text of ``ids`` with special tokens skipped, up to where the earliest stop string
    starts in the text decoded *with* special tokens (where the stop string was matched).

    Without special tokens in the output this is :func:`cut_at_stop_string` of the decoded
    text. Otherwise the match start is located token by token: the text of the tokens
    wholly before it (special tokens skipped), plus the part of the token it starts in
    that precedes it (nothing when that token is itself special).
    """
    ids = list(ids)
    plain = decode_text(tokenizer, ids, skip_special_tokens=True)
    full = decode_text(tokenizer, ids, skip_special_tokens=False)
    hits = [i for i in (full.find(s) for s in stop_strings) if i >= 0]
    if full == plain or not hits:
        return cut_at_stop_string(plain, stop_strings)
    start = min(hits)
    j = len(ids)  # the largest j whose with-specials text is a prefix of full ending at or before start
    head = full
    while j > 0 and (len(head) > start or not full.startswith(head)):
        j -= 1
        head = decode_text(tokenizer, ids[:j], skip_special_tokens=False)
    special = set(getattr(tokenizer, "all_special_ids", ()))
    inside = "" if j < len(ids) and ids[j] in special else full[len(head):start]
    return decode_text(tokenizer, ids[:j], skip_special_tokens=True) + inside
