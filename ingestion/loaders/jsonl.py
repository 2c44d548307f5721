"""JSON Lines (``{"id", "text", ...metadata}`` per line) and JSON arrays of such records.

``id`` (as written) is the key, ``text`` the body; ``title``, ``author``, ``labels``,
``status``, ``site`` and time fields (``created``/``date``/``timestamp``, ``updated``) are
mapped; other keys become metadata (nested objects as JSON strings). Blank lines are
skipped; any malformed line (e.g. a truncated last line) fails the whole file, naming
the line, so a half-written export never replaces good data.
"""

from __future__ import annotations

import json
from typing import Any

from ingestion.errors import ParseError
from ingestion.loaders.base import DocumentBuilder, LoaderConfig, LoadResult, as_str_list, clean_str, scalar_metadata
from ingestion.timeparse import time_fields

_TIME_KEYS = {"created": ("created", "date", "timestamp", "time", "created_at"), "updated": ("updated", "updated_at")}
_MAPPED = {"id", "text", "title", "author", "labels", "tags", "status", "site"} | {
    k for keys in _TIME_KEYS.values() for k in keys}


def is_records(data: Any) -> bool:
    """True for a JSON list whose items are objects with ``id`` and ``text``."""
    return isinstance(data, list) and bool(data) and all(
        isinstance(r, dict) and "id" in r and "text" in r for r in data[:20])


def records_to_documents(records: list[tuple[int, Any]], source: str, config: LoaderConfig,
                         *, encoding: str | None = None, fmt: str = "jsonl") -> LoadResult:
    """Build documents from ``(line number, record)`` pairs.

    Raises:
        ParseError: a record that is not an object, or lacks ``id`` or ``text``.
    """
    builder = DocumentBuilder(source, "jsonl", encoding=encoding)
    for lineno, record in records:
        if not isinstance(record, dict):
            raise ParseError(f"line {lineno}: expected a JSON object, got {type(record).__name__}")
        if record.get("id") is None or str(record.get("id")).strip() == "":
            raise ParseError(f"line {lineno}: record without 'id'")
        if not isinstance(record.get("text"), str):
            raise ParseError(f"line {lineno}: record {record.get('id')!r} without a string 'text'")
        key = str(record["id"])
        meta: dict[str, Any] = {
            "record_id": key,
            "title": clean_str(record.get("title")),
            "author": clean_str(record.get("author")),
            "status": clean_str(record.get("status")),
            "site": clean_str(record.get("site")),
            "labels": as_str_list(record.get("labels", record.get("tags"))),
        }
        for name, aliases in _TIME_KEYS.items():
            value = next((record[a] for a in aliases if record.get(a) not in (None, "")), None)
            meta.update(time_fields(name, value, config.tz))
        for name, value in record.items():
            if name not in _MAPPED:
                meta[str(name)] = scalar_metadata(value)
        text = record["text"]
        if meta["title"] and not text.lstrip().startswith(str(meta["title"])):
            text = f"{meta['title']}\n{text}"
        builder.add(key, text, meta)
    return LoadResult(builder.documents, fmt, encoding, builder.warnings)


def load(text: str, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """Parse JSON Lines text.

    Raises:
        ParseError: invalid JSON on any line, or a record without ``id``/``text``.
    """
    records: list[tuple[int, Any]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ParseError(f"line {lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from exc
    return records_to_documents(records, source, config, encoding=encoding)
