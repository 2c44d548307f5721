"""Citation checking: invalid [n] removed, whole or streamed in any split."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from copilot.answer.citations import MAX_GAP, CitationFilter, check_citations, cited_numbers, strip_citations


def test_invalid_numbers_are_removed_valid_ones_kept():
    text, invalid = check_citations("Restarted the door [1]. Also see [7] and [2, 9].", 3)
    assert text == "Restarted the door [1]. Also see and [2]."
    assert invalid == [7, 9]
    assert cited_numbers(text) == [1, 2]


def test_brackets_that_are_not_citations_are_left_alone():
    text = "[SE][PrepareToPut][SRM_AUTHORIZATION_FAILURE] at [2026-01-13] ids [a1]"
    assert check_citations(text, 1) == (text, [])


def test_strip_citations_for_history():
    assert strip_citations("Fixed by a restart [1][2]. Done [3].") == "Fixed by a restart. Done."


PIECES = st.sampled_from(["[", "]", "1", "2", "9", "12", ",", " ", "\n", "x", ".", "; ", "[1]", "[4]", "[2, 7]"])


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=40), st.integers(0, 3), st.data())
def test_streamed_deltas_add_up_to_the_checked_text(pieces, n_sources, data):
    raw = "".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=8)))
    flt = CitationFilter(n_sources)
    out, last = "", 0
    for c in cuts + [len(raw)]:
        out += flt.push(raw[last:c])
        last = c
    out += flt.finish()
    assert out == check_citations(raw, n_sources)[0] == flt.text
    assert flt.invalid == check_citations(raw, n_sources)[1]


def test_whitespace_before_a_removed_marker_is_bounded_and_streams_alike():
    """Issue 46: the marker pattern once rescanned a run of spaces from each of its positions
    (quadratic: 40,000 spaces took 6 s, holding the GIL). At most MAX_GAP characters of whitespace
    go with a removed marker, whole or streamed one character at a time."""
    raw = "a" + " " * (MAX_GAP + 36) + "[9] b"
    whole, invalid = check_citations(raw, 1)
    assert whole == "a" + " " * 36 + " b" and invalid == [9]
    flt = CitationFilter(1)
    streamed = "".join(flt.push(ch) for ch in raw) + flt.finish()
    assert streamed == whole == flt.text and flt.invalid == [9]
    assert strip_citations("x" + " " * 150_000 + "y [1]") == "x" + " " * 150_000 + "y"
