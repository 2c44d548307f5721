"""JSON Lines (``{"id", "text", ...metadata}`` per line) and JSON arrays of such records.

``id`` (as written) is the key, ``text`` the body; ``title``, ``author``, ``labels``,
``status``, ``site`` and time fields (``created``/``date``/``timestamp``, ``updated``) are
mapped; other keys become metadata (nested objects as JSON strings). Blank lines are
skipped. A malformed line (invalid JSON, e.g. a truncated last line; not an object; an
empty or blank ``id``; no string ``text``; longer than :data:`~ingestion.loaders.limits.MAX_RECORD_CHARS`
or nested deeper than :data:`~ingestion.loaders.limits.MAX_NESTING_DEPTH`) fails alone, reported
with its line number (see :mod:`ingestion.loaders.base`); the pipeline keeps what is stored for a file with
failed records, so a half-written export never replaces good data.
"""

from __future__ import annotations

import json
from typing import Any

from ingestion.errors import RecordError
from ingestion.loaders import limits
from ingestion.loaders.base import (
    DocumentBuilder,
    LoaderConfig,
    LoadResult,
    as_str_list,
    check_size,
    clean_str,
    require_key,
    scalar_metadata,
)
from ingestion.timeparse import time_fields

_TIME_KEYS = {"created": ("created", "date", "timestamp", "time", "created_at"), "updated": ("updated", "updated_at")}
_MAPPED = {"id", "text", "title", "author", "labels", "tags", "status", "site"} | {
    k for keys in _TIME_KEYS.values() for k in keys}


def is_records(data: Any) -> bool:
    """True for a JSON list of records: objects, at least one of the first 20 with ``id`` and ``text``
    (the others, malformed, fail one by one)."""
    return isinstance(data, list) and bool(data) and any(
        isinstance(r, dict) and "id" in r and "text" in r for r in data[:20])


def records_to_documents(records: list[tuple[str, Any]], source: str, config: LoaderConfig,
                         *, encoding: str | None = None, fmt: str = "jsonl") -> LoadResult:
    """Build documents from ``(position, record)`` pairs (``("line 3", {...})``).

    A record that is not an object, has an empty or blank ``id`` or no string ``text`` fails
    alone (listed in :attr:`LoadResult.failures`).
    """
    builder = DocumentBuilder(source, "jsonl", encoding=encoding)
    for where, record in records:
        with builder.record(where):
            _add_record(builder, record, config)
    return builder.result(fmt)


def _add_record(builder: DocumentBuilder, record: Any, config: LoaderConfig) -> None:
    """Add one ``{"id", "text", ...}`` record.

    Raises:
        RecordError: not an object, no usable ``id``, or no string ``text``.
    """
    if not isinstance(record, dict):
        raise RecordError(f"expected a JSON object, got {type(record).__name__}")
    key = require_key(record.get("id"), "'id'")
    if not isinstance(record.get("text"), str):
        raise RecordError(f"record {key!r} has no string 'text'")
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


def load(text: str, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """Parse JSON Lines text; every bad line fails alone (``line N``: the reason)."""
    builder = DocumentBuilder(source, "jsonl", encoding=encoding)
    # split on "\n" only: a JSON string may hold U+2028 or other characters str.splitlines() breaks on
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        with builder.record(f"line {lineno}"):
            _add_record(builder, parse_line(line), config)
    return builder.result("jsonl")


def parse_line(line: str) -> Any:
    """One JSON Lines line's value, within the bounds of :mod:`ingestion.loaders.limits`.

    Raises:
        RecordError: invalid JSON (e.g. a truncated line) or a number too long to convert;
            :class:`~ingestion.errors.RecordLimitError`: the line is over ``MAX_RECORD_CHARS``
            or nests past ``MAX_NESTING_DEPTH``.
    """
    check_size("line", len(line), limits.MAX_RECORD_CHARS, "MAX_RECORD_CHARS")
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RecordError(f"invalid JSON at column {exc.colno}: {exc.msg}") from exc
    except RecursionError as exc:
        raise limits.too_deep() from exc
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise RecordError(f"invalid JSON: {exc}") from exc
    limits.check_depth(record)
    return record
