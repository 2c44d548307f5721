"""Reading a CSV file as a header and records of exactly the header's width.

The dialect is always the standard one (RFC 4180 / ``csv.excel``: ``"`` quotes, a quote inside
a quoted field written ``""``, quoted fields may span lines); only the delimiter is chosen, among
``, ; TAB |``, as the one under which the header has more than one column and the most records
of the sample have the header's width (ties: the header that holds a wanted column, then the
order above). The stdlib ``csv.Sniffer`` is not used: it guesses ``doublequote=False`` for a
valid file whose ``""`` escapes sit in a multi-line field, which cuts such a row short and
turns its tail into rows of its own.

Parsing is strict: a record whose field count differs from the header's (an unquoted
delimiter, a stray quote), with text after a closing quote, or with a quote never closed is
reported through ``fail`` with its first line, the lines it spans and the reason, and never
yielded. A field may be as long as :data:`~ingestion.loaders.limits.MAX_RECORD_CHARS` (the
module's 128 KiB default is raised to it); a longer one fails the file, since the reader cannot
tell where the record it is in ends.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from ingestion.errors import LimitExceededError, ParseError
from ingestion.loaders import limits

DELIMITERS = ",;\t|"
#: Characters of the file read to choose the delimiter, and records scored at most.
SAMPLE_CHARS = 65536
SAMPLE_RECORDS = 200


@dataclass(frozen=True)
class CsvRecord:
    """One record of a CSV file: ``line`` is its first line (1-based), ``cells`` its fields (the header's width)."""

    line: int
    cells: list[str]

    @property
    def where(self) -> str:
        """The record's position as reports name it (``line 12``)."""
        return f"line {self.line}"


def header_key(name: str) -> str:
    """A header name as matched against known names: lower case, each run of other characters one space
    (``Ticket-ID`` and ``ticket_id`` are ``ticket id``)."""
    return re.sub(r"[^0-9a-z]+", " ", name.lower()).strip()


def _dialect(delimiter: str) -> type[csv.Dialect]:
    return type(f"excel_{ord(delimiter)}", (csv.excel,), {"delimiter": delimiter, "strict": True})


def _score(sample: str, truncated: bool, delimiter: str, wanted: Collection[str]) -> tuple[bool, int, bool, int]:
    """(header has 2+ columns, sample records of the header's width, header holds a wanted name, width)."""
    rows: list[list[str]] = []
    try:
        for row in csv.reader(io.StringIO(sample, newline=""), _dialect(delimiter)):
            rows.append(row)
            if len(rows) > SAMPLE_RECORDS:
                break
    except csv.Error:
        pass
    if truncated and len(rows) > 1:
        rows.pop()  # the sample may end inside this record
    if not rows:
        return (False, 0, False, 0)
    header = rows[0]
    names = {header_key(cell) for cell in header}
    fitting = sum(1 for row in rows[1:] if len(row) == len(header))
    return (len(header) > 1, fitting, bool(names & set(wanted)), len(header))


def choose_delimiter(text: str, wanted: Collection[str] = ()) -> str:
    """The delimiter among :data:`DELIMITERS` that fits ``text`` best (see the module docstring).

    Args:
        text: the file's content.
        wanted: header names (as :func:`header_key` writes them) that, when present, confirm a
            delimiter (the id column).
    """
    sample = text[:SAMPLE_CHARS]
    truncated = len(text) > SAMPLE_CHARS
    scores = [(_score(sample, truncated, d, wanted), -i, d) for i, d in enumerate(DELIMITERS)]
    return max(scores)[2]


class CsvTable:
    """A CSV file's header and a reader of its records.

    Args:
        text: the decoded file (a leading BOM is dropped).
        wanted: header names (see :func:`header_key`) that help choose the delimiter (see :func:`choose_delimiter`).
    Raises:
        ParseError: the file is empty or its header row cannot be read.
    """

    def __init__(self, text: str, wanted: Collection[str] = ()) -> None:
        csv.field_size_limit(limits.MAX_RECORD_CHARS)  # the csv module's default is 131,072
        text = text.lstrip("\ufeff")
        self.delimiter = choose_delimiter(text, wanted)
        self._reader = csv.reader(io.StringIO(text, newline=""), _dialect(self.delimiter))
        try:
            header = next(self._reader)
        except StopIteration as exc:
            raise ParseError("empty CSV file") from exc
        except csv.Error as exc:
            _check_field_limit(exc, 1)
            raise ParseError(f"line 1: {exc}") from exc
        self.header: list[str] = [name.strip() for name in header]

    def records(self, fail: Callable[[str, str], None]) -> Iterator[CsvRecord]:
        """The records after the header, in order; blank lines are skipped.

        Args:
            fail: called as ``fail(where, reason)`` for each record that is not yielded: one
                the ``csv`` module cannot read, or whose field count is not the header's.
        """
        reader, width = self._reader, len(self.header)
        while True:
            start = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                _check_field_limit(exc, start)
                fail(f"line {start}", f"malformed CSV row{_span(start, reader.line_num)}: {_why(exc)}")
                if reader.line_num < start:  # the reader did not advance: nothing more can be read
                    return
                continue
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != width:
                fields = f"{len(row)} field" + ("" if len(row) == 1 else "s")
                fail(f"line {start}", f"row has {fields}, the header has {width}"
                                      f"{_span(start, reader.line_num)}: an unquoted {self.delimiter!r} "
                                      "or a stray quote?")
                continue
            yield CsvRecord(start, row)


def _check_field_limit(exc: csv.Error, line: int) -> None:
    """Fail the file when ``exc`` is the csv module's field-size limit.

    Raises:
        LimitExceededError: a field over :data:`~ingestion.loaders.limits.MAX_RECORD_CHARS` characters.
    """
    if str(exc).startswith("field larger than field limit"):
        raise LimitExceededError(f"line {line}: a field longer than {limits.MAX_RECORD_CHARS:,} characters "
                                 "(MAX_RECORD_CHARS); not ingested") from exc


def _span(start: int, end: int) -> str:
    return f" (lines {start}-{end})" if end > start else ""


def _why(exc: csv.Error) -> str:
    """The ``csv`` module's complaint in a reader's words."""
    message = str(exc)
    if message == "unexpected end of data":
        return "a quoted field is never closed (the file ends inside it)"
    if message.endswith("expected after '\"'"):
        return f"text after a closing quote ({message}); a quote inside a quoted field is written \"\""
    return message
