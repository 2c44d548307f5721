"""Evidence from the whole record (issue 43): records read back from their chunks, thread turns with
superseded attempts, table rows with their column headers, command output with its prompt, and the
scorer that uses them (copilot/search/record.py, copilot/search/highlights.py)."""

# ruff: noqa: E501  (pasted command output keeps its width)
from __future__ import annotations

import pytest

from copilot.search.highlights import score_units, top_units
from copilot.search.record import (
    MAX_RECORD_CHUNKS,
    RECORD_WINDOW,
    EvidenceUnit,
    bounded_record,
    find_tables,
    record_text,
    record_units,
    render_row,
)
from copilot.search.retrieval import Passage
from copilot.search.sources import Source, with_highlights
from ingestion.chunking import Chunker
from ingestion.documents import Chunk, Document

CEPH = """Pool nearly full, checked usage:
[root@ceph-mon01 ~]# ceph osd df tree
ID   CLASS  WEIGHT    REWEIGHT  SIZE     RAW USE  DATA     OMAP    META     AVAIL    %USE   VAR   PGS  STATUS  TYPE NAME
 36    hdd   1.81940   1.00000  1.8 TiB  1.5 TiB  1.5 TiB   1 KiB  3.9 GiB  323 GiB  82.66  1.18   61      up          osd.36
 37    hdd   1.81940   1.00000  1.8 TiB  1.6 TiB  1.6 TiB   1 KiB  4.1 GiB  193 GiB  89.62  1.28   66      up          osd.37
 38    hdd   1.81940   1.00000  1.8 TiB  1.1 TiB  1.1 TiB   1 KiB  3.1 GiB  700 GiB  61.04  0.87   52      up          osd.38
"""

THREAD = """KES-412: MDS slow requests on /kes/home
Status: Resolved · Resolution: Fixed

Clients hang on /kes/home since the upgrade.

Comments:
[2026-09-01T10:00 Ana Silva] tried restarting the mds: systemctl restart ceph-mds@a
[2026-09-02T10:00 Bob Ng] set the cache limit: ceph config set mds mds_cache_memory_limit 8589934592
[2026-09-03T10:00 Ana Silva] that didn't help, reverted the cache limit.
[2026-09-04T10:00 Bob Ng] fixed for good with ceph fs set kesfs max_mds 2, stable since.
"""


def test_a_table_row_is_read_with_its_column_headers():
    lines = CEPH.splitlines()
    (table,) = find_tables(lines)
    assert lines[table.header].startswith("ID") and len(table.rows) == 3
    row = render_row(lines[table.header], lines[table.rows[1]])
    assert "%USE 89.62" in row and "NAME osd.37" in row and "RAW USE 1.6 TiB" in row


def test_df_output_pairs_each_column_by_position():
    header = "Filesystem      Size  Used Avail Use% Mounted on"
    row = "/dev/sda1        50G   45G  5.0G  91% /"
    assert render_row(header, row) == "Filesystem /dev/sda1 · Size 50G · Used 45G · Avail 5.0G · Use% 91% · Mounted /"


def test_output_lines_keep_the_prompt_that_printed_them():
    units = record_units(CEPH)
    row = next(u for u in units if "osd.37" in u.text)
    assert row.context == "[root@ceph-mon01 ~]# ceph osd df tree"
    assert row.shown.endswith("(output of `[root@ceph-mon01 ~]# ceph osd df tree`)")


def test_the_row_the_question_names_comes_first():
    units = record_units(CEPH)
    best = top_units(score_units("what was the %use of osd.37", [units], None), 0)[0]
    assert "89.62" in best.text


def test_thread_turns_and_the_attempt_a_later_turn_undid():
    units = record_units(THREAD)
    cache = next(u for u in units if "mds_cache_memory_limit" in u.text)
    final = next(u for u in units if "max_mds 2" in u.text)
    assert cache.superseded and not final.superseded
    assert final.turn > cache.turn and final.turns == cache.turns
    assert cache.shown.endswith("(later reverted)")


@pytest.mark.parametrize("question", ["how was the mds slowness on /kes/home finally fixed?",
                                      "what fixed the slow mds requests in the end"])
def test_the_fix_that_stuck_outranks_earlier_attempts(question):
    best = top_units(score_units(question, [record_units(THREAD)], None), 0)[0]
    assert "max_mds 2" in best.text


def test_a_record_is_read_back_from_overlapping_chunks_without_repeats():
    from transformers import AutoTokenizer

    from ingestion.embedding import default_model_path

    body = "\n".join(f"line {i}: pool dpool-{i:03d} reported usage {i * 1.5:.1f} TiB after the rebalance"
                     for i in range(120))
    doc = Document("logbooks/x.elog#1", body, {"doc_type": "elog", "key": "1", "title": "usage"})
    chunks = Chunker(AutoTokenizer.from_pretrained(default_model_path()), 128).chunk(doc)
    assert len(chunks) > 5
    assert record_text(list(reversed(chunks))) == body


def test_evidence_comes_from_chunks_retrieval_did_not_match():
    chunks = [Chunk(f"t#{i}", "t", f"Jira T-1 | header\n{text}", {"chunk_index": i, "title": "t"})
              for i, text in enumerate(["Clients hang on /kes/home.", "More chatter about the weather.",
                                        "Final fix: ceph fs set kesfs max_mds 2"])]
    matched = Source(1, (Passage(0, chunks[0], 0.9),))
    only_matched = with_highlights("how was it fixed", [matched], None)[0]
    whole = with_highlights("how was it fixed", [Source(1, matched.passages, record=tuple(chunks))], None)[0]
    assert not any("max_mds" in h for h in only_matched.highlights)
    assert "max_mds 2" in whole.highlights[0]


def test_plain_strings_are_units_outside_any_thread():
    scored = score_units("restart fts", [["systemctl restart fts-server", "weather is fine"]], None)
    assert scored[0].text == "systemctl restart fts-server"
    assert EvidenceUnit("x").shown == "x"


def test_a_huge_record_gives_evidence_from_the_chunks_near_the_matched_ones():
    chunks = [Chunk(f"big#{i}", "big", f"Document big\nline {i}", {"chunk_index": i}) for i in range(MAX_RECORD_CHUNKS + 50)]
    assert len(bounded_record(chunks[:MAX_RECORD_CHUNKS], [0])) == MAX_RECORD_CHUNKS
    kept = [c.index for c in bounded_record(chunks, [100])]
    assert kept == list(range(100 - RECORD_WINDOW, 100 + RECORD_WINDOW + 1))
