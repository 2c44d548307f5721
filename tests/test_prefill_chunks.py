"""Where the llama.cpp backend's prefill puts a prompt's rows (decoding.backends.llamacpp
``chunk_ends`` and ``prefill_runs``): pure functions, checked against llama.cpp's own batching
(``Llama.generate`` at its default batch: ``llama_decode`` calls of 512 tokens from position 0)
for every way a prompt gets prefilled: one call, chunk by chunk in a batch, from a reused prefix.
The kernels' sums themselves are checked on the real GGUF in tests/test_llamacpp_backend.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from decoding.backends.llamacpp import N_BATCH, TILED_MIN_ROWS, chunk_ends, prefill_runs


def few_row_positions(calls: list[tuple[int, int]]) -> set[int]:
    """Positions decoded in a call of fewer than TILED_MIN_ROWS rows (ggml's few-row kernels)."""
    return {p for first, end in calls if end - first < TILED_MIN_ROWS for p in range(first, end)}


def llama_generate_calls(length: int) -> list[tuple[int, int]]:
    """``Llama.eval``'s ``llama_decode`` calls at its default batch (n_batch = n_ubatch = 512)."""
    return [(first, min(length, first + N_BATCH)) for first in range(0, length, N_BATCH)]


def test_a_short_tail_joins_the_chunk_before_it_unless_it_starts_a_batch():
    assert chunk_ends(580) == [64, 128, 192, 256, 320, 384, 448, 512, 580]
    assert chunk_ends(516) == [64, 128, 192, 256, 320, 384, 448, 512, 516]
    assert chunk_ends(5) == [5] and chunk_ends(64) == [64] and chunk_ends(69) == [69] and chunk_ends(72) == [64, 72]
    assert chunk_ends(68, 64, 64) == [64, 68]  # the two do not fit one run: the tail stays alone
    assert prefill_runs(0, chunk_ends(1100)) == [(0, 512), (512, 1024), (1024, 1100)]
    assert prefill_runs(0, chunk_ends(1028)) == [(0, 512), (512, 1024), (1024, 1028)]
    assert prefill_runs(448, chunk_ends(516)) == [(448, 512), (512, 516)]
    assert prefill_runs(69, chunk_ends(300), 128) == [(69, 192), (192, 300)]  # from inside a chunk
    assert prefill_runs(125, chunk_ends(300)) == [(125, 128), (128, 300)]  # a 3-row start runs alone


@given(length=st.integers(1, 3_000), chunk_log=st.integers(3, 9), extra=st.integers(0, 9), data=st.data())
def test_every_way_of_prefilling_puts_the_rows_where_llama_generate_does(length, chunk_log, extra, data):
    """One call, chunk by chunk and from any reusable prefix: the same positions take the few-row
    kernels as in ``Llama.generate``, and no call is longer than the run."""
    chunk = 2 ** chunk_log
    run = min(N_BATCH, chunk * data.draw(st.integers(1, N_BATCH // chunk)) + extra)
    ends = chunk_ends(length, chunk, run)
    assert ends == sorted(set(ends)) and ends[-1] == length
    want = few_row_positions(llama_generate_calls(length)) if run >= chunk + TILED_MIN_ROWS - 1 else None
    start = data.draw(st.sampled_from([0, *ends[:-1]]))  # a reused prefix ends on a chunk end
    reused = [(0, start)] if start else []  # (the parked prompt prefilled it in runs of 8+ rows)
    one_call = prefill_runs(start, ends, run)
    by_chunk = [c for first, end in zip([0, *ends], ends)  # each chunk a prefill call of its own
                for c in prefill_runs(first, chunk_ends(end, chunk, run), run)]
    for calls in (reused + one_call, by_chunk):
        assert [first for first, _ in calls[1:]] == [end for _, end in calls[:-1]] and calls[-1][1] == length
        assert all(end - first <= run for first, end in calls if (first, end) not in reused)
        if want is not None:
            assert few_row_positions(calls) == want
