"""Markdown files, typically incident post-mortems with YAML front matter.

Front matter (between ``---`` lines at the top) is read with PyYAML's safe loader, with
every plain scalar kept as the string written (``id: 007`` is the key ``007``, not 7;
``yes``, ``1.10`` and ``2026-01-20`` stay strings; only an empty value or ``null``/``~``
is None); dates are parsed from those strings like any other time field. Recognised keys:
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

import yaml

from ingestion.errors import ParseError
from ingestion.loaders.base import DocumentBuilder, LoaderConfig, LoadResult, as_str_list, clean_str, scalar_metadata
from ingestion.timeparse import time_fields

FRONT_MATTER_RE = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)
HEADING_RE = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)

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


class StringScalarLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader without the implicit int/float/bool/timestamp resolvers: plain
    scalars load as the strings written; ``null``, ``~`` and empty values still load as None,
    and explicit tags (``!!int 7``) are still honoured."""


_KEEP_IMPLICIT = {"tag:yaml.org,2002:null", "tag:yaml.org,2002:merge"}
StringScalarLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag in _KEEP_IMPLICIT]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_front_matter(text: str) -> object:
    """Parse YAML front matter with :class:`StringScalarLoader` (scalars kept as written).

    Raises:
        yaml.YAMLError: invalid YAML.
    """
    return yaml.load(text, Loader=StringScalarLoader)  # noqa: S506 - a SafeLoader subclass


def has_front_matter(text: str) -> bool:
    """True when ``text`` starts with a ``---`` YAML front-matter block."""
    return FRONT_MATTER_RE.match(text) is not None


def _pick(front: dict, name: str) -> object:
    for alias in _ALIASES[name]:
        if alias in front and front[alias] not in (None, ""):
            return front[alias]
    return None


def load(text: str, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """One document per Markdown file.

    Raises:
        ParseError: the front matter is not valid YAML or not a mapping.
    """
    front: dict = {}
    body = text
    match = FRONT_MATTER_RE.match(text)
    if match:
        try:
            loaded = load_front_matter(match.group(1))
        except yaml.YAMLError as exc:
            raise ParseError(f"invalid YAML front matter: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ParseError(f"YAML front matter must be a mapping, got {type(loaded).__name__}")
        front = {str(k).strip().lower(): v for k, v in loaded.items()}
        body = text[match.end():]
    body = body.strip()
    stem = PurePosixPath(source).stem
    heading = HEADING_RE.search(body)
    key = clean_str(_pick(front, "key")) or stem
    title = clean_str(_pick(front, "title")) or (heading.group(1) if heading else stem)
    used = {alias for aliases in _ALIASES.values() for alias in aliases}
    meta: dict = {"title": title}
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
    doc_type = "postmortem" if match else "text"
    builder = DocumentBuilder(source, doc_type, encoding=encoding)
    lead = [] if heading and heading.group(1) == title else [f"# {title}"]
    facts = [f"{label}: {meta[k]}" for label, k in (("Severity", "severity"), ("Status", "status"),
                                                    ("Start", "start"), ("End", "end")) if meta.get(k)]
    if meta["services"]:
        facts.append("Services: " + ", ".join(meta["services"]))  # type: ignore[arg-type]
    text_out = "\n".join(lead + ([" · ".join(facts)] if facts else []))
    text_out = (text_out + "\n\n" + body).strip() if text_out else body
    builder.add(key, text_out, meta)
    return builder.result("markdown")
