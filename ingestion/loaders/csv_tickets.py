"""CSV ticket exports, one document per row: GGUS-style and generic CSVs, and Jira's own CSV export.

The file is read by :class:`ingestion.loaders.csv_table.CsvTable` (standard quoting, the
delimiter among ``, ; TAB |``; a row of the wrong width is a failed record). A header with
``Issue key`` and ``Summary`` is Jira's "Export → CSV" and goes to
:mod:`ingestion.loaders.jira_csv`, unless the column mapping names the ticket-id column.

Columns: the mapping (:attr:`LoaderConfig.csv_columns`; default headers
``ticket_id,site,subject,status,opened,updated,description``) names the column of each
logical field; headers match case-insensitively. A field whose column is the default one and
absent from the file takes the first of its :data:`OBVIOUS_COLUMNS` the header has (compared
lower case with runs of other characters as one space: ``Ticket-ID`` is ``ticket id``), so a
CSV with an ``id``, ``key``, ``ticket`` or ``number`` column needs no mapping. A mapping set
explicitly always wins. Unmapped columns are kept as metadata. A row with an empty or blank
ticket id fails alone (``line N``, the row's first line; see :mod:`ingestion.loaders.base`).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from ingestion.errors import ParseError, RecordError
from ingestion.loaders import jira_csv
from ingestion.loaders.base import (
    DEFAULT_CSV_COLUMNS,
    DocumentBuilder,
    LoaderConfig,
    LoadResult,
    as_str_list,
    clean_str,
)
from ingestion.loaders.csv_table import CsvRecord, CsvTable, header_key
from ingestion.timeparse import time_fields

log = logging.getLogger(__name__)

#: Header names (as :func:`header_key` writes them) taken, in this order, for a logical field
#: whose column is the default one and absent from the file.
OBVIOUS_COLUMNS: dict[str, tuple[str, ...]] = {
    "ticket_id": ("ticket id", "ticket", "ticket key", "ticket number", "ticket no", "key", "id", "number",
                  "issue key", "issue id", "incident id", "incident number", "case id", "case number"),
    "subject": ("subject", "summary", "title", "short description"),
    "description": ("description", "body", "details", "text", "content"),
    "status": ("status", "state"),
    "site": ("site",),
    "opened": ("opened", "created", "opened at", "created at", "date"),
    "updated": ("updated", "updated at", "modified", "last updated", "last modified"),
}
#: Last words that make a header an id column when none of the names above is there (``GGUS ID``).
_ID_SUFFIXES = ("id", "key", "number")


def load(text: str, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """Parse a CSV ticket export into one document per row; bad rows fail alone.

    Raises:
        ParseError: the file is empty, its header row cannot be read, or it has no ticket-id column.
    """
    columns = {**config.csv_columns}
    explicit_id = columns.get("ticket_id", "ticket_id") != DEFAULT_CSV_COLUMNS["ticket_id"]
    wanted = {header_key(columns.get("ticket_id", "ticket_id")), *OBVIOUS_COLUMNS["ticket_id"],
              *jira_csv.REQUIRED}
    table = CsvTable(text, wanted)
    if not explicit_id and jira_csv.is_jira_header(table.header):
        return jira_csv.load_table(table, source, config, encoding=encoding)
    mapped = resolve_columns(table.header, columns)
    builder = DocumentBuilder(source, "csv_ticket", encoding=encoding)
    for record in table.records(builder.fail):
        with builder.record(record.where):
            _add_row(builder, record, table.header, mapped, config)
    return builder.result("csv")


def resolve_columns(names: list[str], columns: dict[str, str]) -> dict[str, int]:
    """Logical field -> column position, by the mapping and then by :data:`OBVIOUS_COLUMNS`.

    Args:
        names: the header, as written.
        columns: logical field -> header from the mapping.
    Raises:
        ParseError: no ticket-id column (the message lists the file's columns).
    """
    index = {name.lower(): i for i, name in enumerate(names)}
    keys = [header_key(name) for name in names]
    mapped = {field: index[col.lower()] for field, col in columns.items() if col and col.lower() in index}
    for field, col in columns.items():
        if field in mapped or col != DEFAULT_CSV_COLUMNS.get(field):
            continue
        taken = set(mapped.values())
        pos = next((keys.index(name) for name in OBVIOUS_COLUMNS.get(field, ()) if name in keys
                    and keys.index(name) not in taken), None)
        if pos is None and field == "ticket_id":
            pos = next((i for i, key in enumerate(keys) if key.split(" ")[-1] in _ID_SUFFIXES and i not in taken),
                       None)
        if pos is not None:
            log.debug("CSV field %s read from column %r", field, names[pos])
            mapped[field] = pos
    if "ticket_id" not in mapped:
        id_column = columns.get("ticket_id", "ticket_id")
        usual = "" if id_column != DEFAULT_CSV_COLUMNS["ticket_id"] else " nor an id, key, ticket or number column"
        raise ParseError(f"CSV header has no ticket id column {id_column!r}{usual} (columns: {', '.join(names)}); "
                         "set the column mapping")
    return mapped


def _add_row(builder: DocumentBuilder, record: CsvRecord, names: list[str], mapped: dict[str, int],
             config: LoaderConfig) -> None:
    """Add one CSV row (its cells are the header's width).

    Raises:
        RecordError: the ticket id cell is empty or blank.
    """
    row = record.cells

    def get(field: str) -> str | None:
        return clean_str(row[mapped[field]]) if field in mapped else None

    raw_key = row[mapped["ticket_id"]]
    if not raw_key.strip():
        raise RecordError(f"empty or blank ticket id {raw_key!r}")
    key = raw_key.strip()
    subject = get("subject") or ""
    description = row[mapped["description"]].strip() if "description" in mapped else ""
    meta: dict[str, Any] = {
        "ticket_key": key,
        "title": subject or key,
        "site": get("site"),
        "status": get("status"),
        "author": get("author"),
        "labels": as_str_list(get("labels")),
    }
    meta.update(time_fields("created", get("opened"), config.tz))
    meta.update(time_fields("updated", get("updated"), config.tz))
    mapped_idx = set(mapped.values())
    for pos, name in enumerate(names):
        if pos in mapped_idx or not name:
            continue
        meta[re.sub(r"[^0-9a-z_]+", "_", name.lower()).strip("_") or f"column_{pos}"] = clean_str(row[pos])
    facts = " · ".join(f"{label}: {meta[k]}" for label, k in (("Site", "site"), ("Status", "status"))
                       if meta.get(k))
    parts = [f"{key}: {subject}".rstrip(": ")]
    if facts:
        parts.append(facts)
    if description:
        parts.append("\n" + description)
    builder.add(key, "\n".join(parts), meta)
