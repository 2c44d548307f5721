"""Plain-text shift logs: timestamped lines grouped into one document per shift.

Lines look like ``2026-01-20 06:04 [OPS] text``. Grouping:

1. **By shift header** when the file has them: a line such as
   ``=== Shift 2026-01-20 morning (06:00-14:00) shifter: A. Rossi ===`` (also ``## Shift ...``
   or ``--- Shift ... ---``) opens a shift; every following line belongs to it until the
   next header, whatever its time stamp (handover lines often run late). The key is the
   shift name as written (``2026-01-20 morning``), the shifter becomes ``author``.
2. **By clock window** for lines outside any header: shifts start at
   :attr:`LoaderConfig.shift_starts` (default 06:00 morning, 14:00 afternoon, 22:00 night);
   a night shift belongs to the date it started (``2026-01-21 03:12`` -> ``2026-01-20 night``).

Lines without a time stamp continue the previous line. Identical lines are kept as
they are (both stay in the text). ``labels`` lists the ``[TAG]`` categories seen.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from ingestion.documents import Metadata
from ingestion.errors import ParseError
from ingestion.loaders.base import DocumentBuilder, LoaderConfig, LoadResult
from ingestion.timeparse import parse_timestamp

LINE_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})[ T](\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)(Z|[+-]\d{2}:?\d{2})?(?:\s+|$)(.*)$")
TAG_RE = re.compile(r"^\[([^\]]{1,32})\]")
#: A shift header's start (``=== Shift``, ``## Shift:``, ``--- shift``); :func:`header_body` takes the rest.
HEADER_START_RE = re.compile(r"^\s*(?:={2,}|#{1,6}|-{2,})\s*shift\b[:\s]*", re.IGNORECASE)
_WINDOW_RE = re.compile(r"\(\s*(\d{1,2}:\d{2})\s*[-–]\s*(\d{1,2}:\d{2})\s*\)")
_SHIFTER_RE = re.compile(r"\b(?:shifter|shift leader|operator|on[- ]duty)\s*:\s*(.+)$", re.IGNORECASE)


def header_body(line: str) -> str | None:
    """The text of a shift header line after ``Shift``, without a closing ``==``/``--`` run; None
    when ``line`` is no shift header.

    The same text the pattern ``(?P<body>.*?)\\s*(?:={2,}|-{2,})?\\s*$`` after the header's start
    captures, found in linear time (that pattern backtracks cubically on a long line of spaces).
    """
    match = HEADER_START_RE.match(line)
    if match is None:
        return None
    rest = line[match.end():].rstrip()
    for mark in "=-":
        trimmed = rest.rstrip(mark)
        if len(rest) - len(trimmed) >= 2:
            return trimmed.rstrip()
    return rest


def sniff(text: str, min_fraction: float = 0.5) -> bool:
    """True when at least ``min_fraction`` of the first 200 non-blank lines are timestamped or shift headers."""
    lines = [line for line in text.splitlines() if line.strip()][:200]
    if not lines:
        return False
    hits = sum(1 for line in lines if LINE_RE.match(line) or header_body(line) is not None)
    return hits >= max(1, int(len(lines) * min_fraction))


@dataclass
class _Group:
    key: str
    title: str
    line: int = 0
    author: str | None = None
    window: str | None = None
    lines: list[str] = field(default_factory=list)
    times: list[dt.datetime] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)


def _window_key(stamp: dt.datetime, starts: list[tuple[dt.time, str]]) -> tuple[str, str]:
    """Shift key and window label for a naive local time stamp."""
    day = stamp.date()
    current = None
    for index, (start, _name) in enumerate(starts):
        if stamp.time() >= start:
            current = index
    if current is None:  # before the first start: last shift of the previous day
        current = len(starts) - 1
        day = day - dt.timedelta(days=1)
    start, name = starts[current]
    end = starts[(current + 1) % len(starts)][0]
    return f"{day.isoformat()} {name}", f"{start.strftime('%H:%M')}-{end.strftime('%H:%M')}"


def _parse_header(body: str) -> tuple[str, str | None, str | None]:
    """(key, window, shifter) from the text after ``Shift`` in a header line."""
    shifter = None
    match = _SHIFTER_RE.search(body)
    if match:
        shifter = match.group(1).strip().rstrip("=-# ").strip() or None
        body = body[: match.start()]
    window = None
    wmatch = _WINDOW_RE.search(body)
    if wmatch:
        window = f"{wmatch.group(1)}-{wmatch.group(2)}"
        body = body[: wmatch.start()] + body[wmatch.end():]
    key = re.sub(r"\s+", " ", body).strip(" ,;:-")
    return key, window, shifter


class _Grouper:
    """Sorts a shift log's lines into shift groups, in file order (see the module docstring)."""

    def __init__(self, config: LoaderConfig) -> None:
        self.tz = config.tz
        self.starts = sorted((dt.datetime.strptime(t, "%H:%M").time(), name) for t, name in config.shift_starts)
        self.groups: list[_Group] = []
        self.by_key: dict[str, _Group] = {}
        self.header_group: _Group | None = None
        self.current: _Group | None = None
        self.orphans: list[str] = []

    def add(self, lineno: int, line: str) -> None:
        """Sort one non-blank line (trailing white space removed)."""
        header = header_body(line)
        stamped = LINE_RE.match(line)
        if header is not None and not stamped:
            self._open_header(lineno, header)
            return
        stamp = None
        if stamped:
            stamp = parse_timestamp(f"{stamped.group(1)} {stamped.group(2).zfill(5)}{stamped.group(3) or ''}", self.tz)
        if stamped and stamp is not None:
            group = self.header_group or self._window_group(lineno, stamp)
            self.current = group
            group.lines.append(line)
            group.times.append(stamp)
            tag = TAG_RE.match(stamped.group(4))
            if tag:
                group.tags.add(tag.group(1))
        elif self.current is not None:
            self.current.lines.append(line)
        else:
            self.orphans.append(line)

    def _open_header(self, lineno: int, body: str) -> None:
        key, window, shifter = _parse_header(body)
        self.header_group = _Group(key=key or f"shift {len(self.groups) + 1}", title="Shift " + body.strip(),
                                   line=lineno, author=shifter, window=window)
        self.groups.append(self.header_group)
        self.current = self.header_group

    def _window_group(self, lineno: int, stamp: dt.datetime) -> _Group:
        """The clock-window shift of a time stamp outside any header (created at its first line)."""
        key, window = _window_key(stamp.astimezone(self.tz).replace(tzinfo=None), self.starts)
        group = self.by_key.get(key)
        if group is None:
            group = _Group(key=key, title=f"Shift {key} ({window})", line=lineno, window=window)
            self.by_key[key] = group
            self.groups.append(group)
        return group


def load(text: str, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """Group a shift log into one document per shift.

    Raises:
        ParseError: the file has no time-stamped line and no shift header.
    """
    grouper = _Grouper(config)
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if line.strip():
            grouper.add(lineno, line)
    if not grouper.groups:
        raise ParseError("no time-stamped line ('YYYY-MM-DD HH:MM ...') or shift header found")
    builder = DocumentBuilder(source, "shiftlog", encoding=encoding)
    if grouper.orphans:
        builder.warnings.append(f"{len(grouper.orphans)} line(s) before the first time-stamped line were ignored")
    for group in grouper.groups:
        if not group.lines:
            builder.warnings.append(f"shift {group.key!r} has no entries")
            continue
        with builder.record(f"line {group.line}"):
            _add_group(builder, group)
    return builder.result("shiftlog")


def _add_group(builder: DocumentBuilder, group: _Group) -> None:
    """Add one shift's document."""
    first = min(group.times) if group.times else None
    last = max(group.times) if group.times else None
    meta: Metadata = {
        "title": group.title,
        "shift": group.key,
        "author": group.author,
        "shift_window": group.window,
        "created_ts": int(first.timestamp()) if first else None,
        "created": first.isoformat() if first else None,
        "updated_ts": int(last.timestamp()) if last else None,
        "updated": last.isoformat() if last else None,
        "labels": sorted(group.tags),
        "n_lines": len(group.times),
    }
    builder.add(group.key, group.title + "\n" + "\n".join(group.lines), meta)
