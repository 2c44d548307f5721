"""N-gram (prompt-lookup) drafter over several token sources.

Prompt lookup decoding (Saxena 2023) and LLMA (Yang et al. 2023, arXiv:2304.04487):
find the longest suffix of the committed sequence that also occurs in a reference
text, and propose the tokens that followed it there. Our index covers the retrieved
passages (also those that did not fit into the prompt), the prompt, the output so
far and the engine's earlier answers (those of the request's own history partition);
appending a committed token costs O(max_ngram) dictionary updates.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, NamedTuple, Sequence

from decoding.drafters.base import Draft, DraftRequest, Offer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# Source priorities: higher wins when several continuations match.
PRIORITY_PROMPT = 0  # chat-template boilerplate, system prompt, the question
PRIORITY_HISTORY = 1  # the engine's earlier answers (to other prompts)
PRIORITY_PASSAGE = 2  # retrieved passages (tokenized alone)
PRIORITY_OUTPUT = 3  # what the model has generated so far
#: What a draft copied from, by source priority (:attr:`decoding.drafters.base.Draft.origin`).
ORIGINS = {PRIORITY_PROMPT: "prompt", PRIORITY_HISTORY: "history", PRIORITY_PASSAGE: "passage",
           PRIORITY_OUTPUT: "output"}


#: The policy's starting acceptance (α₁, αₙ) per n-gram drafting state, before a state has counts
#: of its own (:meth:`decoding.planning.policy.AcceptanceTable.set_prior`): the drafter replayed at
#: every decode position of the greedy answers of the tuning sets, sample (45 questions) and site2
#: (30), with :func:`evals.oracle.state_acceptance` (the ``states`` of a latency report), for the
#: states seen at ≥ 20 positions; any other state starts from the generic prior (0.5, 0.8), which
#: on 2 CPU cores drafts one token at a time (expected 1.13× plain at 38.6 ms a step and 51.1 a 2-row
#: pass), and is learned from its declined proposals (:mod:`decoding.planning.shadow`). Measured at
#: every position rather than where a policy chose to draft, so without selection bias: a unanimous
#: 1-gram match from a passage is accepted 97 % at its first token (the drafted rounds had said 47 %);
#: a copy from an earlier answer keeps only its first tokens.
STATE_PRIORS: dict[str, tuple[float, float]] = {
    "ngram:1:ambiguous:history": (0.75, 0.50), "ngram:1:ambiguous:passage": (0.38, 0.90),
    "ngram:1:unanimous:passage": (0.97, 0.93),
    "ngram:2:ambiguous:passage": (0.32, 0.92), "ngram:2:unanimous:history": (0.98, 0.06),
    "ngram:2:unanimous:passage": (0.79, 0.96), "ngram:2:unanimous:prompt": (0.87, 0.97),
    "ngram:3:ambiguous:history": (0.09, 0.0), "ngram:3:unanimous:passage": (0.87, 0.97),
    "ngram:3:unanimous:prompt": (0.77, 0.99),
    "ngram:4+:ambiguous:passage": (0.59, 0.97), "ngram:4+:unanimous:passage": (0.99, 0.98),
    "ngram:4+:unanimous:prompt": (0.97, 0.99),
}


class Occurrence(NamedTuple):
    """Where an n-gram occurs: its continuation starts at ``source[continuation]``."""

    source: Sequence[int]  # the token sequence (a reference, never copied)
    continuation: int  # position in ``source`` right after the n-gram
    priority: int
    order: int  # insertion counter: higher = more recent
    origin: int = 0  # earlier answers: key of the prompt that produced them


class NGramIndex:
    """n-gram → its most recent occurrences, per source priority.

    Args:
        max_ngram, min_ngram: the n-gram lengths indexed (tokens).
        max_occurrences: occurrences kept per n-gram and priority (the most recent); bounds
            lookup cost without letting a repeated prompt n-gram evict a passage's.
        first_order: recency stamp of the first occurrence (continues an older index).
    """

    def __init__(self, max_ngram: int, min_ngram: int, max_occurrences: int = 8, first_order: int = 0) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram, self.min_ngram, self.max_occurrences = max_ngram, min_ngram, max_occurrences
        # (n-gram, priority) → occurrences, oldest first; tuples rather than deques leave the
        # cyclic GC fewer objects to scan in a long-lived index (the answer history).
        self.table: dict[tuple[tuple[int, ...], int], tuple[Occurrence, ...]] = {}
        self.next_order = first_order  # recency stamp of the next occurrence

    def add_position(self, source: Sequence[int], end: int, priority: int, origin: int = 0) -> None:
        """Register every n-gram of ``source`` that ends at position ``end`` (inclusive):
        O(max_ngram · max_occurrences)."""
        for n in range(self.min_ngram, min(self.max_ngram, end + 1) + 1):
            key = (tuple(source[end - n + 1 : end + 1]), priority)
            kept = self.table.get(key, ())
            occurrence = Occurrence(source, end + 1, priority, self.next_order, origin)
            self.table[key] = (*kept[max(0, len(kept) + 1 - self.max_occurrences) :], occurrence)
            self.next_order += 1

    def add_source(self, source: Sequence[int], priority: int, origin: int = 0) -> None:
        """Register every n-gram of ``source`` (token ids): O(len(source) · max_ngram)."""
        for end in range(len(source)):
            self.add_position(source, end, priority, origin)

    def get(self, ngram: tuple[int, ...], priority: int) -> tuple[Occurrence, ...]:
        """The kept occurrences of ``ngram`` in sources of ``priority``, oldest first."""
        return self.table.get((ngram, priority), ())


class NGramDrafter:
    """Proposes the continuation of the longest matching suffix n-gram (a :class:`Drafter`).

    Args:
        max_ngram: longest suffix tried first (tokens).
        min_ngram: shortest suffix accepted (tokens, >= 1).
        max_occurrences: occurrences kept per n-gram and source priority (most recent).
        history: the engine's earlier answers, of the request's history partition only
            (answers to this very prompt are skipped; unused for a reproducible request);
            ``None`` = none.
        long_match: match lengths (tokens) from which matches share one acceptance state.
        line_breaks: token ids whose text holds a line break (:func:`line_break_ids`); a
            proposal neither starts with one nor reaches past one (empty: no limit).

    A proposal stays on one line of its source: answers quote a line (a command, an error
    string, a log line) inline, so the line break after a copied span is where they leave it.
    Measured on the sample questions (the drafter's proposal at every decode position against
    greedy's answer), 466 of 921 rejections fell on the proposal's first line-break token and 5
    after it, and of 58 proposals that started with a line break 1 was accepted: a draft past
    the break buys almost nothing and costs verification rows, and its length hides where the
    copy will end from the policy. An answer that does copy several lines gets each line
    drafted after the target's own line break.

    Tie-break among occurrences of the matched n-gram: source priority (output >
    passages > earlier answers > prompt), then how often the candidate's next token
    follows the n-gram anywhere (every source votes), then recency.

    Proposing is a dictionary lookup: its offers cost nothing (``step_ms`` 0).

    Raises:
        ValueError: ``min_ngram``/``max_ngram``/``long_match`` out of range, or a history
            indexing other n-gram lengths.
    """

    name = "ngram"

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1, max_occurrences: int = 8,
                 history: AnswerHistory | None = None, long_match: int = 4,
                 line_breaks: frozenset[int] = frozenset()) -> None:
        self._index = NGramIndex(max_ngram, min_ngram, max_occurrences)
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        if history is not None and (history.max_ngram, history.min_ngram) != (max_ngram, min_ngram):
            raise ValueError("the answer history must index the drafter's n-gram lengths")
        if long_match < 1:
            raise ValueError(f"long_match must be >= 1, got {long_match}")
        self.long_match = long_match
        self.line_breaks = line_breaks
        self.history = history
        self._history = history  # this request's (none for a seeded sample)
        self._prompt_key = 0
        self._partition = ""  # this request's answer-history partition
        self._stream: list[int] = []  # prompt + output
        # ((output length, after), (max_tokens, draft)) of the last lookup: offer then propose look up once
        self._last: tuple[tuple[int, tuple[int, ...]], tuple[int, Draft]] | None = None

    def begin(self, request: DraftRequest) -> None:
        """Index the request's passages, then its prompt (which then grows with the output);
        a reproducible request does not draft from earlier answers."""
        self._index = NGramIndex(self.max_ngram, self.min_ngram, self._index.max_occurrences)
        self._stream = [int(t) for t in request.prompt_ids]
        self._prompt_key = prompt_key(self._stream)
        self._history = None if request.reproducible else self.history
        self._partition = request.history_partition
        self._last = None
        # Worst-ranked passage first so the best-ranked one is the most recent on ties.
        for ctx in reversed([list(c) for c in request.contexts if len(c) > 0]):
            self._index.add_source(ctx, PRIORITY_PASSAGE)
        self._index.add_source(self._stream, PRIORITY_PROMPT)

    def observe(self, new_tokens: Sequence[int]) -> None:
        """Append committed tokens to the output: O(max_ngram) index updates per token."""
        for t in new_tokens:
            self._stream.append(int(t))
            self._index.add_position(self._stream, len(self._stream) - 1, PRIORITY_OUTPUT)

    # -- proposing ----------------------------------------------------------------------
    def offer(self, max_tokens: int, after: Sequence[int] = ()) -> Offer:
        """The match's continuation length (capped at ``max_tokens``) and its state:
        ``(match bucket, "unanimous" | "ambiguous", origin)``, buckets ``"1"`` ...
        ``"<long_match>+"``, origin what it copies from (:data:`ORIGINS`): a copy from a passage
        or the prompt is accepted far longer than one from an earlier answer, whose wording
        only its first tokens share (on the sample questions, every decode position: a
        unanimous 2-gram match's second token 97 % from a passage, 0 % from an earlier answer)."""
        draft = self.propose(max_tokens, after)
        if not draft.tokens:
            return Offer(self.name, 0)
        bucket = f"{self.long_match}+" if draft.match_length >= self.long_match else str(draft.match_length)
        agreement = "unanimous" if draft.unanimous else "ambiguous"
        return Offer(self.name, len(draft.tokens), (bucket, agreement, draft.origin),
                     f"{bucket}-gram match ({agreement}, from the {draft.origin})", 0.0)

    def propose(self, max_tokens: int, after: Sequence[int] = ()) -> Draft:
        """Continuation of the longest suffix n-gram of the committed sequence + ``after``.

        Returns:
            A :class:`Draft` with up to ``max_tokens`` tokens (empty when nothing
            matches), ``match_length`` = the matched n and ``unanimous`` = whether all
            occurrences of that n-gram agree on the next token.
        """
        if max_tokens <= 0:
            return Draft([])
        key = (len(self._stream), tuple(int(t) for t in after))
        if self._last is not None and self._last[0] == key:
            cap, cached = self._last[1]
            if max_tokens <= cap or len(cached.tokens) < cap:  # (a shorter draft: its source ended)
                return cached.truncated(max_tokens)
        draft = self._lookup(max_tokens, after)
        self._last = (key, (max_tokens, draft))
        return draft

    def _lookup(self, max_tokens: int, after: Sequence[int]) -> Draft:
        stream = self._stream
        tail = stream[len(stream) - self.max_ngram:] + [int(t) for t in after] if after else stream
        for n in range(min(self.max_ngram, len(stream) + len(after)), self.min_ngram - 1, -1):
            key = tuple(tail[len(tail) - n :])
            occurrences = [o for p in (PRIORITY_OUTPUT, PRIORITY_PASSAGE, PRIORITY_PROMPT)
                           for o in self._index.get(key, p)]
            if self._history is not None:  # ranked between the passages and the prompt
                occurrences += self._history.occurrences(key, self._prompt_key, self._partition)
            usable = [o for o in occurrences if o.continuation < len(o.source)]
            if not usable:
                continue
            votes = Counter(o.source[o.continuation] for o in usable)
            best = self._best(usable, votes)
            return Draft(self._one_line(best.source[best.continuation : best.continuation + max_tokens]), n,
                         len(votes) == 1, ORIGINS[best.priority])
        return Draft([])

    def _one_line(self, tokens: Sequence[int]) -> list[int]:
        """``tokens`` up to (not including) their first line-break token."""
        end = next((i for i, t in enumerate(tokens) if t in self.line_breaks), len(tokens))
        return list(tokens[:end])

    @staticmethod
    def _best(usable: list[Occurrence], votes: Counter[int]) -> Occurrence:
        """Highest source priority, then the next token most occurrences (any source) vote for, then recency."""
        top = max(o.priority for o in usable)
        candidates = [o for o in usable if o.priority == top]
        if len(candidates) == 1:
            return candidates[0]
        return max(candidates, key=lambda o: (votes[o.source[o.continuation]], o.order))


def line_break_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """The ids of ``tokenizer``'s vocabulary whose decoded text holds a line break (``"\\n"``,
    ``".\\n"``, ``");\\n\\n"``…): one batch decode of every id, about 1 s for a 152k vocabulary."""
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    return frozenset(i for i, text in enumerate(texts) if "\n" in text)


def prompt_key(prompt_ids: Sequence[int]) -> int:
    """A hash identifying a prompt (its answers are not drafted from for the same prompt)."""
    return hash(tuple(prompt_ids))


class AnswerHistory:
    """The engine's recent answers, indexed once and shared by the n-gram drafters of every
    request of one history partition (one access scope).

    Answers over one corpus repeat their phrasing (citations, log-entry formats, the
    model's stock sentences); drafting from earlier outputs is the idea of SuffixDecoding
    (Oliaro et al. 2024, arXiv:2411.04975). An answer to the very same prompt is skipped:
    greedy decoding would repeat it verbatim, which is a response cache's job, and it
    would make a speed measurement of a repeated question meaningless. Earlier answers
    rank below the passages and above the prompt: in a replay of the 45 sample questions
    (64 tokens, the calibrated CPU costs) that order gave a median 2.05× over plain decoding
    against 1.96× without them and 2.00× with them ranked last.

    Args:
        max_ngram, min_ngram: must equal the drafter's (tokens).
        max_answers: answers kept per partition: the most recent ``max_answers`` to
            ``2 · max_answers``; 0 keeps none.
        max_answer_tokens: tokens kept per answer (its beginning).
        max_partitions: partitions kept; adding to a new one beyond it drops the partition
            least recently added to.
        max_occurrences: occurrences kept per n-gram in each index (the most recent).

    Partitions: an answer is added to its request's partition and drafted from only by
    requests of the same partition, so an answer given to one access scope is never a
    drafting source (nor, through timing, a hint) for a request of another. The server
    names the partition after the caller's read scope (:attr:`copilot.access.Access.partition`).

    Two generations of index per partition: answers go into the newer one; when it holds
    ``max_answers``, the older one is dropped whole. Adding an answer therefore costs
    O(max_answer_tokens · max_ngram), with no rebuild. At the defaults a partition holds at
    most ~33k occurrences (~30 MB for random tokens, less for text).

    Within a partition answers are shared across users: where they must not learn about each
    other's questions (even through timing), set ``max_answers`` to 0.
    """

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1, max_answers: int = 32,
                 max_answer_tokens: int = 128, max_partitions: int = 16, max_occurrences: int = 8) -> None:
        if max_answers < 0 or max_answer_tokens < 1 or max_partitions < 1:
            raise ValueError(f"need max_answers >= 0, max_answer_tokens >= 1 and max_partitions >= 1, got "
                             f"{max_answers}, {max_answer_tokens}, {max_partitions}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.max_answers, self.max_answer_tokens = max_answers, max_answer_tokens
        self.max_partitions, self.max_occurrences = max_partitions, max_occurrences
        # partition -> (index generations, older first, at most two; answers per generation);
        # insertion order = least recently added to first
        self._partitions: dict[str, tuple[list[NGramIndex], list[int]]] = {}

    def __len__(self) -> int:
        return sum(sum(counts) for _, counts in self._partitions.values())

    def add(self, prompt_ids: Sequence[int], answer_ids: Sequence[int], partition: str = "") -> None:
        """Remember an answer (token ids) to a prompt (token ids) in ``partition``."""
        answer = tuple(int(t) for t in answer_ids[: self.max_answer_tokens])
        if not answer or self.max_answers == 0:
            return
        generations, counts = self._partitions.pop(partition, ([self._index()], [0]))
        if len(self._partitions) >= self.max_partitions:
            del self._partitions[next(iter(self._partitions))]
        self._partitions[partition] = (generations, counts)  # now the most recently added to
        if counts[-1] == self.max_answers:  # the newer generation is full: drop the older
            newest = generations[-1]
            generations[:] = [newest, self._index(newest.next_order)]
            counts[:] = [counts[-1], 0]
        generations[-1].add_source(answer, PRIORITY_HISTORY, prompt_key(prompt_ids))
        counts[-1] += 1

    def clear(self) -> None:
        """Forget every answer of every partition (e.g. a document they may quote was deleted)."""
        self._partitions = {}

    def partitions(self) -> list[str]:
        """The partitions holding answers, least recently added to first."""
        return list(self._partitions)

    def _index(self, first_order: int = 0) -> NGramIndex:
        return NGramIndex(self.max_ngram, self.min_ngram, self.max_occurrences, first_order)

    def occurrences(self, ngram: tuple[int, ...], skip_prompt: int, partition: str = "") -> list[Occurrence]:
        """Occurrences of ``ngram`` in ``partition``'s answers to prompts other than ``skip_prompt``
        (a :func:`prompt_key`)."""
        generations, _ = self._partitions.get(partition, ((), ()))
        return [o for index in generations for o in index.get(ngram, PRIORITY_HISTORY) if o.origin != skip_prompt]
