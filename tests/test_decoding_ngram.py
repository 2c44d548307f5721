"""Unit tests of the n-gram (prompt-lookup) drafter, plus a property test against a naive scan."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoding.drafters.base import DraftRequest
from decoding.drafters.ngram import AnswerHistory, NGramDrafter, line_break_ids

pytestmark = pytest.mark.usefixtures("torch_one_thread")

A, B, C, D, P, Q, R, X, Y, Z = range(10, 20)


def drafter(prompt, contexts=(), output=(), max_ngram=4, min_ngram=2, reproducible=False, **kw) -> NGramDrafter:
    d = NGramDrafter(max_ngram, min_ngram, **kw)
    d.begin(DraftRequest(list(prompt), [list(c) for c in contexts], reproducible=reproducible))
    d.observe(output)
    return d


def index_size(d: NGramDrafter) -> int:
    return sum(len(v) for v in d._index.table.values())


def test_longest_match_wins():
    # "C D" alone points at Y (most recent passage), but "B C D" matches only in the other one.
    d = drafter([B, C, D], contexts=[[Z, C, D, Y], [A, B, C, D, X, X]])
    draft = d.propose(3)
    assert draft.tokens[0] == X and draft.match_length == 3


def test_output_beats_passages_beats_prompt():
    assert drafter([A, B, P, Z, A, B]).propose(1).tokens == [P]
    assert drafter([A, B, P, Z, A, B], contexts=[[A, B, Q]]).propose(1).tokens == [Q]
    d = drafter([A, B, P, Z], contexts=[[A, B, Q]], output=[A, B, R, Z, A, B])
    assert d.propose(1).tokens == [R]


def test_more_frequent_continuation_beats_more_recent():
    # Y follows "A B" in the best-ranked (most recent) passage, X in two others.
    d = drafter([Z, A, B], contexts=[[A, B, Y], [A, B, X], [A, B, X]])
    assert d.propose(1).tokens == [X]


def test_lower_priority_sources_vote_between_output_candidates():
    """Two output occurrences disagree; the passages break the tie (the older one, P, wins)."""
    d = drafter([Z], contexts=[[A, B, P], [A, B, P]], output=[A, B, P, Z, A, B, R, Y, A, B])
    draft = d.propose(1)
    assert draft.tokens == [P] and not draft.unanimous


def test_equal_frequency_prefers_the_more_recent():
    d = drafter([Z, A, B], contexts=[[A, B, Y, Y], [A, B, X, X]])  # contexts[0] ranks best
    assert d.propose(2).tokens == [Y, Y]
    d = drafter([A, B, P, Z, A, B, Q, Z, A, B])  # within one source: the later occurrence
    assert d.propose(1).tokens == [Q]


def test_proposal_is_cut_at_max_tokens_and_the_source_end():
    d = drafter([A, B], contexts=[[A, B, C, D, X, Y, Z]])
    assert d.propose(3).tokens == [C, D, X]
    assert d.propose(100).tokens == [C, D, X, Y, Z]
    assert d.propose(0).tokens == []


def test_match_only_at_the_very_end_of_a_source():
    """An occurrence with no continuation is skipped (shorter or other matches are used)."""
    assert drafter([Z, A, B], contexts=[[C, A, B]]).propose(4).tokens == []
    d = drafter([Z, C, A, B], contexts=[[C, A, B], [Y, A, B, X]], max_ngram=3)
    assert d.propose(4).tokens == [X] and d.propose(4).match_length == 2
    assert drafter([Z, A, B], contexts=[[A, B, X]]).propose(4).tokens == [X]  # one-token continuation


def test_continuation_reads_the_live_output():
    d = drafter([A, B], output=[A, B])  # stream A B A B: "A B" seen at 0..1, continued by A B
    assert d.propose(5).tokens == [A, B]
    d.observe([A])
    assert d.propose(5).tokens == [B, A]


def test_prompt_shorter_than_the_ngram_size():
    d = drafter([A], max_ngram=5, min_ngram=3)
    assert d.propose(4).tokens == []
    d.observe([B])
    assert d.propose(4).tokens == []
    d.observe([C, A, B, C])  # A B C A B C: the 3-gram "A B C" recurs
    assert d.propose(4).tokens == [A, B, C]
    assert drafter([A], min_ngram=1).propose(2).tokens == []  # the only "A" is the suffix itself


def test_min_ngram_must_be_valid():
    for lo, hi in ((0, 3), (4, 3)):
        with pytest.raises(ValueError):
            NGramDrafter(hi, lo)


def test_begin_resets_the_index():
    d = drafter([A, B, X, A, B])
    d.begin(DraftRequest([A, B]))
    assert d.propose(2).tokens == []


@pytest.mark.parametrize("max_ngram,min_ngram", [(4, 2), (6, 1), (3, 3)])
def test_observe_updates_the_index_in_O_max_ngram(max_ngram, min_ngram):
    """Each committed token adds at most max_ngram - min_ngram + 1 entries, however long the
    context is: no rescan."""
    long_context = [[i % 97 for i in range(j, j + 3000)] for j in range(3)]
    d = drafter(list(range(500)), contexts=long_context, max_ngram=max_ngram, min_ngram=min_ngram)
    calls = []
    add = d._index.add_position
    d._index.add_position = lambda *a: calls.append(a) or add(*a)
    for t in [5, 6, 7, 5, 6, 7, 8] * 10:
        before_size, before_keys = index_size(d), len(d._index.table)
        d.observe([t])
        assert 0 <= index_size(d) - before_size <= max_ngram - min_ngram + 1
        assert len(d._index.table) - before_keys <= max_ngram - min_ngram + 1
    assert len(calls) == 70  # one position registered per observed token


def test_occurrences_per_ngram_are_bounded():
    d = drafter([A, B, X] * 50, max_occurrences=4)
    assert all(len(v) <= 4 for v in d._index.table.values())
    assert d.propose(1).tokens == [A]  # ... A B X: "B X" continues with A


def test_repeated_boilerplate_does_not_evict_a_passage_match():
    """Bounding the occurrences kept per n-gram must not drop the preferred source: a passage
    continuation still beats an n-gram the prompt repeats many times (chat-template boilerplate)."""
    d = drafter([A, B, P] * 12 + [Z, A, B], contexts=[[A, B, X]], max_occurrences=8)  # only "A B" matches
    assert d.propose(1).tokens == [X]
    d = drafter([A, B, P], contexts=[[A, B, X]], output=[A, B, R] * 12 + [Z, A, B], max_occurrences=8)
    assert d.propose(1).tokens == [R]  # the output still wins


# -- property test against a naive scan ----------------------------------------------------------
def naive_propose(prompt, contexts, output, max_ngram, min_ngram, max_tokens, history=()):
    """The specification, by brute force: longest suffix n-gram; among its occurrences that
    have a continuation, the highest source priority (output > passage > earlier answers to
    other prompts > prompt), then the next token most frequent over all of them (any
    source), then the most recent (passages ranked best are the most recent). Returns
    ``(tokens, n, unanimous)``: unanimous when every occurrence (any source) has the same
    next token. ``history``: ``(prompt, answer)`` pairs, oldest first."""
    stream = list(prompt) + list(output)
    occurrences = []  # (source tokens, continuation index, priority), oldest first
    for answer_prompt, answer in history:
        if list(answer_prompt) != list(prompt):
            occurrences += [(answer, end, 0.5) for end in range(len(answer))]
    for ctx in reversed([c for c in contexts if c]):
        for end in range(len(ctx)):
            occurrences.append((ctx, end, 1))
    for end in range(len(stream)):
        occurrences.append((stream, end, 0 if end < len(prompt) else 2))
    for n in range(min(max_ngram, len(stream)), min_ngram - 1, -1):
        key = stream[len(stream) - n :]
        usable = [(src, end + 1, prio, order) for order, (src, end, prio) in enumerate(occurrences)
                  if end + 1 >= n and src[end + 1 - n : end + 1] == key and end + 1 < len(src)]
        if not usable:
            continue
        unanimous = len({src[cont] for src, cont, _, _ in usable}) == 1
        freq = {}
        for src, cont, _, _ in usable:  # every source votes
            freq[src[cont]] = freq.get(src[cont], 0) + 1
        top = max(u[2] for u in usable)
        usable = [u for u in usable if u[2] == top]
        src, cont, _, _ = max(usable, key=lambda u: (freq[u[0][u[1]]], u[3]))
        return src[cont : cont + max_tokens], n, unanimous
    return [], 0, True


tokens = st.lists(st.integers(0, 3), max_size=25)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(prompt=st.lists(st.integers(0, 3), min_size=1, max_size=25), contexts=st.lists(tokens, max_size=3),
       output=tokens, sizes=st.sampled_from([(1, 1), (2, 1), (3, 2), (4, 2), (5, 3)]),
       max_tokens=st.integers(1, 6), answers=st.lists(st.tuples(st.booleans(), tokens), max_size=3))
def test_matches_a_naive_scan(prompt, contexts, output, sizes, max_tokens, answers):
    max_ngram, min_ngram = sizes
    history = [(prompt if same else prompt + [9], answer) for same, answer in answers]
    store = AnswerHistory(max_ngram, min_ngram, max_occurrences=10_000)
    for answer_prompt, answer in history:
        store.add(answer_prompt, answer)
    d = drafter(prompt, contexts, max_ngram=max_ngram, min_ngram=min_ngram, max_occurrences=10_000, history=store)
    for i, t in enumerate(output):  # check after every observed token, as in decoding
        draft = d.propose(max_tokens)
        want = naive_propose(prompt, contexts, output[:i], max_ngram, min_ngram, max_tokens, history)
        assert (draft.tokens, draft.match_length if draft.tokens else 0, draft.unanimous) == want
        d.observe([t])
    draft = d.propose(max_tokens)
    assert (draft.tokens, draft.match_length if draft.tokens else 0, draft.unanimous) == naive_propose(
        prompt, contexts, output, max_ngram, min_ngram, max_tokens, history)


# -- earlier answers ------------------------------------------------------------------------------
def test_earlier_answers_rank_between_passages_and_prompt_and_skip_the_same_prompt():
    history = AnswerHistory(4, 2)
    history.add([P, Q], [A, B, X, Y])
    assert drafter([Z, A, B], history=history).propose(2).tokens == [X, Y]
    assert drafter([A, B, R, Z, A, B], history=history).propose(1).tokens == [X]
    assert drafter([Z, A, B], contexts=[[A, B, R]], history=history).propose(1).tokens == [R]
    assert drafter([P, Q], output=[A, B], history=history).propose(1).tokens == []  # its own answer


def test_history_keeps_the_recent_answers_and_their_beginning():
    history = AnswerHistory(2, 1, max_answers=2, max_answer_tokens=3)
    for i in range(5):  # generations {0, 1}, then {0, 1} {2, 3}, then {2, 3} {4}: answers 0 and 1 go
        history.add([i], [A, B, 100 + i, Y])
    assert len(history) == 3
    assert drafter([Z, A, B], max_ngram=2, min_ngram=1, history=history).propose(2).tokens == [104]  # Y cut
    assert drafter([Z, 101], max_ngram=2, min_ngram=1, history=history).propose(1).tokens == []
    none = AnswerHistory(2, 1, max_answers=0)
    none.add([1], [A, B])
    assert len(none) == 0
    with pytest.raises(ValueError):
        AnswerHistory(2, 1, max_answers=-1)
    with pytest.raises(ValueError, match="n-gram lengths"):
        NGramDrafter(3, 1, history=AnswerHistory(2, 1))


# -- the Drafter interface: offers, extending a span, reproducible requests ----------------------
def test_offer_reports_length_and_state_and_matches_the_proposal():
    d = drafter([A, B, C, D], contexts=[[A, B, C, D, X, Y, Z]], max_ngram=4, min_ngram=1, long_match=3)
    offer = d.offer(8)
    assert (offer.drafter, offer.max_tokens, offer.state, offer.step_ms) == (
        "ngram", 3, ("3+", "unanimous", "passage"), 0.0)
    assert "3+-gram match (unanimous, from the passage)" == offer.description
    assert d.propose(8).tokens == [X, Y, Z] and d.propose(2).tokens == [X, Y]
    assert d.offer(2).max_tokens == 2
    ambiguous = drafter([Q, A], contexts=[[A, X], [A, Y]], min_ngram=1)
    assert ambiguous.offer(4).state == ("1", "ambiguous", "passage")
    assert drafter([A, B, Z, A, B]).offer(1).state == ("2", "unanimous", "prompt")  # the state names the source
    assert drafter([Q, R]).offer(4).max_tokens == 0  # nothing matches: nothing offered
    with pytest.raises(ValueError, match="long_match"):
        NGramDrafter(4, 1, long_match=0)


def test_cached_lookup_follows_the_output_and_the_requested_length():
    """offer() then propose() look up once; a longer request or a new token looks up again."""
    d = drafter([Z], contexts=[[A, B, C, D, X, Y]], min_ngram=1)
    d.observe([A])
    assert d.propose(2).tokens == [B, C]
    assert d.propose(5).tokens == [B, C, D, X, Y]  # longer than the cached lookup
    d.observe([B])
    assert d.propose(2).tokens == [C, D]


def test_propose_after_continues_the_tokens_proposed_before_it():
    d = drafter([Z, A], contexts=[[A, B, C, D, X, Y]], min_ngram=1)
    assert d.propose(2, after=[B, C]).tokens == [D, X]
    assert d.offer(3, after=[B, C, D]).max_tokens == 2  # X Y: the passage ends
    assert d.propose(3).tokens == [B, C, D]  # without ``after`` the committed sequence alone


def test_a_proposal_stays_on_one_line_of_its_source():
    """With line-break ids, a proposal ends before the first of them, and none starts with one."""
    NL, DOT_NL = 20, 21
    source = [A, B, C, D, DOT_NL, X, Y, NL, Z]
    d = drafter([Q, A], contexts=[source], min_ngram=1, line_breaks=frozenset({NL, DOT_NL}))
    assert d.propose(8).tokens == [B, C, D] and d.offer(8).max_tokens == 3
    d.observe([B, C, D])
    assert d.propose(8).tokens == [] and d.offer(8).max_tokens == 0  # the line ends here: nothing to copy
    d.observe([DOT_NL])
    assert d.propose(8).tokens == [X, Y]  # the next line, once the target broke the line itself
    assert drafter([Q, A], contexts=[source], min_ngram=1).propose(8).tokens == [B, C, D, DOT_NL, X, Y, NL, Z]


def test_line_break_ids_are_the_tokens_whose_text_holds_one(tiny_models):
    tokenizer = tiny_models.tokenizer("big")  # byte-level BPE: "\n" is one of its bytes
    ids = line_break_ids(tokenizer)
    assert ids and all("\n" in tokenizer.decode([i]) for i in ids)
    assert not any("\n" in tokenizer.decode([i]) for i in set(range(len(tokenizer))) - ids)
    assert set(tokenizer.encode("a\nb", add_special_tokens=False)) & ids


def test_a_reproducible_request_does_not_draft_from_earlier_answers():
    history = AnswerHistory(4, 2)
    history.add([P, Q], [A, B, X, Y])
    assert drafter([Z, A, B], history=history).propose(2).tokens == [X, Y]
    assert drafter([Z, A, B], history=history, reproducible=True).propose(2).tokens == []
