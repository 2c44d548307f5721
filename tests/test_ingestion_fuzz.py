"""Issue #23, item 1: a Hypothesis fuzz of every loader with hostile inputs, under caps.

Generators: YAML alias bombs, deep nesting (JSON, JSON Lines, YAML, Jira ADF), fields just over
each bound, bad encodings (invalid UTF-8, UTF-16/32 with and without a BOM, NUL bytes), sample
files of every format (tests/fixtures, evals/data) cut at random offsets or spliced with hostile
tokens, and random bytes. Every input goes through every route: format detection
(``load_bytes`` under each extension) and each loader called directly on the decoded text.

Each route runs under a memory cap (tracemalloc peak) and a time cap, with the bounds of
:mod:`ingestion.loaders.limits` scaled down (:data:`SMALL`) so that small examples cross them.
Asserted: no exception but the documented ingest errors (:class:`LoaderError`), and every
result within the bounds (records, failed records, text per document and per file, key,
metadata). Deterministic (``derandomize``, no example database); about 30 s in all.
"""

from __future__ import annotations

import codecs
import json
import re
import time
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingestion.errors import LoaderError
from ingestion.loaders import (
    LoaderConfig,
    LoadResult,
    csv_tickets,
    elog,
    jira,
    jsonl,
    limits,
    load_bytes,
    markdown,
    parse_json,
    shiftlog,
    text,
)
from ingestion.loaders.markdown import first_heading
from ingestion.loaders.shiftlog import header_body
from ingestion.textio import decode_bytes

ROOT = Path(__file__).resolve().parents[1]

#: The bounds during the fuzz: small enough that examples of a few KB cross each of them.
SMALL = {
    "MAX_FILE_BYTES": 256 * 1024, "MAX_JSON_CHARS": 64 * 1024, "MAX_RECORD_CHARS": 16 * 1024,
    "MAX_RECORDS": 200, "MAX_FAILED_RECORDS": 100, "MAX_DOCUMENT_CHARS": 8 * 1024,
    "MAX_FILE_TEXT_CHARS": 64 * 1024, "MAX_KEY_CHARS": 64, "MAX_FIELD_CHARS": 1024, "MAX_METADATA_CHARS": 4096,
    "MAX_NESTING_DEPTH": 16, "MAX_FRONT_MATTER_CHARS": 4096, "MAX_YAML_NODES": 200, "MAX_YAML_SCALAR_CHARS": 2048,
}
#: Caps per route and example: traced peak memory (bytes) and wall time (seconds, tracemalloc on).
MEMORY_CAP = 16 * 2**20
TIME_CAP_S = 2.0
FUZZ = settings(max_examples=40, derandomize=True, database=None, deadline=timedelta(seconds=20),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SAMPLES: list[bytes] = [path.read_bytes() for pattern in ("tests/fixtures/ingestion/corpus/**/*.*",
                                                         "tests/fixtures/ingestion/exports/*.*",
                                                         "evals/data/*/corpus/**/*.*", "evals/data/corpus/**/*.*")
                        for path in sorted(ROOT.glob(pattern)) if path.stat().st_size < 60_000]
NAMES = ("f.md", "f.elog", "f.json", "f.jsonl", "f.csv", "f.tsv", "f.log", "f.txt", "noext")


def _direct(loader: Callable[..., LoadResult]) -> Callable[[bytes], LoadResult]:
    """A route that decodes the bytes and calls ``loader`` on the text, bypassing format detection."""
    return lambda data: loader(decode_bytes(data).text, "f", LoaderConfig())


ROUTES: dict[str, Callable[[bytes], LoadResult]] = {
    **{f"detect {name}": (lambda data, name=name: load_bytes(data, name)) for name in NAMES},
    "markdown": _direct(markdown.load), "elog": _direct(elog.load), "shiftlog": _direct(shiftlog.load),
    "jsonl": _direct(jsonl.load), "csv (and Jira CSV)": _direct(csv_tickets.load), "text": _direct(text.load),
    "jira json": lambda data: jira.load_data(parse_json(decode_bytes(data).text), "f", LoaderConfig()),
}


@pytest.fixture(scope="module", autouse=True)
def small_limits() -> Iterator[None]:
    """Scale the loader bounds down to :data:`SMALL` and trace allocations for this module."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in SMALL.items():
            patch.setattr(limits, name, value)
        tracemalloc.start()
        yield
        tracemalloc.stop()


def _value_chars(value: object) -> int:
    return sum(len(str(v)) for v in value) if isinstance(value, list) else len(str(value))


def check_bounds(result: LoadResult) -> None:
    """Every document and the file's totals within :data:`SMALL`; failures clean."""
    assert len(result.documents) + len(result.failures) <= SMALL["MAX_RECORDS"]
    assert len(result.failures) <= SMALL["MAX_FAILED_RECORDS"]
    assert sum(len(d.text) for d in result.documents) <= SMALL["MAX_FILE_TEXT_CHARS"]
    for doc in result.documents:
        assert len(doc.text) <= SMALL["MAX_DOCUMENT_CHARS"]
        assert len(str(doc.metadata["key"])) <= SMALL["MAX_KEY_CHARS"]
        sizes = {name: _value_chars(value) for name, value in doc.metadata.items() if value is not None}
        assert max(sizes.values()) <= SMALL["MAX_FIELD_CHARS"]
        assert sum(len(name) + size for name, size in sizes.items()) <= SMALL["MAX_METADATA_CHARS"]
    for failure in result.failures:
        assert "RecursionError" not in failure.reason and "MemoryError" not in failure.reason


def run_every_route(data: bytes) -> None:
    """Each route on ``data``: only :class:`LoaderError`, bounded output, within the caps."""
    for route, load in ROUTES.items():
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        start = time.perf_counter()
        try:
            result = load(data)
        except LoaderError:
            result = None
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] - base
        assert peak <= MEMORY_CAP, f"{route}: {peak:,} bytes traced for a {len(data):,}-byte input"
        assert elapsed <= TIME_CAP_S, f"{route}: {elapsed:.2f} s for a {len(data):,}-byte input"
        if result is not None:
            check_bounds(result)


# -- generators -----------------------------------------------------------------------------------
@st.composite
def alias_bombs(draw: st.DrawFn) -> bytes:
    """Front matter whose aliases nest: ``l0: &l0 [s, s ...]``, ``lN: &lN [*lN-1 ...]``, a key aliased."""
    levels, width = draw(st.integers(1, 10)), draw(st.integers(2, 12))
    scalar = draw(st.sampled_from(['"lol"', "x" * 300, '""', "{a: b}"]))
    lines = ["l0: &l0 [" + ",".join([scalar] * width) + "]"]
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    top = f"l{levels}"
    lines.append(draw(st.sampled_from([f"title: *{top}", f"id: *{top}", f"services: *{top}",
                                       f"m: &m {{k: *{top}}}\nn: {{<<: *m}}", f"tags: [*{top}, *{top}]"])))
    return ("---\n" + "\n".join(lines) + "\n---\n# Postmortem\nbody\n").encode()


@st.composite
def deep_nesting(draw: st.DrawFn) -> bytes:
    """A value nested ``depth`` levels as JSON, JSON Lines, YAML flow or block, or a Jira ADF tree."""
    depth, kind = draw(st.integers(1, 3000)), draw(st.sampled_from(["json", "jsonl", "yaml", "block", "adf"]))
    nested = "[" * depth + "]" * depth
    if kind == "json":
        return nested.encode()
    if kind == "jsonl":
        return ('{"id": "a", "text": "ok"}\n{"id": "b", "text": "t", "x": ' + nested + "}\n").encode()
    if kind == "yaml":
        return ("---\nx: " + nested + "\n---\nbody\n").encode()
    if kind == "block":
        return ("---\n" + "".join("  " * i + f"k{i}:\n" for i in range(min(depth, 400))) + "---\nbody\n").encode()
    node = '{"type": "text", "text": "deep"}'
    for _ in range(min(depth, 600)):
        node = '{"type": "paragraph", "content": [' + node + "]}"
    return ('{"issues": [{"key": "OPS-1", "fields": {"summary": "s", "description": ' + node + "}}]}").encode()


@st.composite
def huge_fields(draw: st.DrawFn) -> bytes:
    """A record whose key, text, one field or field count sits at, just over or far over its bound."""
    bound = draw(st.sampled_from(["MAX_KEY_CHARS", "MAX_FIELD_CHARS", "MAX_DOCUMENT_CHARS", "MAX_RECORD_CHARS"]))
    size = SMALL[bound] + draw(st.sampled_from([-1, 0, 1, 7, SMALL[bound]]))
    big = draw(st.sampled_from(["x", "é", "\n", '"', ",", " ", "ab"])) * size
    fmt = draw(st.sampled_from(["jsonl", "csv", "md", "elog", "log", "jira", "txt"]))
    if fmt == "jsonl":
        return "\n".join(json.dumps(r) for r in ({"id": "a", "text": "ok"}, {"id": big[:size], "text": big},
                                                {"id": "c", "text": "t", "f": big})).encode()
    if fmt == "csv":
        return ('ticket_id,subject,notes\nT-1,ok,ok\n"' + big.replace('"', '""') + '",s,"' + big + '"\n').encode()
    if fmt == "jira":
        return json.dumps({"issues": [{"key": big, "fields": {"summary": big, "labels": [big]}}]}).encode()
    if fmt == "elog":
        return f"$@MID@$: 1\nSubject: {big}\n{'=' * 40}\n{big}\n".encode()
    if fmt == "log":
        return f"2026-01-20 06:00 [OPS] {big}\n".encode()
    return (f"---\nid: {json.dumps(big)}\n---\n# {big}\n" if fmt == "md" else big).encode()


ENCODINGS = ("utf_16_le", "utf_16_be", "utf_16", "utf_32", "utf_32_le", "latin_1", "cp1252", "utf_8_sig")


@st.composite
def bad_encodings(draw: st.DrawFn) -> bytes:
    """A sample (or random text) re-encoded, given or stripped of a BOM, or with bad bytes spliced in."""
    sample = draw(st.sampled_from(SAMPLES)).decode("utf_8", "replace")[: draw(st.integers(0, 4000))]
    how = draw(st.sampled_from(["encode", "no bom", "invalid utf8", "nul", "bom mismatch"]))
    if how in ("encode", "no bom"):
        data = sample.encode(draw(st.sampled_from(ENCODINGS)), "replace")
        return data.removeprefix(codecs.BOM_UTF16_LE).removeprefix(codecs.BOM_UTF16_BE) if how == "no bom" else data
    raw = sample.encode()
    bad = {"invalid utf8": b"\xff\xfe\xc3(\xa0\xa1\xe2\x28\xa1\xf0\x28\x8c\xbc\xed\xa0\x80",
           "nul": b"\x00", "bom mismatch": b"\xd8\x00\xdc"}[how]
    cut = draw(st.integers(0, len(raw)))
    data = raw[:cut] + bad * draw(st.integers(1, 20)) + raw[cut:]
    return (codecs.BOM_UTF16_LE if how == "bom mismatch" else b"") + data


HOSTILE_TOKENS = ("&a ", "*a", "<<: *a", "[", "{", "]", "}", "\x00", "\xff", "$@MID@$: ", "=" * 40, "=== shift ",
                  '"', ",", ";", "\t", "\n", "\r", "<a", "</", "---\n", "# ", "2026-01-20 06:00 ", " " * 200,
                  "\u2028", "\ufeff", "9" * 5000, "[" * 500)


@st.composite
def damaged_samples(draw: st.DrawFn) -> bytes:
    """A sample file cut at a random offset, or with hostile tokens spliced in at random offsets."""
    data = draw(st.sampled_from(SAMPLES))
    if draw(st.booleans()):
        return data[: draw(st.integers(0, len(data)))]
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, len(data)))
        token = draw(st.sampled_from(HOSTILE_TOKENS)).encode("utf_8", "surrogatepass")
        data = data[:at] + token * draw(st.integers(1, 40)) + data[at:]
    return data


# -- the fuzz -------------------------------------------------------------------------------------
@FUZZ
@given(alias_bombs())
def test_fuzz_alias_bombs(data):
    run_every_route(data)


@FUZZ
@given(deep_nesting())
def test_fuzz_deep_nesting(data):
    run_every_route(data)


@FUZZ
@given(huge_fields())
def test_fuzz_huge_fields(data):
    run_every_route(data)


@FUZZ
@given(bad_encodings())
def test_fuzz_bad_encodings(data):
    run_every_route(data)


@FUZZ
@given(damaged_samples())
def test_fuzz_truncated_and_spliced_samples(data):
    run_every_route(data)


@FUZZ
@given(st.binary(max_size=4096))
def test_fuzz_random_bytes(data):
    run_every_route(data)


# -- the linear-time rewrites read what the old patterns read -------------------------------------
OLD_HEADING_RE = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)
OLD_SHIFT_HEADER_RE = re.compile(r"^\s*(?:={2,}|#{1,6}|-{2,})\s*shift\b[:\s]*(?P<body>.*?)\s*(?:={2,}|-{2,})?\s*$",
                                 re.IGNORECASE)
SHORT_TEXT = st.text(st.sampled_from("#= -\t\nab:Shift\r\u2028"), max_size=24)


@settings(max_examples=300, derandomize=True, database=None)
@given(SHORT_TEXT)
def test_first_heading_reads_what_the_old_pattern_read(body):
    body = body.strip()  # the loader strips the body first
    old = OLD_HEADING_RE.search(body)
    assert first_heading(body) == (old.group(1) if old else None)


@settings(max_examples=300, derandomize=True, database=None)
@given(SHORT_TEXT.map(lambda s: s.splitlines()[0] if s.splitlines() else ""))
def test_shift_header_body_reads_what_the_old_pattern_read(line):
    old = OLD_SHIFT_HEADER_RE.match(line)
    assert header_body(line) == (old.group("body") if old else None)
