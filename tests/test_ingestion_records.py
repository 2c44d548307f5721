"""Issue #14 (ingestion, loaders): a bad record fails alone, in every loader; keys as written;
CSV dialects, ELOG HTML tables and Latin-1 detection. Real files, no model needed."""

from __future__ import annotations

import json

import pytest

from ingestion.loaders import load_bytes
from ingestion.textio import decode_bytes

SEP = "=" * 40


def _elog_entry(mid: str, subject: str, body: str, extra: str = "") -> str:
    return f"$@MID@$: {mid}\nDate: Thu, 08 Jan 2026 03:17:44 +0100\nSubject: {subject}\n{extra}{SEP}\n{body}\n"


def _jira(*issues) -> bytes:
    return json.dumps({"issues": list(issues)}).encode()


def _issue(key, summary="disk full on dc-pool-07"):
    return {"key": key, "fields": {"summary": summary, "description": "cleaned /var/tmp"}}


# One file per format: good records around bad ones. Each case lists the bad records'
# positions as the report shows them and a word of the reason.
CASES = {
    "jira empty key": ("tickets/jira.json", _jira(_issue("OPS-1"), _issue(""), _issue("OPS-3")),
                       ["OPS-1", "OPS-3"], [("issues[1]", "empty or blank 'key'")]),
    "jira blank key, no key, not an object, bad fields": (
        "tickets/jira.json",
        _jira(_issue("OPS-1"), _issue("   "), {"fields": {"summary": "x"}}, "OPS-9",
              {"key": "OPS-5", "fields": ["not", "an", "object"]}, _issue("OPS-6")),
        ["OPS-1", "OPS-6"],
        [("issues[1]", "blank"), ("issues[2]", "missing 'key'"), ("issues[3]", "expected an issue object"),
         ("issues[4]", "'fields' is not an object")]),
    "jsonl empty id": ("kb/records.jsonl",
                       b'{"id": "KB-1", "text": "drain a pool"}\n{"id": "", "text": "lost?"}\n'
                       b'{"id": "KB-3", "text": "renew a host cert"}\n',
                       ["KB-1", "KB-3"], [("line 2", "empty or blank 'id'")]),
    "jsonl malformed lines": ("kb/records.jsonl",
                              b'{"id": "KB-1", "text": "a"}\n[1, 2]\n{"id": "KB-3"}\n{"id": null, "text": "x"}\n'
                              b'{"id": "KB-5", "text": "b"}\n{"id": "KB-6", "te',
                              ["KB-1", "KB-5"],
                              [("line 2", "expected a JSON object"), ("line 3", "no string 'text'"),
                               ("line 4", "missing 'id'"), ("line 6", "invalid JSON")]),
    "json array empty id": ("kb/records.json",
                            json.dumps([{"id": "A", "text": "a"}, {"id": " ", "text": "b"},
                                        {"id": "C", "text": "c"}]).encode(),
                            ["A", "C"], [("[1]", "empty or blank 'id'")]),
    "elog entry without MID": ("logbooks/ops.elog",
                               (_elog_entry("41", "first", "pool restarted") + _elog_entry("", "no mid", "lost?")
                                + _elog_entry("43", "third", "link up")).encode(),
                               ["41", "43"], [("line 6", "without an entry number")]),
    "elog stray header line": ("logbooks/ops.elog",
                               (_elog_entry("41", "first", "a") + _elog_entry("42", "bad", "b", "no colon here\n")
                                + _elog_entry("43", "third", "c")).encode(),
                               ["41", "43"], [("line 6", "expected 'Name: value'")]),
    "csv blank ticket id": ("tickets/ggus.csv",
                            b"ticket_id,site,subject,status,opened,updated,description\n"
                            b"GGUS-1,CERN,disk full,open,2026-01-20,,cleaned\n"
                            b"  ,FNAL,no id,open,2026-01-20,,\"multi\nline\"\n"
                            b"GGUS-3,RAL,link down,solved,2026-01-21,,fibre swapped\n",
                            ["GGUS-1", "GGUS-3"], [("line 3", "empty or blank ticket id")]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_record_fails_alone_with_its_position_and_reason(case):
    source, raw, good, bad = CASES[case]
    result = load_bytes(raw, source)
    assert [d.metadata["key"] for d in result.documents] == good
    assert [f.where for f in result.failures] == [where for where, _ in bad]
    for failure, (_, word) in zip(result.failures, bad):
        assert word in failure.reason, failure


def test_a_file_whose_every_record_is_bad_gives_no_documents_and_the_failures():
    result = load_bytes(_jira(_issue(""), _issue(" ")), "t.json")
    assert result.documents == [] and [f.where for f in result.failures] == ["issues[0]", "issues[1]"]


def test_csv_200000_character_field_is_kept_whole_and_the_other_rows_too():
    huge = "ERR pool dc-pool-07 " * 10_000  # 200,000 characters, over the csv module's 131,072 default
    assert len(huge) == 200_000
    raw = ("ticket_id,site,subject,status,opened,updated,description\n"
           "GGUS-1,CERN,disk full,open,2026-01-20,,cleaned\n"
           f'GGUS-2,FNAL,huge log,open,2026-01-20,,"{huge}"\n'
           "GGUS-3,RAL,link down,solved,2026-01-21,,fibre swapped\n").encode()
    result = load_bytes(raw, "tickets/ggus.csv")
    assert result.failures == []
    docs = {d.metadata["key"]: d for d in result.documents}
    assert list(docs) == ["GGUS-1", "GGUS-2", "GGUS-3"]
    assert huge.strip() in docs["GGUS-2"].text


@pytest.mark.parametrize("newline", ["\r\n", "\n"])
def test_csv_semicolons_with_crlf_and_quoted_fields(newline):
    lines = ["ticket_id;site;subject;status;opened;updated;description",
             'GGUS-1;CERN;"tape; robot stuck";open;2026-01-20 10:00;;"first line' + newline + 'second line"',
             "GGUS-2;FNAL;link down;solved;2026-01-21 08:00;;fibre swapped"]
    raw = (newline.join(lines) + newline).encode()
    result = load_bytes(raw, "tickets/export.csv")
    docs = {d.metadata["key"]: d for d in result.documents}
    assert list(docs) == ["GGUS-1", "GGUS-2"] and result.failures == []
    assert docs["GGUS-1"].metadata["title"] == "tape; robot stuck" and docs["GGUS-1"].metadata["site"] == "CERN"
    assert "first line" in docs["GGUS-1"].text and "second line" in docs["GGUS-1"].text
    assert docs["GGUS-2"].metadata["status"] == "solved"


def test_elog_html_table_keeps_cell_boundaries():
    body = ("<p>Pool states after the restart:</p><table><tr><th>Pool</th><th>State</th></tr>"
            "<tr><td>dc-pool-07</td><td>disabled(fetch)</td></tr><tr><td>dc-pool-08</td><td>enabled</td></tr>"
            "</table><p>Ticket OPS-107.</p>")
    (doc,) = load_bytes(_elog_entry("7", "pools", body, "Encoding: HTML\n").encode(), "ops.elog").documents
    assert "Pool | State\ndc-pool-07 | disabled(fetch)\ndc-pool-08 | enabled" in doc.text
    assert "dc-pool-07disabled" not in doc.text and "Ticket OPS-107." in doc.text


def test_latin1_is_reported_as_iso_8859_1_and_cp1252_only_with_its_own_bytes():
    latin = "Author: Jürgen Müller, Température 27°C".encode("latin-1")
    assert decode_bytes(latin).encoding == "latin_1"
    cp = "Müller “quoted” – 27 €".encode("cp1252")  # bytes 0x80-0x9F: only cp1252 has these characters
    decoded = decode_bytes(cp)
    assert decoded.encoding == "cp1252" and decoded.text == "Müller “quoted” – 27 €"


# -- Markdown front matter: keys and scalars as written ------------------------------------------
def test_front_matter_id_007_stays_007_and_dates_still_parse():
    raw = (b"---\nid: 007\ntitle: Cooling failure\nstart: 2026-01-20 06:04\nend: 2026-01-20T08:30:00+01:00\n"
           b"severity: 2\ntickets: [007, OPS-107]\nversion: 1.10\npublic: yes\nowner:\n---\n# Cooling\nfixed\n")
    (doc,) = load_bytes(raw, "pm/cooling.md").documents
    meta = doc.metadata
    assert doc.doc_id == "pm/cooling.md#007" and meta["key"] == "007"
    assert meta["start"] == "2026-01-20T06:04:00+00:00" and meta["created_ts"] == meta["start_ts"]
    assert meta["end"] == "2026-01-20T08:30:00+01:00" and meta["end_ts"] - meta["start_ts"] == 5160
    assert meta["severity"] == "2" and meta["tickets"] == ["007", "OPS-107"]
    assert meta["version"] == "1.10" and meta["public"] == "yes" and meta.get("owner") is None


@pytest.mark.parametrize("written", ["0x1F", "1e3", "2026-01-20", "true", "+12", "0o17", "1_000", ".inf"])
def test_front_matter_keys_that_yaml_would_retype_stay_as_written(written):
    (doc,) = load_bytes(f"---\nid: {written}\n---\nbody\n".encode(), "pm/x.md").documents
    assert doc.metadata["key"] == written and doc.doc_id == f"pm/x.md#{written}"


def test_front_matter_string_loader_does_not_change_yaml_safe_load():
    import yaml

    from ingestion.loaders.markdown import load_front_matter

    assert load_front_matter("id: 007\nn: ~\n") == {"id": "007", "n": None}
    assert yaml.safe_load("id: 007") == {"id": 7}  # the stock loader is untouched
