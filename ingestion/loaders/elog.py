"""ELOG native logbook files (``YYMMDDa.log`` and exports).

Each entry starts with ``$@MID@$: N``, followed by ``Name: value`` header lines
(Date, Author, Type, Category, Subject, In reply to, Reply to, Attachment, Encoding and
any custom attribute), a line of 40 ``=``, then the body up to the next ``$@MID@$:``.
One entry = one document keyed by its MID as written. Replies carry ``in_reply_to``
(parent MID) and ``parent_doc_id``; parents carry ``replies`` (list of MIDs).
Bodies with ``Encoding: HTML`` are reduced to text.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import PurePosixPath

from ingestion.documents import Metadata, make_doc_id
from ingestion.errors import ParseError
from ingestion.loaders.base import DocumentBuilder, LoaderConfig, LoadResult, as_str_list, clean_str
from ingestion.timeparse import time_fields

MID_RE = re.compile(r"^\$@MID@\$:[ \t]*(.*?)[ \t]*$")
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
    """Collects the text of an HTML fragment, with line breaks for block elements."""

    _BLOCK = {"p", "br", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def html_to_text(fragment: str) -> str:
    """Plain text of an HTML fragment (tags removed, entities decoded)."""
    parser = _HTMLText()
    parser.feed(fragment)
    parser.close()
    text = html.unescape("".join(parser.parts))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _snake(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", name.strip().lower()).strip("_") or "attribute"


def load(text: str, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """Parse an ELOG file into one document per entry.

    Raises:
        ParseError: no ``$@MID@$:`` line, an entry without a MID, or without the ``====`` separator.
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
    entries: list[tuple[str, dict[str, str], list[tuple[str, str]], str]] = []
    for start, end in bounds:
        mid = MID_RE.match(lines[start]).group(1)  # type: ignore[union-attr]
        if not mid:
            raise ParseError(f"line {start + 1}: '$@MID@$:' without an entry number")
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
                raise ParseError(f"line {j + 1}: MID {mid}: expected 'Name: value' header, got {line[:60]!r}")
        if body_start is None:
            raise ParseError(f"line {start + 1}: MID {mid}: missing the '=====' line between header and body")
        body = "\n".join(lines[body_start:end]).strip("\n")
        if headers.get("encoding", "").strip().lower() == "html":
            body = html_to_text(body)
        entries.append((mid, headers, order, body.rstrip()))

    replies_of: dict[str, list[str]] = {}
    for mid, headers, _, _ in entries:
        parent = clean_str(headers.get("in reply to"))
        if parent:
            replies_of.setdefault(parent, []).append(mid)

    for mid, headers, order, body in entries:
        meta: Metadata = {"mid": mid, "logbook": logbook}
        meta.update(time_fields("created", headers.get("date"), config.tz))
        for name, value in order:
            low = name.lower()
            if low == "date":
                continue
            key = _KNOWN.get(low, _snake(name))
            if key in ("replies", "attachments"):
                meta[key] = as_str_list(value)
            else:
                meta[key] = clean_str(value)
        replies = list(dict.fromkeys(as_str_list(meta.get("replies")) + replies_of.get(mid, [])))
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
    return LoadResult(builder.documents, "elog", encoding, builder.warnings)
