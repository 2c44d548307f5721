"""Issue #23, item 1: bounded loaders. The issue's YAML alias bombs, and each bound of
ingestion/loaders/limits.py met by a real file: it fails that record or that file with a reason
naming the bound, quickly and in little memory; good files next to it still ingest. No model."""

from __future__ import annotations

import json
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import HashEmbedder  # noqa: E402

from ingestion.errors import LimitExceededError, ParseError, RecordLimitError  # noqa: E402
from ingestion.loaders import limits, load_bytes  # noqa: E402
from ingestion.pipeline import ingest_paths  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402


def alias_bomb(levels: int) -> bytes:
    """The issue's post-mortem: ``l0: &l0 ["lol", ...x9]``, ``l1: [*l0, ...x9]`` ... ``title: *lN``."""
    lines = ["---", "l0: &l0 [" + ",".join(['"lol"'] * 9) + "]"]
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    lines += [f"title: *l{levels}", "---", "# Postmortem"]
    return ("\n".join(lines) + "\n").encode()


def measured(data: bytes, name: str) -> tuple[BaseException | None, float, int]:
    """(error raised or None, seconds, peak traced bytes) of ``load_bytes`` on ``data``."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        load_bytes(data, name)
        error = None
    except Exception as exc:  # noqa: BLE001 - returned for the test to check
        error = exc
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return error, elapsed, peak


# -- YAML front matter ----------------------------------------------------------------------------
@pytest.mark.parametrize(("levels", "size"), [(5, 326), (7, 418)])
def test_the_issues_alias_bombs_fail_the_file_at_once_in_little_memory(levels, size):
    data = alias_bomb(levels)
    assert len(data) == size  # the issue's inputs: 3.85 MB and 312 MB of text before the bound
    error, elapsed, peak = measured(data, "postmortems/lol.md")
    assert isinstance(error, LimitExceededError)
    assert "front matter" in str(error) and "aliases expanded" in str(error) and "MAX_YAML_NODES" in str(error)
    assert elapsed < 0.5 and peak < 4 * limits.MiB


def test_an_alias_of_a_long_scalar_repeated_is_bounded_by_characters():
    data = ("---\na: &a " + "x" * 2000 + "\nb: [" + ",".join(["*a"] * 100) + "]\n---\nbody\n").encode()
    with pytest.raises(LimitExceededError, match="characters with its aliases expanded"):
        load_bytes(data, "pm.md")


@pytest.mark.parametrize("front", ["a: &a [*a]", "a: &a {k: *a}"])
def test_a_recursive_alias_fails_the_file(front):
    with pytest.raises(LimitExceededError, match="refers to its own anchor"):
        load_bytes(f"---\n{front}\n---\nbody\n".encode(), "pm.md")


@pytest.mark.parametrize("depth", [200, 5000])
def test_deeply_nested_front_matter_fails_cleanly_not_with_a_recursion_error(depth):
    data = ("---\nx: " + "[" * depth + "]" * depth + "\n---\nbody\n").encode()
    # our bound (128) or, past 1,000 levels, libyaml's own (its scanner reads ahead of the composer)
    with pytest.raises((LimitExceededError, ParseError), match="nest"):
        load_bytes(data, "pm.md")


def test_front_matter_over_its_size_bound_fails_and_small_aliases_still_work():
    big = ("---\nnotes: " + "n" * (limits.MAX_FRONT_MATTER_CHARS + 1) + "\n---\nbody\n").encode()
    with pytest.raises(LimitExceededError, match="MAX_FRONT_MATTER_CHARS"):
        load_bytes(big, "pm.md")
    ok = b"---\nid: PM-1\nsvc: &s [eos, fts]\nservices: *s\n---\n# Outage\nfixed\n"
    (doc,) = load_bytes(ok, "pm.md").documents
    assert doc.metadata["services"] == ["eos", "fts"] and doc.metadata["svc"] == ["eos", "fts"]


@pytest.mark.parametrize("value", ["!!int " + "9" * 5000, "!!timestamp 2026-13-45", "!!float abc"])
def test_a_value_its_explicit_tag_cannot_hold_is_a_parse_error(value):
    with pytest.raises(ParseError, match="YAML front matter"):
        load_bytes(f"---\nx: {value}\n---\nbody\n".encode(), "pm.md")


# -- JSON and JSON Lines --------------------------------------------------------------------------
def test_deep_json_fails_the_json_file_and_only_its_line_in_json_lines():
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(LimitExceededError, match="nests deeper than 128 levels"):
        load_bytes(deep.encode(), "t.json")
    lines = ['{"id": "KB-1", "text": "ok"}', '{"id": "KB-2", "text": "x", "deep": ' + deep + "}",
             '{"id": "KB-3", "text": "x", "n": ' + "9" * 5000 + "}", '{"id": "KB-4", "text": "ok"}']
    result = load_bytes("\n".join(lines).encode(), "kb.jsonl")
    assert [d.metadata["key"] for d in result.documents] == ["KB-1", "KB-4"]
    (two, three) = result.failures
    assert (two.where, three.where) == ("line 2", "line 3")
    assert "nests deeper than 128 levels (MAX_NESTING_DEPTH)" in two.reason and "RecursionError" not in two.reason
    assert "integer string conversion" in three.reason


def test_a_jira_issue_nested_past_the_bound_fails_the_file():
    node: dict = {"type": "text", "text": "deep"}
    for _ in range(200):
        node = {"type": "paragraph", "content": [node]}
    data = json.dumps({"issues": [{"key": "OPS-1", "fields": {"summary": "s", "description": node}}]})
    with pytest.raises(LimitExceededError, match="MAX_NESTING_DEPTH"):
        load_bytes(data.encode(), "jira.json")


def test_key_and_metadata_field_over_their_bounds_fail_that_record_alone():
    records = [{"id": "KB-1", "text": "ok"}, {"id": "K" * (limits.MAX_KEY_CHARS + 1), "text": "x"},
               {"id": "KB-3", "text": "x", "notes": "n" * (limits.MAX_FIELD_CHARS + 1)},
               {"id": "KB-4", "text": "x", **{f"f{i}": "v" * 1000 for i in range(70)}}, {"id": "KB-5", "text": "ok"}]
    result = load_bytes("\n".join(json.dumps(r) for r in records).encode(), "kb.jsonl")
    assert [d.metadata["key"] for d in result.documents] == ["KB-1", "KB-5"]
    assert [(f.where, f.reason.split("(")[-1]) for f in result.failures] == [
        ("line 2", "MAX_KEY_CHARS)"), ("line 3", "MAX_FIELD_CHARS)"), ("line 4", "MAX_METADATA_CHARS)")]


# -- text size, record counts, file size ----------------------------------------------------------
def test_a_document_over_the_text_bound_fails_its_file():
    with pytest.raises(RecordLimitError, match="document text is 8,388,609 characters.*MAX_DOCUMENT_CHARS"):
        load_bytes(b"x" * (limits.MAX_DOCUMENT_CHARS + 1), "big.txt")


def test_record_and_failure_counts_and_file_size_are_bounded(monkeypatch):
    monkeypatch.setattr(limits, "MAX_RECORDS", 5)
    six = "\n".join(json.dumps({"id": f"KB-{i}", "text": "t"}) for i in range(6)).encode()
    with pytest.raises(LimitExceededError, match="more than 5 records in one file"):
        load_bytes(six, "kb.jsonl")
    monkeypatch.setattr(limits, "MAX_RECORDS", 100)
    monkeypatch.setattr(limits, "MAX_FAILED_RECORDS", 3)
    with pytest.raises(LimitExceededError, match="more than 3 records failed.*first: line 1"):
        load_bytes(b"{}\n" * 4, "kb.jsonl")
    monkeypatch.setattr(limits, "MAX_FILE_BYTES", 100)
    with pytest.raises(LimitExceededError, match="file of 101 bytes.*MAX_FILE_BYTES"):
        load_bytes(b"x" * 101, "a.txt")


def test_json_file_and_csv_field_size_bounds(monkeypatch):
    monkeypatch.setattr(limits, "MAX_JSON_CHARS", 100)
    with pytest.raises(LimitExceededError, match="MAX_JSON_CHARS.*JSON Lines"):
        load_bytes(json.dumps([{"id": "A", "text": "a" * 100}]).encode(), "kb.json")
    monkeypatch.setattr(limits, "MAX_RECORD_CHARS", 1000)
    csv = 'ticket_id,description\nT-1,ok\nT-2,"' + "d" * 2000 + '"\nT-3,ok\n'
    with pytest.raises(LimitExceededError, match="line 3: a field longer than 1,000 characters"):
        load_bytes(csv.encode(), "t.csv")


# -- no pattern backtracks: hostile lines are read in linear time ---------------------------------
@pytest.mark.parametrize(("name", "data"), [
    ("pm.md", "# a" + " " * 50_000 + "x\n"),
    ("shift.log", "2026-01-20 06:00 start\n== shift a" + " " * 50_000 + "x\n"),
    ("ops.elog", "$@MID@$: 1" + " " * 200_000 + "x\n"),
    ("ops.elog", "$@MID@$: 1\nEncoding: HTML\n" + "=" * 40 + "\n" + "<a" * 200_000 + "\n"),
    ("ops.elog", "$@MID@$: 1\nEncoding: HTML\n" + "=" * 40 + "\n" + "</" * 200_000 + "\n"),
    ("ops.elog", "$@MID@$: 1\nEncoding: HTML\n" + "=" * 40 + "\n" + "<!--" * 100_000 + "\n"),
    ("shift.log", "".join(f"2026-01-20 06:{i % 60:02d} [T{i}] x\n" for i in range(50_000))),
])
def test_hostile_lines_are_read_in_linear_time(name, data):
    start = time.perf_counter()
    try:
        load_bytes(data.encode(), name)
    except (LimitExceededError, ParseError, RecordLimitError):
        pass
    assert time.perf_counter() - start < 2.0  # each took minutes to hours before


# -- end to end: the issue's inputs through ingest_paths ------------------------------------------
def test_alias_bombs_fail_their_files_in_an_ingest_and_the_rest_is_stored(tmp_path):
    src = tmp_path / "src"
    (src / "postmortems").mkdir(parents=True)
    bomb = src / "postmortems" / "lol.md"
    bomb.write_text("---\nid: PM-7\n---\n# Cooling failure\nchiller restarted\n")
    store = ChunkStore(tmp_path / "store", embedder=HashEmbedder(), collection="limits-test")
    try:
        assert ingest_paths([src], store, progress=False).files[0].status == "indexed"
        before = [(c.chunk_id, c.text) for c in store.lexical.document_chunks("postmortems/lol.md#PM-7")]
        bomb.write_bytes(alias_bomb(5))
        (src / "postmortems" / "lol2.md").write_bytes(alias_bomb(7))
        (src / "kb.jsonl").write_text(json.dumps({"id": "KB-1", "text": "drain the pool first"}) + "\n")
        (src / "postmortems" / "fine.md").write_text("---\nid: PM-8\n---\n# Link down\nfibre swapped\n")
        start = time.perf_counter()
        report = ingest_paths([src], store, progress=False)
        assert time.perf_counter() - start < 30
        files = {f.source: f for f in report.files}
        for name in ("postmortems/lol.md", "postmortems/lol2.md"):
            assert files[name].status == "failed"
            assert "front matter" in files[name].reason and "aliases" in files[name].reason
        assert files["kb.jsonl"].status == "indexed" and files["postmortems/fine.md"].status == "indexed"
        assert [(c.chunk_id, c.text) for c in store.lexical.document_chunks("postmortems/lol.md#PM-7")] == before
        assert not any(r["source"] == "postmortems/lol2.md" for r in store.manifest.page(0, 100)[0])
    finally:
        store.close()
