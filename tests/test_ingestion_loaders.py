"""Loaders, format detection, decoding and query/metadata helpers (no model needed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import CORPUS  # noqa: E402

from ingestion.documents import Document, SearchFilter, make_chunk_id, make_doc_id  # noqa: E402
from ingestion.errors import BinaryFileError, ParseError, UnsupportedFormatError  # noqa: E402
from ingestion.loaders import LoaderConfig, detect_format, load_bytes, load_file  # noqa: E402
from ingestion.stores.chroma_store import build_where, sanitize_metadata  # noqa: E402
from ingestion.stores.lexical_index import fts_query  # noqa: E402
from ingestion.textio import decode_bytes  # noqa: E402
from ingestion.timeparse import parse_timestamp, time_fields  # noqa: E402


def load(rel: str, **kw) -> list[Document]:
    return load_file(CORPUS / rel, source=rel, **kw)


def by_key(docs: list[Document]) -> dict[str, Document]:
    return {d.metadata["key"]: d for d in docs}


# -- ELOG --------------------------------------------------------------------------------
def test_elog_entries_headers_replies_and_html():
    docs = by_key(load("logbooks/ops.elog"))
    assert list(docs) == ["41", "42", "43"]
    first, reply, html = docs["41"], docs["42"], docs["43"]
    assert first.doc_id == "logbooks/ops.elog#41"
    assert first.metadata["doc_type"] == "elog"
    assert first.metadata["mid"] == "41"
    assert first.metadata["title"] == 'dc-pool-14 stuck in "disabled(fetch)" after restart'
    assert first.metadata["author"] == "Jane Doe"
    assert first.metadata["category"] == "Storage"
    assert first.metadata["entry_type"] == "Problem"
    assert first.metadata["created"] == "2026-02-03T07:12:45+01:00"
    assert first.metadata["created_ts"] == 1770099165
    assert isinstance(first.metadata["created_ts"], int)
    assert first.metadata["attachments"] == ["260203_071245/pool14-dmesg.txt", "260203_071245/pinboard.log"]
    assert first.metadata["replies"] == ["42"]
    assert first.metadata["in_reply_to"] is None
    assert "Unable to open Berkeley DB" in first.text
    assert reply.metadata["in_reply_to"] == "41"
    assert reply.metadata["parent_doc_id"] == "logbooks/ops.elog#41"
    assert "rm /srv/dcache/pool14/meta/je.lck" in reply.text
    assert "<p>" not in html.text and "3 times" in html.text and "maintenance & no impact" in html.text
    assert "%BGP-5-ADJCHANGE" in html.text


def test_elog_latin1_is_decoded_not_dropped():
    raw = ("$@MID@$: 7\nDate: Thu, 08 Jan 2026 03:17:44 +0100\nAuthor: Jürgen Müller\nSubject: Kühlungsalarm "
           "Salle B - côté nord\nEncoding: plain\n" + "=" * 40
           + "\nTempérature 27°C, Hochdruckstörung.\n").encode("latin-1")
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")
    result = load_bytes(raw, "logbooks/facility.elog")
    (doc,) = result.documents
    assert result.encoding in ("cp1252", "latin_1", "iso8859_15")
    assert doc.metadata["author"] == "Jürgen Müller"
    assert "Température 27°C, Hochdruckstörung." in doc.text
    assert doc.metadata["encoding"] == result.encoding


def test_elog_missing_separator_fails_that_entry_only():
    raw = (b"$@MID@$: 3\nDate: Thu, 08 Jan 2026 03:17:44 +0100\nSubject: x\nbody without separator\n"
           b"$@MID@$: 4\nSubject: fine\n" + b"=" * 40 + b"\nrestarted the door\n")
    result = load_bytes(raw, "x.elog")
    assert [d.metadata["key"] for d in result.documents] == ["4"]
    (failure,) = result.failures
    assert failure.where == "line 1" and "MID 3" in failure.reason


# -- shift logs ---------------------------------------------------------------------------
def test_shiftlog_grouped_by_header_with_identical_lines_kept():
    docs = by_key(load("shiftlogs/shift.log"))
    assert list(docs) == ["2026-02-03 morning", "2026-02-03 afternoon"]
    morning = docs["2026-02-03 morning"]
    assert morning.doc_id == "shiftlogs/shift.log#2026-02-03 morning"
    assert morning.metadata["author"] == "A. Rossi"
    assert morning.metadata["shift_window"] == "06:00-14:00"
    assert morning.text.count("2026-02-03 06:31 [BATCH] condor_q shows 1,204 idle jobs, negotiator OK.") == 2
    assert morning.metadata["n_lines"] == 6
    assert "(continuation line" in morning.text
    assert morning.metadata["labels"] == ["BATCH", "OPS", "STORAGE"]
    assert morning.metadata["created"] == "2026-02-03T06:02:00+00:00"
    assert morning.metadata["updated"] == "2026-02-03T13:58:00+00:00"


def test_shiftlog_without_headers_grouped_by_clock_window_and_timezone():
    docs = by_key(load("shiftlogs/noheader.log", config=LoaderConfig(default_timezone="Europe/Zurich")))
    assert list(docs) == ["2026-02-04 night", "2026-02-05 morning", "2026-02-05 afternoon", "2026-02-05 night"]
    assert "02:00 [FAC] UPS-2 self test passed" in docs["2026-02-05 night"].text
    assert docs["2026-02-05 morning"].metadata["created"] == "2026-02-05T06:10:00+01:00"
    custom = LoaderConfig(shift_starts=(("08:00", "day"), ("20:00", "night")))
    assert list(by_key(load("shiftlogs/noheader.log", config=custom))) == [
        "2026-02-04 night", "2026-02-05 day", "2026-02-05 night"]


def test_shiftlog_iso_timestamps_with_zone_use_local_shift_windows():
    raw = (b"2026-02-05T05:50:00Z [OPS] UTC 05:50 is 06:50 in Zurich\n"
           b"2026-02-05T04:30:00+00:00 [OPS] still night in Zurich\n")
    docs = by_key(load_bytes(raw, "s.log", config=LoaderConfig(default_timezone="Europe/Zurich")).documents)
    assert list(docs) == ["2026-02-05 morning", "2026-02-04 night"]
    assert docs["2026-02-05 morning"].metadata["created"] == "2026-02-05T05:50:00+00:00"


# -- Markdown -----------------------------------------------------------------------------
def test_markdown_front_matter_postmortem():
    (doc,) = load("postmortems/cvmfs.md")
    meta = doc.metadata
    assert doc.doc_id == "postmortems/cvmfs.md#PM-2026-02"
    assert meta["doc_type"] == "postmortem"
    assert meta["title"] == "CVMFS cache exhaustion on wn-c worker nodes"
    assert meta["severity"] == "SEV3"
    assert meta["services"] == ["CVMFS", "HTCondor"]
    assert meta["author"] == "Anna Kowalska, Tomasz Nowak"
    assert meta["tickets"] == ["OPS-107"]
    assert meta["start"] == "2026-02-02T07:50:00+00:00" and meta["created_ts"] == meta["start_ts"]
    assert meta["end_ts"] - meta["start_ts"] == 87000
    assert "cvmfs_config reload" in doc.text and "---" not in doc.text.splitlines()[0]


def test_markdown_without_front_matter_and_bad_yaml():
    (doc,) = load_bytes(b"# Runbook: restart FTS\n\nsystemctl restart fts-server\n", "runbooks/fts.md").documents
    assert doc.metadata["doc_type"] == "text" and doc.metadata["title"] == "Runbook: restart FTS"
    assert doc.doc_id == "runbooks/fts.md#fts"
    with pytest.raises(ParseError, match="front matter"):
        load_bytes(b"---\ntitle: [unclosed\n---\nbody\n", "pm.md")


# -- Jira ---------------------------------------------------------------------------------
def test_jira_fields_nulls_adf_and_comments():
    docs = by_key(load("tickets/jira.json"))
    assert list(docs) == ["OPS-107", "OPS-108", "OPS-109"]
    t107 = docs["OPS-107"]
    assert t107.metadata["doc_type"] == "jira" and t107.metadata["ticket_key"] == "OPS-107"
    assert t107.metadata["status"] == "Resolved" and t107.metadata["labels"] == ["cvmfs", "batch"]
    assert t107.metadata["assignee"] == "Anna Kowalska" and t107.metadata["components"] == ["Batch"]
    assert t107.metadata["created_ts"] == 1770023700
    assert "Raised CVMFS_QUOTA_LIMIT to 20000" in t107.text and "Anna Kowalska" in t107.text
    t108 = docs["OPS-108"]
    assert t108.metadata["priority"] is None and t108.metadata["assignee"] is None
    assert t108.metadata["labels"] == [] and t108.metadata["updated_ts"] is None
    assert "SRM_AUTHORIZATION_FAILURE for the lhcb pilot role" in t108.text
    assert "arcctl test-jobs --ce arc02.grid.lab.example" in t108.text
    t109 = docs["OPS-109"]
    assert t109.metadata["n_comments"] == 0 and "Renew host certificate" in t109.text


def test_truncated_and_unknown_json_are_reported():
    data = (CORPUS / "tickets/jira.json").read_bytes()
    with pytest.raises(ParseError, match="truncated JSON"):
        load_bytes(data[: len(data) // 2], "tickets/jira.json")
    with pytest.raises(UnsupportedFormatError, match="unrecognised JSON"):
        load_bytes(b'{"rows": [1, 2]}', "x.json")


# -- CSV ----------------------------------------------------------------------------------
def test_csv_default_mapping_multiline_and_quotes():
    docs = by_key(load("tickets/ggus.csv"))
    assert list(docs) == ["GGUS-170001", "GGUS-170002"]
    doc = docs["GGUS-170001"]
    assert doc.metadata["doc_type"] == "csv_ticket"
    assert doc.metadata["title"] == 'CMS: xrootd redirector timeouts, "Operation expired"'
    assert doc.metadata["site"] == "NORDLAB-T2" and doc.metadata["status"] == "solved"
    assert doc.metadata["created"] == "2026-02-01T09:10:00+00:00"
    assert "[ERROR] Operation expired\nSite reply: cmsd on xrd-rdr-02" in doc.text


def test_csv_custom_mapping_semicolons_and_extra_columns():
    raw = ("Ticket-ID;Standort;Betreff;Status;Eroeffnet;Aktualisiert;Beschreibung;Priority\n"
           "INC-9;CERN-PROD;\"Tape; robot stuck\";open;2026-02-01 10:00;;\"line1\nline2\";high\n").encode()
    cfg = LoaderConfig(csv_columns={"ticket_id": "Ticket-ID", "site": "Standort", "subject": "Betreff",
                                    "status": "Status", "opened": "Eroeffnet", "updated": "Aktualisiert",
                                    "description": "Beschreibung"})
    (doc,) = load_bytes(raw, "t.csv", config=cfg).documents
    assert doc.doc_id == "t.csv#INC-9" and doc.metadata["title"] == "Tape; robot stuck"
    assert doc.metadata["priority"] == "high" and doc.metadata["updated"] is None
    assert "line1\nline2" in doc.text
    (unmapped,) = load_bytes(raw, "t.csv").documents  # without the mapping: "Ticket-ID" is an obvious id column
    assert unmapped.doc_id == "t.csv#INC-9" and unmapped.metadata["status"] == "open"
    assert unmapped.metadata["betreff"] == "Tape; robot stuck"


# -- JSONL / text / detection -----------------------------------------------------------------
def test_jsonl_records_and_bad_line():
    docs = by_key(load("tickets/records.jsonl"))
    assert docs["KB-0001"].metadata["labels"] == ["dcache", "howto"]
    assert docs["KB-0002"].metadata["labels"] == ["certificates", "howto"]
    assert docs["KB-0001"].metadata["owner"] == '{"team": "storage"}'
    assert docs["KB-0002"].metadata["created"] == "2025-11-03T10:00:00+00:00"
    assert docs["KB-0001"].text.startswith("Draining dCache pools\n")
    result = load_bytes(b'{"id": "a", "text": "x"}\n{"id": "b", "te', "r.jsonl")
    assert [d.doc_id for d in result.documents] == ["r.jsonl#a"]
    (failure,) = result.failures
    assert failure.where == "line 2" and "invalid JSON" in failure.reason


def test_text_fallback_and_detection():
    (doc,) = load("misc/notes.txt")
    assert doc.doc_id == "misc/notes.txt#notes.txt" and doc.metadata["doc_type"] == "text"
    assert detect_format("a.log", "$@MID@$: 1\nDate: x\n") == "elog"
    assert detect_format("a.txt", "2026-01-01 06:00 [OPS] a\n2026-01-01 07:00 b\n") == "shiftlog"
    assert detect_format("dump", '{"issues": []}') == "json"
    assert detect_format("dump", '{"id": 1, "text": "a"}\n{"id": 2, "text": "b"}\n') == "jsonl"
    assert detect_format("x", "---\ntitle: a\n---\nbody") == "markdown"
    assert detect_format("x.txt", "just words") == "text"


# -- bad and edge input -------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [b"", b"   \n\t\r\n  ", "\ufeff \n".encode("utf-8")])
def test_empty_and_whitespace_files_yield_no_documents(raw):
    result = load_bytes(raw, "empty.log")
    assert result.documents == [] and result.format == "empty"


def test_binary_files_are_rejected():
    with pytest.raises(BinaryFileError, match="NUL"):
        load_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image.dat")
    with pytest.raises(BinaryFileError, match="not ingested"):
        load_bytes(b"%PDF-1.7 ...", "report.pdf")
    assert decode_bytes("UTF-16 text ü".encode("utf-16")).text == "UTF-16 text ü"


def test_special_character_keys_stay_distinct():
    records = [{"id": key, "text": f"ticket {key}"} for key in ("OPS/12", "OPS:12", "OPS 12", "ops-12#1")]
    raw = "\n".join(json.dumps(r) for r in records).encode()
    docs = load_bytes(raw, "tickets/odd.jsonl").documents
    assert [d.doc_id for d in docs] == ["tickets/odd.jsonl#OPS/12", "tickets/odd.jsonl#OPS:12",
                                        "tickets/odd.jsonl#OPS 12", "tickets/odd.jsonl#ops-12#1"]
    assert len({d.content_hash for d in docs}) == 4
    chunk_ids = {make_chunk_id(d.doc_id, i) for d in docs for i in range(3)}
    assert len(chunk_ids) == 12


def test_duplicate_keys_in_one_file_are_kept_with_suffix():
    raw = b'{"id": "A", "text": "one"}\n{"id": "A", "text": "two"}\n'
    result = load_bytes(raw, "d.jsonl")
    assert [d.doc_id for d in result.documents] == ["d.jsonl#A", "d.jsonl#A~2"]
    assert result.warnings and "duplicate key" in result.warnings[0]


def test_identical_files_are_distinct_documents():
    raw = (CORPUS / "tickets/ggus.csv").read_bytes()
    a = load_bytes(raw, "a/ggus.csv").documents
    b = load_bytes(raw, "b/ggus.csv").documents
    assert {d.doc_id for d in a}.isdisjoint({d.doc_id for d in b})


# -- helpers ------------------------------------------------------------------------------------
def test_doc_ids_and_hash_are_stable():
    assert make_doc_id("a/b.csv", "OPS 12") == "a/b.csv#OPS 12"
    with pytest.raises(ValueError):
        make_doc_id("a.csv", "")
    d1 = Document("x#1", "t", {"b": 1, "a": [1, 2]})
    d2 = Document("x#1", "t", {"a": [1, 2], "b": 1})
    assert d1.content_hash == d2.content_hash
    assert d1.content_hash != Document("x#1", "t ", {"a": [1, 2], "b": 1}).content_hash


def test_timestamps():
    assert parse_timestamp("2026-01-20T06:04:11.000+0100").isoformat() == "2026-01-20T06:04:11+01:00"
    assert parse_timestamp("Mon, 12 Jan 2026 08:14:03 +0100").isoformat() == "2026-01-12T08:14:03+01:00"
    assert parse_timestamp("20/01/2026 06:04").isoformat() == "2026-01-20T06:04:00+00:00"
    assert parse_timestamp(1768000000000).timestamp() == 1768000000
    assert parse_timestamp("soon") is None
    assert time_fields("created", "soon") == {"created_ts": None, "created": "soon"}


def test_fts_query_neutralises_user_syntax():
    assert fts_query('OPS-107') == '"OPS 107"'
    assert fts_query("SRM_AUTHORIZATION_FAILURE") == '"SRM AUTHORIZATION FAILURE"'
    assert fts_query('how was "x" fixed: NOT (a OR b*)') == '"x" OR "fixed" OR "NOT" OR "b"'
    assert fts_query("?? -- ::") is None
    assert fts_query("the") == '"the"'


def test_metadata_sanitising_and_where():
    meta = {"a": None, "b": [], "c": ["x", 1], "d": {"k": 1}, "e": True, "f": 1.5}
    assert sanitize_metadata(meta) == {"c": ["x", "1"], "d": '{"k": 1}', "e": True, "f": 1.5}
    odd = {"": 1, "#a": 2, "$b": 3, "chroma:c": 4, "n": float("nan"), "big": 2**70, "ok key/x": 5}
    assert sanitize_metadata(odd) == {"x_": 1, "x_#a": 2, "x_$b": 3, "x_chroma:c": 4, "big": str(2**70),
                                      "ok key/x": 5}
    assert build_where(None) is None and build_where(SearchFilter()) is None
    assert build_where(SearchFilter(ticket_key="OPS/12")) == {"key": {"$eq": "OPS/12"}}
    where = build_where(SearchFilter(doc_types=("jira",), since_ts=1, until_ts=2))
    assert where == {"$and": [{"doc_type": {"$in": ["jira"]}}, {"created_ts": {"$gte": 1}},
                              {"created_ts": {"$lte": 2}}]}
