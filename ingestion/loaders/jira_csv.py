"""Jira's own CSV export ("Export → CSV (all fields)"), one document per issue.

The export has one column per field, named as Jira shows it (``Summary``, ``Issue key``,
``Issue id``, ``Issue Type``, ``Status``, ``Priority``, ``Resolution``, ``Assignee``,
``Reporter``, ``Created``, ``Updated``, ``Resolved``, ``Description``, ``Project name``,
``Custom field (Site)`` ...), and repeats a column for each value of a multi-valued field:
``Labels``, ``Component/s`` and ``Comment``. A comment cell is ``when;author;body``
(``01/Mar/24 10:15 AM;jdoe;Restarted the pool``; the body may hold ``;`` and newlines); a
cell that does not start with a time stamp is the body alone. Dates are Jira's
``dd/MMM/yy h:mm a`` (``01/Mar/24 10:15 AM``), read in the loader's default time zone.

Each row becomes a :class:`ingestion.loaders.jira.JiraIssue`, so its document is the one the
REST JSON of the same issue gives (doc type ``jira``). A row without an ``Issue key`` fails
alone (``line N``).
"""

from __future__ import annotations

from collections import defaultdict

from ingestion.loaders.base import DocumentBuilder, LoaderConfig, LoadResult, clean_str, require_key
from ingestion.loaders.csv_table import CsvTable, header_key
from ingestion.loaders.jira import JiraComment, JiraIssue, add_issue
from ingestion.timeparse import parse_timestamp

#: Header names (see :func:`header_key`) that make a CSV a Jira export.
REQUIRED = ("issue key", "summary")


def is_jira_header(header: list[str]) -> bool:
    """True when ``header`` has Jira's ``Issue key`` and ``Summary`` columns."""
    keys = {header_key(name) for name in header}
    return all(name in keys for name in REQUIRED)


def parse_comment(cell: str) -> JiraComment | None:
    """A ``when;author;body`` comment cell as a :class:`JiraComment` (None for a blank cell).

    A cell whose first part is not a time stamp is kept whole as the body (author and time unknown).
    """
    text = cell.strip()
    if not text:
        return None
    parts = text.split(";", 2)
    if len(parts) == 3 and parse_timestamp(parts[0].strip()) is not None:
        when, who, body = (p.strip() for p in parts)
        return JiraComment(clean_str(who), clean_str(when), body)
    return JiraComment(None, None, text)


class _Row:
    """One export row read by column name (case- and punctuation-insensitive, see :func:`header_key`)."""

    def __init__(self, positions: dict[str, list[int]], cells: list[str]) -> None:
        self.positions = positions
        self.cells = cells

    def cell(self, name: str) -> str | None:
        """The cell of the first column called ``name``, as written (None when there is no such column)."""
        positions = self.positions.get(name)
        return self.cells[positions[0]] if positions else None

    def one(self, *names: str) -> str | None:
        """The first non-blank cell of the first of ``names`` the export has a value for."""
        for name in names:
            for pos in self.positions.get(name, ()):
                value = clean_str(self.cells[pos])
                if value:
                    return value
        return None

    def every(self, name: str) -> list[str]:
        """The non-blank cells of every column called ``name`` (a repeated column), as written."""
        return [self.cells[pos] for pos in self.positions.get(name, ()) if self.cells[pos].strip()]


def _issue(row: _Row) -> JiraIssue:
    """The :class:`JiraIssue` of one export row.

    Raises:
        RecordError: the ``Issue key`` cell is empty or blank.
    """
    key = require_key(row.cell("issue key"), "'Issue key'").strip()
    comments = [c for c in (parse_comment(cell) for cell in row.every("comment")) if c is not None]
    return JiraIssue(
        key=key, summary=row.one("summary") or "", description=(row.one("description") or "").strip(),
        jira_id=row.one("issue id"), status=row.one("status"), priority=row.one("priority"),
        resolution=row.one("resolution"), assignee=row.one("assignee"), reporter=row.one("reporter"),
        issue_type=row.one("issue type"), project=row.one("project name", "project key"),
        site=row.one("site", "custom field site"),
        labels=[cell.strip() for cell in row.every("labels")],
        components=[cell.strip() for cell in row.every("component s") + row.every("components")],
        created=row.one("created"), updated=row.one("updated"), resolved=row.one("resolved"),
        comments=comments)


def load_table(table: CsvTable, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """Build one ``jira`` document per row of a Jira CSV export already opened as ``table``.

    Rows of the wrong width and rows without an ``Issue key`` are failed records; the others
    are still returned.
    """
    positions: dict[str, list[int]] = defaultdict(list)
    for pos, name in enumerate(table.header):
        positions[header_key(name)].append(pos)
    builder = DocumentBuilder(source, "jira", encoding=encoding)
    for record in table.records(builder.fail):
        with builder.record(record.where):
            add_issue(builder, _issue(_Row(positions, record.cells)), config)
    return builder.result("jira_csv")
