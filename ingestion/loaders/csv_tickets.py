"""CSV ticket exports (GGUS-style), one document per row.

The column mapping is configurable (:attr:`LoaderConfig.csv_columns`; default headers
``ticket_id,site,subject,status,opened,updated,description``). Headers match
case-insensitively. The delimiter is sniffed among ``, ; TAB |``; quoted multi-line
fields are handled by the stdlib ``csv`` module. Unmapped columns are kept as metadata.
Rows with an empty ticket id are skipped with a warning.
"""

from __future__ import annotations

import csv
import io
import re

from ingestion.errors import ParseError
from ingestion.loaders.base import DocumentBuilder, LoaderConfig, LoadResult, as_str_list, clean_str
from ingestion.timeparse import time_fields

_DELIMITERS = ",;\t|"


def _dialect(text: str, id_column: str) -> type[csv.Dialect] | csv.Dialect:
    sample = text[:65536]
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=_DELIMITERS)
        first = next(csv.reader(io.StringIO(sample), dialect))
        if id_column.lower() in {c.strip().lower() for c in first}:
            return dialect
    except (csv.Error, StopIteration):
        pass
    return csv.excel


def load(text: str, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """Parse a CSV ticket export.

    Raises:
        ParseError: the ticket-id column is missing, or the CSV is malformed.
    """
    columns = {**config.csv_columns}
    id_column = columns.get("ticket_id", "ticket_id")
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff"), newline=""), _dialect(text, id_column))
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
    mapped_idx = set(mapped.values())
    builder = DocumentBuilder(source, "csv_ticket", encoding=encoding)
    tz = config.tz
    try:
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            line = reader.line_num

            def get(field: str) -> str | None:
                pos = mapped.get(field)
                return clean_str(row[pos]) if pos is not None and pos < len(row) else None

            key = get("ticket_id")
            if not key:
                builder.warnings.append(f"line {line}: row without ticket id skipped")
                continue
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
            meta.update(time_fields("created", get("opened"), tz))
            meta.update(time_fields("updated", get("updated"), tz))
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
    except csv.Error as exc:
        raise ParseError(f"line {reader.line_num}: malformed CSV ({exc})") from exc
    return LoadResult(builder.documents, "csv", encoding, builder.warnings)
