"""ELOG native logbook files (``YYMMDDa.log`` and exports).

Each entry starts with ``$@MID@$: N``, followed by ``Name: value`` header lines
(Date, Author, Type, Category, Subject, In reply to, Reply to, Attachment, Encoding and
any custom attribute), a line of 40 ``=``, then the body up to the next ``$@MID@$:``.
One entry = one document keyed by its MID as written. Replies carry ``in_reply_to``
(parent MID) and ``parent_doc_id``; parents carry ``replies`` (list of MIDs).
Bodies with ``Encoding: HTML`` are reduced to text (table cells separated by `` | ``,
one row per line; comments dropped; a ``<`` that opens no tag is text). An entry
without a MID, without the ``====`` line or with a stray header line fails alone, reported
by its ``$@MID@$:`` line number (see :mod:`ingestion.loaders.base`).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import PurePosixPath

from ingestion.documents import Metadata, make_doc_id
from ingestion.errors import ParseError, RecordError
from ingestion.loaders.base import DocumentBuilder, LoaderConfig, LoadResult, as_str_list, clean_str
from ingestion.timeparse import time_fields

#: An entry's first line; the MID is the rest of the line without surrounding blanks and tabs
#: (stripped in Python: a ``[ \t]*(.*?)[ \t]*$`` pattern backtracks quadratically on a long line).
MID_RE = re.compile(r"^\$@MID@\$:(.*)$")
#: Before parsing, comments are dropped (one left open runs to the end, as in a browser) and a
#: ``<`` that no ``>`` follows before the next ``<`` (it opens no tag) is escaped: HTMLParser
#: rescans the rest of the text for each open comment or tag (quadratic: 34 s for 200 KB of
#: ``<!--``, 1.7 s for 64 KB of ``<a``). Both patterns are linear.
_COMMENT_RE = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_UNCLOSED_LT_RE = re.compile(r"<(?![^<>]*>)")
SEPARATOR_RE = re.compile(r"^={20,}[ \t]*$")
HEADER_RE = re.compile(r"^([A-Za-z][\w \-/]*?):[ \t]?(.*)$")

# Header names mapped to metadata keys; other attributes become snake_case keys.
_KNOWN = {
    "date": None, "author": "author", "type": "entry_type", "category": "category",
    "subject": "title", "in reply to": "in_reply_to", "reply to": "replies",
    "attachment": "attachments", "encoding": "body_encoding",
}


def sniff(text: str) -> bool:
    """True when the text looks like an ELOG file (first non-blank line is a MID line)."""
    for line in text.splitlines():
        if line.strip():
            return bool(MID_RE.match(line))
    return False


class _HTMLText(HTMLParser):
    """Collects the text of an HTML fragment: line breaks for block elements, `` | `` between
    the cells of a table row (so ``<td>a</td><td>b</td>`` stays two values, ``a | b``)."""

    _BLOCK = {"p", "br", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "table", "ul", "ol",
              "blockquote", "hr", "caption", "thead", "tbody", "tfoot"}
    _CELL = {"td", "th"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._cells_in_row = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._BLOCK:
            self.parts.append("\n")
            if tag == "tr":
                self._cells_in_row = 0
        elif tag in self._CELL:
            if self._cells_in_row:
                self.parts.append(" | ")
            self._cells_in_row += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.parts.append("\n")
        if tag in ("table", "tr"):
            self._cells_in_row = 0

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def html_to_text(fragment: str) -> str:
    """Plain text of an HTML fragment (tags removed, entities decoded)."""
    parser = _HTMLText()
    parser.feed(_UNCLOSED_LT_RE.sub("&lt;", _COMMENT_RE.sub("", fragment)))
    parser.close()
    text = html.unescape("".join(parser.parts))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _snake(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", name.strip().lower()).strip("_") or "attribute"


def load(text: str, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """Parse an ELOG file into one document per entry; a malformed entry fails alone.

    Raises:
        ParseError: the text has no ``$@MID@$:`` line at all.
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if MID_RE.match(line)]
    if not starts:
        raise ParseError("not an ELOG file: no '$@MID@$:' entry line found")
    builder = DocumentBuilder(source, "elog", encoding=encoding)
    if any(line.strip() for line in lines[: starts[0]]):
        builder.warnings.append(f"ignored {starts[0]} line(s) before the first $@MID@$ entry")
    logbook = PurePosixPath(source).stem
    bounds = list(zip(starts, starts[1:] + [len(lines)]))
    entries: list[_Entry] = []
    for start, end in bounds:
        with builder.record(f"line {start + 1}"):
            entries.append(_parse_entry(lines, start, end))

    replies_of: dict[str, list[str]] = {}
    for entry in entries:
        parent = clean_str(entry.headers.get("in reply to"))
        if parent:
            replies_of.setdefault(parent, []).append(entry.mid)

    for entry in entries:
        with builder.record(entry.where):
            _add_entry(builder, logbook, config, entry, replies_of.get(entry.mid, []))
    return builder.result("elog")


@dataclass(frozen=True)
class _Entry:
    """One parsed ELOG entry: where it starts (``line N``), its MID, headers by lower-case name,
    headers in order, body."""

    where: str
    mid: str
    headers: dict[str, str]
    order: list[tuple[str, str]]
    body: str


def _parse_entry(lines: list[str], start: int, end: int) -> _Entry:
    """The entry in ``lines[start:end]``.

    Raises:
        RecordError: no MID, a line that is not ``Name: value`` before the ``====`` line, or no ``====`` line.
    """
    mid = MID_RE.match(lines[start]).group(1).strip(" \t")  # type: ignore[union-attr]
    if not mid:
        raise RecordError("'$@MID@$:' without an entry number")
    headers: dict[str, str] = {}
    order: list[tuple[str, str]] = []
    body_start = None
    for j in range(start + 1, end):
        line = lines[j]
        if SEPARATOR_RE.match(line):
            body_start = j + 1
            break
        match = HEADER_RE.match(line)
        if match:
            name, value = match.group(1).strip(), match.group(2).strip()
            headers[name.lower()] = value
            order.append((name, value))
        elif line.strip():
            raise RecordError(f"MID {mid}: expected 'Name: value' header at line {j + 1}, got {line[:60]!r}")
    if body_start is None:
        raise RecordError(f"MID {mid}: missing the '=====' line between header and body")
    body = "\n".join(lines[body_start:end]).strip("\n")
    if headers.get("encoding", "").strip().lower() == "html":
        body = html_to_text(body)
    return _Entry(f"line {start + 1}", mid, headers, order, body.rstrip())


def _add_entry(builder: DocumentBuilder, logbook: str, config: LoaderConfig, entry: _Entry,
               reply_mids: list[str]) -> None:
    """Add one parsed ELOG entry (``reply_mids``: entries of this file that answer it)."""
    mid, body, source = entry.mid, entry.body, builder.source
    meta: Metadata = {"mid": mid, "logbook": logbook}
    meta.update(time_fields("created", entry.headers.get("date"), config.tz))
    for name, value in entry.order:
        low = name.lower()
        if low == "date":
            continue
        key = _KNOWN.get(low) or _snake(name)
        if key in ("replies", "attachments"):
            meta[key] = as_str_list(value)
        else:
            meta[key] = clean_str(value)
    replies = list(dict.fromkeys(as_str_list(meta.get("replies")) + reply_mids))
    meta["replies"] = replies
    parent = meta.get("in_reply_to")
    meta["parent_doc_id"] = make_doc_id(source, str(parent)) if parent else None
    subject = meta.get("title") or ""
    info = " · ".join(
        f"{label}: {meta[k]}" for label, k in (("Author", "author"), ("Type", "entry_type"), ("Category", "category"))
        if meta.get(k)
    )
    head = [f"Subject: {subject}"] if subject else []
    if info:
        head.append(info)
    if parent:
        head.append(f"In reply to: MID {parent}")
    doc_text = "\n".join(head) + ("\n\n" if head and body else "") + body
    builder.add(mid, doc_text, meta)
