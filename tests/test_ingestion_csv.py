"""CSV loaders (issue #22 item 6): Jira's own CSV export, generic CSVs with an obvious id column,
standard quoting (no sniffed ``doublequote=False``), rows of the wrong width as failed records.
Real files and the real pipeline; only the embedder is the model-free test one."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import FIXTURES, HashEmbedder  # noqa: E402

from ingestion.errors import ParseError  # noqa: E402
from ingestion.loaders import LoaderConfig, load_bytes  # noqa: E402
from ingestion.loaders.csv_table import choose_delimiter  # noqa: E402
from ingestion.loaders.jira_csv import parse_comment  # noqa: E402
from ingestion.pipeline import ingest_paths  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402

JIRA_EXPORT = FIXTURES / "exports" / "jira_export.csv"

#: The issue's case: a valid CSV whose quoted multi-line field holds ""-escaped quotes.
DOUBLED_QUOTES = (
    'ticket_id,site,subject,status,opened,updated,description\n'
    'GGUS-1,CERN,"disk full, pool dc-pool-07",open,2026-01-20 10:00,,"Pool dc-pool-07 reports:\n'
    'ERROR ""No space left on device"", writes refused\n'
    'Site reply: cleaned old files, pool enabled again."\n'
    'GGUS-2,RAL,link down,solved,2026-01-21 08:00,,fibre swapped\n'
)

#: A row with an unquoted comma in its description: 8 fields under a 7-column header.
WRONG_WIDTH = (
    "ticket_id,site,subject,status,opened,updated,description\n"
    "GGUS-1,CERN,disk full,open,2026-01-20,,cleaned\n"
    "GGUS-2,FNAL,link down,open,2026-01-20,,fibre cut, splice booked\n"
    "GGUS-3,RAL,tape stuck,solved,2026-01-21,,gripper replaced\n"
)


def by_key(result):
    return {d.metadata["key"]: d for d in result.documents}


@pytest.fixture
def hash_store(tmp_path):
    store = ChunkStore(tmp_path / "store", embedder=HashEmbedder(), collection="csv-test")
    yield store
    store.close()


# -- Jira's CSV export ------------------------------------------------------------------------
def test_jira_csv_export_is_read_as_jira_issues():
    result = load_bytes(JIRA_EXPORT.read_bytes(), "tickets/jira_export.csv")
    assert result.format == "jira_csv" and result.failures == []
    docs = by_key(result)
    assert list(docs) == ["OPS-201", "OPS-202", "OPS-203", "OPS-204"]
    pool = docs["OPS-201"]
    assert pool.doc_id == "tickets/jira_export.csv#OPS-201" and pool.metadata["doc_type"] == "jira"
    assert pool.metadata["title"] == "dCache pool dc-pool-07 read-only after disk full"
    assert pool.metadata["status"] == "Done" and pool.metadata["priority"] == "High"
    assert pool.metadata["resolution"] == "Fixed" and pool.metadata["jira_id"] == "10452"
    assert pool.metadata["assignee"] == "A. Rossi" and pool.metadata["author"] == "M. Keller"
    assert pool.metadata["labels"] == ["dcache", "storage"] and pool.metadata["components"] == ["dCache", "Storage"]
    assert pool.metadata["site"] == "NORDLAB-T2" and pool.metadata["issue_type"] == "Incident"
    assert pool.metadata["created"] == "2024-03-01T09:05:00+00:00"
    assert pool.metadata["updated"] == "2024-03-02T16:40:00+00:00"
    assert pool.metadata["resolved"] == "2024-03-02T16:38:00+00:00"
    assert pool.metadata["n_comments"] == 3
    assert pool.text.startswith("OPS-201: dCache pool dc-pool-07 read-only after disk full\n"
                                "Status: Done · Priority: High · Resolution: Fixed · Assignee: A. Rossi\n")
    assert '{code}\n[ERROR] pool dc-pool-07: "No space left on device"\n{code}' in pool.text
    assert ("[01/Mar/24 10:15 AM arossi] Pool is 100% full; a stuck cleaner left 4 TB of precious replicas."
            in pool.text)
    assert "[01/Mar/24 2:30 PM arossi] Cleaner restarted, 3.8 TB freed.\nPool back to read-write:" in pool.text
    assert "[02/Mar/24 4:38 PM mkeller] FTS queue drained, closing." in pool.text
    quiet = docs["OPS-203"]
    assert quiet.metadata["n_comments"] == 0 and "Comments:" not in quiet.text
    assert quiet.metadata["resolved"] is None and quiet.metadata["assignee"] is None
    assert docs["OPS-202"].metadata["title"] == 'ARC CE arc02 rejects pilots with "SRM_AUTHORIZATION_FAILURE"'


def test_a_jira_csv_row_gives_the_document_its_rest_json_gives():
    header, *rows = list(csv.reader(JIRA_EXPORT.open(newline="", encoding="utf-8")))
    row = dict(zip(header, rows[3], strict=True))  # OPS-204; of a repeated column the dict keeps the last
    comments = [c for c in rows[3][header.index("Comment"):] if c]
    issue = {"key": row["Issue key"], "id": row["Issue id"], "fields": {
        "summary": row["Summary"], "description": row["Description"], "status": {"name": row["Status"]},
        "priority": {"name": row["Priority"]}, "resolution": {"name": row["Resolution"]},
        "assignee": {"displayName": row["Assignee"]}, "reporter": {"displayName": row["Reporter"]},
        "issuetype": {"name": row["Issue Type"]}, "project": {"name": row["Project name"]},
        "site": row["Custom field (Site)"], "labels": ["tape", "robot"], "components": [{"name": "Tape"}],
        "created": row["Created"], "updated": row["Updated"], "resolutiondate": row["Resolved"],
        "comment": {"comments": [{"created": c.split(";")[0], "author": {"displayName": c.split(";")[1]},
                                  "body": c.split(";", 2)[2]} for c in comments]}}}
    (from_json,) = load_bytes(json.dumps({"issues": [issue]}).encode(), "tickets/ops", name="ops.json").documents
    from_csv = by_key(load_bytes(JIRA_EXPORT.read_bytes(), "tickets/ops", name="ops.csv"))["OPS-204"]
    assert from_csv.text == from_json.text
    assert from_csv.metadata == from_json.metadata


def test_a_jira_csv_row_without_issue_key_fails_alone():
    header = "Summary,Issue key,Issue id,Status,Created,Description,Comment,Comment\n"
    raw = (header + "Disk full,OPS-1,1,Done,01/Mar/24 9:05 AM,cleaned,01/Mar/24 10:15 AM;jdoe;freed 2 TB,\n"
                    "No key,,2,Open,01/Mar/24 9:06 AM,lost?,,\n"
                    "Link down,OPS-3,3,Open,02/Mar/24 8:00 AM,fibre,,\n").encode()
    result = load_bytes(raw, "jira.csv")
    assert list(by_key(result)) == ["OPS-1", "OPS-3"]
    (failure,) = result.failures
    assert failure.where == "line 3" and "empty or blank 'Issue key'" in failure.reason


def test_jira_comment_cells():
    comment = parse_comment("01/Mar/24 10:15 AM;jdoe;restarted; pool ok\nsecond line")
    assert (comment.created, comment.author, comment.body) == ("01/Mar/24 10:15 AM", "jdoe",
                                                               "restarted; pool ok\nsecond line")
    bare = parse_comment("no time stamp; just text")
    assert (bare.created, bare.author, bare.body) == (None, None, "no time stamp; just text")
    assert parse_comment("  ") is None


def test_an_explicit_id_mapping_reads_a_jira_export_as_a_plain_csv():
    cfg = LoaderConfig(csv_columns={"ticket_id": "Issue id", "subject": "Summary"})
    result = load_bytes(JIRA_EXPORT.read_bytes(), "j.csv", config=cfg)
    assert result.format == "csv" and list(by_key(result)) == ["10452", "10453", "10454", "10455"]


# -- generic CSVs: an obvious id column needs no mapping -------------------------------------------
@pytest.mark.parametrize("header", ["id", "Key", "Ticket ID", "number", "TICKET", "Incident Number", "GGUS ID"])
def test_a_csv_with_an_obvious_id_column_needs_no_mapping(header):
    raw = (f"{header},title,state,created,body,owner\n"
           "INC-7,Tape robot stuck,open,2026-02-01 10:00,\"drive 3 offline\nvendor called\",ops\n"
           "INC-8,Link down,closed,2026-02-02 08:00,fibre swapped,net\n").encode()
    result = load_bytes(raw, "export.csv")
    assert result.failures == [] and list(by_key(result)) == ["INC-7", "INC-8"]
    doc = by_key(result)["INC-7"]
    assert doc.metadata["doc_type"] == "csv_ticket" and doc.metadata["title"] == "Tape robot stuck"
    assert doc.metadata["status"] == "open" and doc.metadata["created"] == "2026-02-01T10:00:00+00:00"
    assert doc.metadata["owner"] == "ops"
    assert doc.text == "INC-7: Tape robot stuck\nStatus: open\n\ndrive 3 offline\nvendor called"


def test_an_explicit_mapping_wins_over_an_obvious_column():
    raw = b"id,ref,subject\n1,GGUS-501,disk full\n2,GGUS-502,link down\n"
    assert list(by_key(load_bytes(raw, "t.csv"))) == ["1", "2"]
    mapped = load_bytes(raw, "t.csv", config=LoaderConfig(csv_columns={"ticket_id": "ref", "subject": "subject"}))
    assert list(by_key(mapped)) == ["GGUS-501", "GGUS-502"] and by_key(mapped)["GGUS-501"].metadata["id"] == "1"
    with pytest.raises(ParseError, match=r"no ticket id column 'Vorgang' \(columns: id, ref, subject\)"):
        load_bytes(raw, "t.csv", config=LoaderConfig(csv_columns={"ticket_id": "Vorgang"}))


def test_a_csv_without_an_obvious_id_column_fails_naming_its_columns():
    raw = b"host,message,when\nwn-01,disk full,2026-02-01\n"
    with pytest.raises(ParseError, match=r"no ticket id column 'ticket_id' nor an id, key, ticket or number column "
                                         r"\(columns: host, message, when\); set the column mapping"):
        load_bytes(raw, "t.csv")


# -- standard quoting; rows of the wrong width ------------------------------------------------
def test_doubled_quotes_in_a_multiline_field_are_one_row_not_junk_documents():
    assert csv.Sniffer().sniff(DOUBLED_QUOTES, delimiters=",;\t|").doublequote is False  # what the sniffer guessed
    result = load_bytes(DOUBLED_QUOTES.encode(), "tickets/ggus.csv")
    assert result.failures == [] and list(by_key(result)) == ["GGUS-1", "GGUS-2"]
    doc = by_key(result)["GGUS-1"]
    assert doc.metadata["title"] == "disk full, pool dc-pool-07" and doc.metadata["status"] == "open"
    assert doc.text.endswith('Pool dc-pool-07 reports:\nERROR "No space left on device", writes refused\n'
                             "Site reply: cleaned old files, pool enabled again.")


def test_a_row_of_the_wrong_width_is_a_failed_record():
    result = load_bytes(WRONG_WIDTH.encode(), "tickets/ggus.csv")
    assert list(by_key(result)) == ["GGUS-1", "GGUS-3"]
    (failure,) = result.failures
    assert failure.where == "line 3" and "row has 8 fields, the header has 7" in failure.reason


def test_an_unbalanced_quote_fails_its_row_with_the_lines_it_swallowed():
    raw = ("ticket_id,subject,description\n"
           "T-1,ok,fine\n"
           'T-2,bad,"opened but never closed\n'
           "T-3,lost,inside the quote\n").encode()
    result = load_bytes(raw, "t.csv")
    assert list(by_key(result)) == ["T-1"]
    (failure,) = result.failures
    assert failure.where == "line 3" and "(lines 3-4)" in failure.reason and "never closed" in failure.reason


def test_text_after_a_closing_quote_fails_its_row_and_the_next_rows_are_read():
    raw = b'ticket_id,subject,description\nT-1,ok,fine\nT-2,bad,"he said "hi" there"\nT-3,fine,"multi\nline"\n'
    result = load_bytes(raw, "t.csv")
    assert list(by_key(result)) == ["T-1", "T-3"] and by_key(result)["T-3"].text.endswith("multi\nline")
    (failure,) = result.failures
    assert failure.where == "line 3" and "text after a closing quote" in failure.reason


@pytest.mark.parametrize("delimiter", [",", ";", "\t", "|"])
def test_the_delimiter_is_chosen_among_four(delimiter):
    other = {",": ";", ";": ",", "\t": ",", "|": ";"}[delimiter]
    lines = [delimiter.join(["id", "subject", "description"]),
             delimiter.join(["T-1", f"a{other}b", '"x ""y""\nz"']),
             delimiter.join(["T-2", "c", "d"])]
    text = "\n".join(lines) + "\n"
    assert choose_delimiter(text) == delimiter
    docs = by_key(load_bytes(text.encode(), "t.csv"))
    assert docs["T-1"].metadata["title"] == f"a{other}b" and docs["T-1"].text.endswith('x "y"\nz')


def test_the_pipeline_reports_wrong_width_rows_and_stores_the_others(hash_store, tmp_path):
    src = tmp_path / "tickets"
    src.mkdir()
    (src / "ggus.csv").write_text(WRONG_WIDTH, encoding="utf-8")
    (src / "quotes.csv").write_text(DOUBLED_QUOTES, encoding="utf-8")
    (src / "jira_export.csv").write_bytes(JIRA_EXPORT.read_bytes())
    report = ingest_paths([src], hash_store, progress=False)
    files = {f.source: f for f in report.files}
    assert files["ggus.csv"].status == "indexed" and files["ggus.csv"].documents == 2
    assert files["ggus.csv"].failed_records == [{"where": "line 3", "reason": files["ggus.csv"].failed_records[0]
                                                 ["reason"]}]
    assert "row has 8 fields" in files["ggus.csv"].failed_records[0]["reason"]
    assert files["quotes.csv"].documents == 2 and files["quotes.csv"].failed_records == []
    assert files["jira_export.csv"].format == "jira_csv" and files["jira_export.csv"].documents == 4
    assert report.failed_records == 1
    stored = {r["doc_id"] for r in hash_store.manifest.page(0, 100)[0]}
    assert stored == {"ggus.csv#GGUS-1", "ggus.csv#GGUS-3", "quotes.csv#GGUS-1", "quotes.csv#GGUS-2",
                      *(f"jira_export.csv#OPS-20{i}" for i in range(1, 5))}
