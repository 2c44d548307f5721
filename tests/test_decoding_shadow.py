"""Off-policy acceptance of declined free proposals (decoding/planning/shadow.py)."""

from __future__ import annotations

from decoding.planning.policy import AcceptanceTable
from decoding.planning.shadow import ShadowBook

STATE = ("ngram", "2", "unanimous", "passage", "")


def counts(table: AcceptanceTable) -> tuple[float, float, float, float]:
    c = table.counts[STATE]
    return c.first_tried, c.first_accepted, c.next_tried, c.next_accepted


def test_a_declined_proposal_is_booked_once_the_committed_tokens_resolve_it():
    table = AcceptanceTable()
    book = ShadowBook(table)
    book.declined(STATE, [1, 2, 3, 4])
    book.committed([1])  # a plain step: matches so far, not resolved
    book.committed([2])
    assert STATE not in table.counts and len(book.pending) == 1
    book.committed([3, 9])  # the fourth token differs: 3 of 4 accepted
    assert counts(table) == (1, 1, 3, 2) and book.pending == []


def test_a_first_token_mismatch_and_a_whole_match_resolve_at_once():
    table = AcceptanceTable()
    book = ShadowBook(table)
    book.declined(STATE, [5, 6])
    book.committed([7])
    assert counts(table) == (1, 0, 0, 0)
    book.declined(STATE, [1, 2])
    book.committed([1, 2, 8])  # a longer block: the proposal is wholly matched
    assert table.counts[STATE].first_accepted > 0.9 and book.pending == []
    book.declined(STATE, [])  # nothing proposed: nothing pending
    assert book.pending == []


def test_overlapping_shadows_advance_together():
    table = AcceptanceTable()
    book = ShadowBook(table)
    book.declined(STATE, [1, 2, 3])
    book.committed([1])
    book.declined(STATE, [2, 3, 4])  # the next position's proposal
    book.committed([2])
    book.committed([3])  # the first is wholly matched; the second still matches
    assert [s.matched for s in book.pending] == [2]
    book.committed([5])
    assert book.pending == [] and table.counts[STATE].first_tried > 1.9
