"""CSV ticket exports (GGUS-style), one document per row.

The column mapping is configurable (:attr:`LoaderConfig.csv_columns`; default headers
``ticket_id,site,subject,status,opened,updated,description``). Headers match
case-insensitively. The delimiter is the one among ``, ; TAB |`` whose header row holds
the ticket-id column (the stdlib sniffer's guess is tried first; it fails on some valid
files, e.g. ``;``-separated with CRLF line ends and quoted fields). Quoted multi-line
fields are handled by the stdlib ``csv`` module, and fields of any size are kept (the
module's 128 KiB field limit is raised; long descriptions are chunked downstream).
Unmapped columns are kept as metadata. A row with an empty or blank ticket id, or one
the ``csv`` module cannot read, fails alone (``line N``, the row's first line; see
:mod:`ingestion.loaders.base`).
"""

from __future__ import annotations

import csv
import io
import re

from ingestion.errors import ParseError, RecordError
from ingestion.loaders.base import DocumentBuilder, LoaderConfig, LoadResult, as_str_list, clean_str
from ingestion.timeparse import time_fields

_DELIMITERS = ",;\t|"
#: Largest field the csv module accepts here (characters); its default is 131,072.
FIELD_SIZE_LIMIT = 2**31 - 1


def _header_cells(sample: str, dialect: type[csv.Dialect] | csv.Dialect) -> set[str]:
    try:
        return {c.strip().lower() for c in next(csv.reader(io.StringIO(sample, newline=""), dialect))}
    except (csv.Error, StopIteration):
        return set()


def _dialect(text: str, id_column: str) -> type[csv.Dialect] | csv.Dialect:
    """The dialect whose header row holds ``id_column`` (excel, i.e. comma, when none does)."""
    sample = text[:65536]
    candidates: list[type[csv.Dialect] | csv.Dialect] = []
    try:
        candidates.append(csv.Sniffer().sniff(sample.replace("\r\n", "\n"), delimiters=_DELIMITERS))
    except csv.Error:
        pass
    for delimiter in _DELIMITERS:
        candidates.append(type(f"excel_{ord(delimiter)}", (csv.excel,), {"delimiter": delimiter}))
    for dialect in candidates:
        if id_column.lower() in _header_cells(sample, dialect):
            return dialect
    return csv.excel


def load(text: str, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """Parse a CSV ticket export into one document per row; bad rows fail alone.

    Raises:
        ParseError: the header row cannot be read or has no ticket-id column.
    """
    if csv.field_size_limit() < FIELD_SIZE_LIMIT:
        csv.field_size_limit(FIELD_SIZE_LIMIT)
    columns = {**config.csv_columns}
    id_column = columns.get("ticket_id", "ticket_id")
    text = text.lstrip("\ufeff")
    reader = csv.reader(io.StringIO(text, newline=""), _dialect(text, id_column))
    try:
        header = next(reader)
    except StopIteration as exc:
        raise ParseError("empty CSV file") from exc
    except csv.Error as exc:
        raise ParseError(f"line 1: {exc}") from exc
    names = [h.strip() for h in header]
    index = {name.lower(): i for i, name in enumerate(names)}
    if id_column.lower() not in index:
        raise ParseError(f"CSV header has no ticket id column {id_column!r} (columns: {', '.join(names)}); "
                         "set the column mapping")
    mapped = {field: index[col.lower()] for field, col in columns.items() if col and col.lower() in index}
    builder = DocumentBuilder(source, "csv_ticket", encoding=encoding)
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            builder.fail(f"line {start}", f"malformed CSV row ({exc})")
            if reader.line_num < start:  # the reader did not advance: nothing more can be read
                break
            continue
        if not any(cell.strip() for cell in row):
            continue
        with builder.record(f"line {start}"):
            _add_row(builder, row, names, mapped, config)
    return builder.result("csv")


def _add_row(builder: DocumentBuilder, row: list[str], names: list[str], mapped: dict[str, int],
             config: LoaderConfig) -> None:
    """Add one CSV row.

    Raises:
        RecordError: the ticket id cell is missing, empty or blank.
    """

    def get(field: str) -> str | None:
        pos = mapped.get(field)
        return clean_str(row[pos]) if pos is not None and pos < len(row) else None

    if not get("ticket_id"):
        raw = row[mapped["ticket_id"]] if mapped["ticket_id"] < len(row) else None
        raise RecordError(f"empty or blank ticket id {raw!r}" if raw is not None else "row has no ticket id cell")
    key = row[mapped["ticket_id"]].strip()
    subject = get("subject") or ""
    description = (row[mapped["description"]].strip()
                   if "description" in mapped and mapped["description"] < len(row) else "")
    meta: dict = {
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
        if pos in mapped_idx or pos >= len(row) or not name:
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
