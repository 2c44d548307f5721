"""N-gram (prompt-lookup) drafter over several token sources.

Prompt lookup decoding (Saxena 2023) and LLMA (Yang et al. 2023, arXiv:2304.04487):
find the longest suffix of the committed sequence that also occurs in a reference
text, and propose the tokens that followed it there. Our index covers the retrieved
passages (also those that did not fit into the prompt), the prompt and the output so
far; appending a committed token costs O(max_ngram) dictionary updates.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import NamedTuple, Sequence

from decoding.drafter import Draft

# Source priorities: higher wins when several continuations match.
PRIORITY_PROMPT = 0  # chat-template boilerplate, system prompt, the question
PRIORITY_PASSAGE = 1  # retrieved passages (tokenized alone)
PRIORITY_OUTPUT = 2  # what the model has generated so far


class _Occurrence(NamedTuple):
    source: int  # index into NGramIndex.sources
    continuation: int  # position in that source right after the n-gram
    priority: int
    order: int  # insertion counter: higher = more recent


class NGramDrafter:
    """Proposes the continuation of the longest matching suffix n-gram.

    Args:
        max_ngram: longest suffix tried first (tokens).
        min_ngram: shortest suffix accepted (tokens, >= 1).
        max_occurrences: occurrences kept per n-gram and source priority (most recent);
            bounds lookup cost without letting a repeated prompt n-gram evict a passage's.

    Tie-break among occurrences of the matched n-gram: source priority (output >
    passages > prompt), then how often the candidate's next token follows the n-gram
    anywhere (every source votes), then recency.
    """

    name = "ngram"

    def __init__(self, max_ngram: int = 4, min_ngram: int = 2, max_occurrences: int = 8) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.max_occurrences = max_occurrences
        self._index: dict[tuple[tuple[int, ...], int], deque[_Occurrence]] = {}  # (n-gram, priority)
        self._sources: list[list[int]] = []
        self._order = 0
        self._stream: list[int] = []  # prompt + output: source 0
        self._prompt_len = 0

    # -- building the index -------------------------------------------------------------
    def _add_position(self, source: int, end: int, priority: int) -> None:
        """Register every n-gram of the source that ends at position ``end`` (inclusive)."""
        tokens, index = self._sources[source], self._index
        for n in range(self.min_ngram, min(self.max_ngram, end + 1) + 1):
            key = (tuple(tokens[end - n + 1 : end + 1]), priority)
            occ = index.get(key)
            if occ is None:
                occ = index[key] = deque(maxlen=self.max_occurrences)
            occ.append(_Occurrence(source, end + 1, priority, self._order))
            self._order += 1

    def begin(self, prompt_ids: Sequence[int], contexts: Sequence[Sequence[int]], target_cache: object = None) -> None:
        """Index the passages, then the prompt (source 0, which then grows with the output).

        Args:
            prompt_ids: the prompt, as fed to the target.
            contexts: token ids of each retrieved passage, best first.
        """
        self._index.clear()
        self._order = 0
        self._stream = list(prompt_ids)
        self._prompt_len = len(self._stream)
        self._sources = [self._stream]
        # Worst-ranked passage first so the best-ranked one is the most recent on ties.
        for ctx in reversed([list(c) for c in contexts if len(c) > 0]):
            self._sources.append(ctx)
            for end in range(len(ctx)):
                self._add_position(len(self._sources) - 1, end, PRIORITY_PASSAGE)
        for end in range(len(self._stream)):
            self._add_position(0, end, PRIORITY_PROMPT)

    def observe(self, new_tokens: Sequence[int]) -> None:
        """Append committed tokens to the output: O(max_ngram) index updates per token."""
        for t in new_tokens:
            self._stream.append(int(t))
            self._add_position(0, len(self._stream) - 1, PRIORITY_OUTPUT)

    # -- proposing ----------------------------------------------------------------------
    def propose(self, committed: Sequence[int] | None = None, max_tokens: int = 8) -> Draft:
        """Continuation of the longest suffix n-gram of the committed sequence.

        ``committed`` is accepted for the interface; the drafter tracks the sequence
        itself through :meth:`begin` and :meth:`observe`.

        Returns:
            A :class:`Draft` with up to ``max_tokens`` tokens (empty when nothing
            matches), ``match_length`` = the matched n and ``unanimous`` = whether all
            occurrences of that n-gram agree on the next token.
        """
        stream = self._stream
        if max_tokens <= 0:
            return Draft([])
        for n in range(min(self.max_ngram, len(stream)), self.min_ngram - 1, -1):
            key = tuple(stream[len(stream) - n :])
            occurrences = [o for p in (PRIORITY_OUTPUT, PRIORITY_PASSAGE, PRIORITY_PROMPT)
                           for o in self._index.get((key, p), ())]
            usable = [o for o in occurrences if o.continuation < len(self._sources[o.source])]
            if not usable:
                continue
            votes = Counter(self._sources[o.source][o.continuation] for o in usable)
            best = self._best(usable, votes)
            src = self._sources[best.source]
            return Draft(src[best.continuation : best.continuation + max_tokens], None, n, len(votes) == 1)
        return Draft([])

    def _best(self, usable: list[_Occurrence], votes: Counter) -> _Occurrence:
        """Highest source priority, then the next token most occurrences (any source) vote for, then recency."""
        top = max(o.priority for o in usable)
        candidates = [o for o in usable if o.priority == top]
        if len(candidates) == 1:
            return candidates[0]
        return max(candidates, key=lambda o: (votes[self._sources[o.source][o.continuation]], o.order))
