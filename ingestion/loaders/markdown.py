"""Markdown files, typically incident post-mortems with YAML front matter.

Front matter (between ``---`` lines at the top) is read by :mod:`ingestion.loaders.front_matter`
(safe loader, plain scalars kept as the strings written, aliases bounded); dates are parsed
from those strings like any other time field. Recognised keys:
``id``/``key``/``incident`` (document key; default: the file stem), ``title`` (default: the
first ``#`` heading, then the stem), ``start``/``start_time``/``started``, ``end``/``end_time``/
``resolved``, ``date``/``created``, ``updated``, ``severity``, ``services``, ``status``,
``author``/``authors``, ``labels``/``tags``, ``site``, ``tickets``; any other key is kept as
metadata. A file with front matter is a ``postmortem``; without, a ``text`` document.
``created`` is the incident start when no explicit date is given.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from ingestion.errors import ParseError
from ingestion.loaders.base import DocumentBuilder, LoaderConfig, LoadResult, as_str_list, clean_str, scalar_metadata
from ingestion.loaders.front_matter import has_front_matter, load_front_matter, split_front_matter
from ingestion.timeparse import time_fields

__all__ = ["first_heading", "has_front_matter", "load", "load_front_matter"]

#: A level-1 heading's start: ``#``, white space, then its first visible character. The rest of
#: the line is taken by :func:`first_heading` (no backtracking regex: linear in the line).
HEADING_START_RE = re.compile(r"^#\s+(?=\S)", re.MULTILINE)

_ALIASES: dict[str, tuple[str, ...]] = {
    "key": ("id", "key", "incident", "incident_id"),
    "title": ("title", "name", "summary"),
    "start": ("start", "start_time", "started", "started_at", "begin"),
    "end": ("end", "end_time", "ended", "resolved", "resolved_at", "ended_at"),
    "created": ("date", "created", "created_at", "published"),
    "updated": ("updated", "updated_at", "modified", "last_modified"),
    "author": ("author", "authors", "owner", "owners"),
    "labels": ("labels", "tags", "keywords"),
    "services": ("services", "service", "affected_services", "components"),
}


def first_heading(body: str) -> str | None:
    """The text of the first ``# Heading`` line, without a closing ``#`` run and white space.

    The same text the pattern ``^#\\s+(.+?)\\s*#*\\s*$`` captures, found in linear time (that
    pattern backtracks cubically on a long line of spaces: 70 s for 4 KB).
    """
    match = HEADING_START_RE.search(body)
    if match is None:
        return None
    end = body.find("\n", match.end())
    rest = body[match.end():] if end < 0 else body[match.end():end]
    return rest.rstrip().rstrip("#").rstrip() or rest[:1]


def _pick(front: dict[str, Any], name: str) -> object:
    for alias in _ALIASES[name]:
        if alias in front and front[alias] not in (None, ""):
            return front[alias]
    return None


def load(text: str, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """One document per Markdown file.

    Raises:
        ParseError: the front matter is not valid YAML or not a mapping.
        LimitExceededError: the front matter exceeds a bound (e.g. aliases expanding past
            :data:`~ingestion.loaders.limits.MAX_YAML_NODES`); RecordLimitError: the document does.
    """
    front: dict[str, Any] = {}
    block, body = split_front_matter(text)
    if block is not None:
        loaded = load_front_matter(block)
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ParseError(f"YAML front matter must be a mapping, got {type(loaded).__name__}")
        front = {str(k).strip().lower(): v for k, v in loaded.items()}
    body = body.strip()
    stem = PurePosixPath(source).stem
    heading = first_heading(body)
    key = clean_str(_pick(front, "key")) or stem
    title = clean_str(_pick(front, "title")) or heading or stem
    used = {alias for aliases in _ALIASES.values() for alias in aliases}
    meta: dict[str, Any] = {"title": title}
    start = _pick(front, "start")
    meta.update(time_fields("start", start, config.tz))
    meta.update(time_fields("end", _pick(front, "end"), config.tz))
    created = _pick(front, "created") or start
    meta.update(time_fields("created", created, config.tz))
    meta.update(time_fields("updated", _pick(front, "updated"), config.tz))
    author = _pick(front, "author")
    meta["author"] = ", ".join(as_str_list(author)) if isinstance(author, (list, tuple)) else clean_str(author)
    meta["labels"] = as_str_list(_pick(front, "labels"))
    meta["services"] = as_str_list(_pick(front, "services"))
    for name in ("severity", "status", "site"):
        meta[name] = clean_str(front.get(name))
    if "tickets" in front:
        meta["tickets"] = as_str_list(front["tickets"])
    for name, value in front.items():
        if name in used or name in meta:
            continue
        meta[re.sub(r"[^0-9a-z_]+", "_", name)] = scalar_metadata(value)
    doc_type = "postmortem" if block is not None else "text"
    builder = DocumentBuilder(source, doc_type, encoding=encoding)
    lead = [] if heading and heading == title else [f"# {title}"]
    facts = [f"{label}: {meta[k]}" for label, k in (("Severity", "severity"), ("Status", "status"),
                                                    ("Start", "start"), ("End", "end")) if meta.get(k)]
    if meta["services"]:
        facts.append("Services: " + ", ".join(meta["services"]))
    text_out = "\n".join(lead + ([" · ".join(facts)] if facts else []))
    text_out = (text_out + "\n\n" + body).strip() if text_out else body
    builder.add(key, text_out, meta)
    return builder.result("markdown")
