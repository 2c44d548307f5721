"""Shared loader pieces: configuration, the document builder, metadata helpers.

The record rule (the same in every loader): each record of a file (a Jira issue, a CSV row,
a JSON Lines line, an ELOG entry) is built inside :meth:`DocumentBuilder.record`. A record
that is unusable -- an empty or blank key, a malformed entry, any error while reading it --
fails alone: it is listed in :attr:`LoadResult.failures` with its position (``line 12``,
``issues[3]``) and the reason, and every good record of the file is still returned.
A file whose every record fails gives no documents and the failures; the pipeline then
reports the file ``failed``.

The size rule: every document is checked here against :mod:`ingestion.loaders.limits` -- its
key, text and metadata (a record over a bound fails alone, with the bound named), and the
file's running totals (records, failed records, text; past one the whole file fails). A long
text within the bound is kept whole and chunked downstream.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ingestion.documents import Document, Metadata, make_doc_id
from ingestion.errors import LimitExceededError, RecordError, RecordLimitError
from ingestion.loaders import limits
from ingestion.timeparse import get_tz

log = logging.getLogger(__name__)

#: Bumped when a loader change alters the documents it builds, so every file is parsed again
#: once (documents whose content did not change are still not re-embedded).
LOADER_VERSION = "3"

#: Default CSV ticket columns: logical field -> column header in the export.
DEFAULT_CSV_COLUMNS: dict[str, str] = {
    "ticket_id": "ticket_id",
    "site": "site",
    "subject": "subject",
    "status": "status",
    "opened": "opened",
    "updated": "updated",
    "description": "description",
}


@dataclass(frozen=True)
class LoaderConfig:
    """Options for the loaders.

    Attributes:
        csv_columns: logical field -> CSV column header. Logical fields: ``ticket_id``
            (required), ``site``, ``subject``, ``status``, ``opened``, ``updated``,
            ``description``, optionally ``author``, ``labels``. Unmapped columns are kept
            as metadata. A field left at its default header that the file lacks is read from
            an obvious column instead (``id``, ``key``, ``title`` ...; see
            :mod:`ingestion.loaders.csv_tickets`).
        default_timezone: IANA zone for naive timestamps (shift logs, CSV exports).
        shift_starts: shift start times ``HH:MM`` and names, used to group shift-log
            lines when the file has no ``=== Shift ... ===`` header lines.
    """

    csv_columns: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_CSV_COLUMNS))
    default_timezone: str = "UTC"
    shift_starts: tuple[tuple[str, str], ...] = (("06:00", "morning"), ("14:00", "afternoon"), ("22:00", "night"))

    @property
    def tz(self) -> dt.tzinfo:
        """The tzinfo for :attr:`default_timezone`."""
        return get_tz(self.default_timezone)

    def signature(self) -> str:
        """Short hash of the settings; a change re-parses every file."""
        payload = json.dumps(
            {"csv": sorted(self.csv_columns.items()), "tz": self.default_timezone, "shifts": self.shift_starts,
             "loaders": LOADER_VERSION},
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def clean_str(value: Any) -> str | None:
    """Strip a value to a string; empty/None -> None."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def as_str_list(value: Any) -> list[str]:
    """Normalise a list-ish value (list, tuple, comma/semicolon string) to a list of non-empty strings."""
    if value is None:
        return []
    if isinstance(value, (list, tuple, set)):
        items = [clean_str(v if not isinstance(v, dict) else v.get("name") or json.dumps(v, sort_keys=True))
                 for v in value]
    else:
        text = str(value)
        sep = ";" if ";" in text else ","
        items = [clean_str(part) for part in text.split(sep)]
    return [item for item in items if item]


def scalar_metadata(value: Any) -> Any:
    """Coerce an arbitrary JSON/YAML value into a metadata value (scalar, list[str] or None)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, (list, tuple, set)):
        return as_str_list(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def require_key(value: Any, name: str) -> str:
    """The record key ``value`` as written (``str(value)``, not stripped).

    Args:
        value: the raw key (ticket key, record id, MID ...).
        name: the field's name, for the error message (``'key'``, ``'id'``).
    Raises:
        RecordError: the key is missing, empty or blank, or not a scalar.
    """
    if value is None:
        raise RecordError(f"missing {name}")
    if isinstance(value, (dict, list, tuple, set)):
        raise RecordError(f"{name} is a {type(value).__name__}, not a string")
    key = str(value)
    if not key.strip():
        raise RecordError(f"empty or blank {name} {key!r}")
    return key


def check_size(what: str, size: int, limit: int, name: str) -> None:
    """Fail a record whose ``what`` is ``size`` characters, over ``limit`` (the bound called ``name``).

    Raises:
        RecordLimitError: ``size > limit``.
    """
    if size > limit:
        raise RecordLimitError(f"{what} is {size:,} characters; the limit is {limit:,} ({name})")


def _value_chars(value: Any) -> int:
    """Characters a metadata value takes (a list: its items together)."""
    if isinstance(value, (list, tuple)):
        return sum(len(str(item)) for item in value)
    return 0 if value is None else len(str(value))


def check_metadata(meta: Metadata) -> None:
    """Fail a record whose metadata has a value over :data:`limits.MAX_FIELD_CHARS` or, names and
    values together, over :data:`limits.MAX_METADATA_CHARS`.

    Raises:
        RecordLimitError: naming the field (or the total) and the bound.
    """
    total = 0
    for name, value in meta.items():
        size = _value_chars(value)
        check_size(f"metadata field {name[:80]!r}", size, limits.MAX_FIELD_CHARS, "MAX_FIELD_CHARS")
        total += len(name) + size
    check_size("metadata", total, limits.MAX_METADATA_CHARS, "MAX_METADATA_CHARS")


@dataclass(frozen=True)
class RecordFailure:
    """A record that was not stored: ``where`` it is in the file (``line 12``, ``issues[3]``) and why."""

    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


class DocumentBuilder:
    """Creates the documents of one source file, keeping keys exactly as written.

    A key that occurs twice in one file (a duplicated export row, two shifts with the
    same name) gets ``~2``, ``~3`` ... appended to the later occurrences, with a warning,
    so no entry is silently lost. Records are built inside :meth:`record`, which isolates
    a bad one (see the module docstring).
    """

    def __init__(self, source: str, doc_type: str, *, encoding: str | None = None) -> None:
        self.source = source
        self.doc_type = doc_type
        self.encoding = encoding
        self.documents: list[Document] = []
        self.warnings: list[str] = []
        self.failures: list[RecordFailure] = []
        self._seen: dict[str, int] = {}
        self._text_chars = 0

    @contextlib.contextmanager
    def record(self, where: str) -> Iterator[None]:
        """Build one record inside this block; if it raises, only that record fails.

        Args:
            where: the record's position as a reader finds it (``line 12``, ``issues[3]``).
        A :class:`RecordError` (or any other exception, e.g. a wrong type in a malformed
        entry) is recorded in :attr:`failures` with ``where`` and the reason, and swallowed.
        A :class:`LimitExceededError` (a bound of the whole file) is not: it fails the file.
        """
        try:
            yield
        except RecordError as exc:
            self.fail(where, str(exc))
        except LimitExceededError:
            raise
        except RecursionError:  # a value nested past what Python's parsers handle
            self.fail(where, str(limits.too_deep()))
        except Exception as exc:  # a malformed entry the loader did not foresee fails alone
            log.debug("%s %s: %s", self.source, where, exc, exc_info=True)
            self.fail(where, f"malformed record ({type(exc).__name__}: {exc})")

    def fail(self, where: str, reason: str) -> None:
        """Record that the record at ``where`` was not stored, and why.

        Raises:
            LimitExceededError: more than :data:`~ingestion.loaders.limits.MAX_FAILED_RECORDS`
                failed records, or more than :data:`~ingestion.loaders.limits.MAX_RECORDS` in all.
        """
        failure = RecordFailure(where, reason)
        log.warning("%s: %s", self.source, failure)
        self.failures.append(failure)
        if len(self.failures) > limits.MAX_FAILED_RECORDS:
            raise LimitExceededError(f"more than {limits.MAX_FAILED_RECORDS:,} records failed (MAX_FAILED_RECORDS); "
                                     f"is this the format it looks like? first: {self.failures[0]}")
        self._check_record_count(0)

    def _check_record_count(self, pending: int) -> None:
        """Fail the file when its records (built, failed and ``pending``) exceed :data:`limits.MAX_RECORDS`."""
        if len(self.documents) + len(self.failures) + pending > limits.MAX_RECORDS:
            raise LimitExceededError(f"more than {limits.MAX_RECORDS:,} records in one file (MAX_RECORDS); "
                                     "split the file")

    def add(self, key: str, text: str, metadata: Metadata, *, doc_type: str | None = None) -> Document:
        """Append a document with ``key`` (as written), body ``text`` and ``metadata``.

        Raises:
            RecordError: ``key`` is empty or blank, the record holds a NUL character, or
                (:class:`RecordLimitError`) the key, text or metadata exceed their bounds
                (inside :meth:`record`, only this record fails).
            LimitExceededError: the file's records or text exceed their bounds.
        """
        key = require_key(key, "key")
        if "\x00" in key or "\x00" in text or any(isinstance(v, str) and "\x00" in v for v in metadata.values()):
            raise RecordError("the record holds NUL bytes (a damaged entry); the file's other records are stored")
        check_size("key", len(key), limits.MAX_KEY_CHARS, "MAX_KEY_CHARS")
        check_size("document text", len(text), limits.MAX_DOCUMENT_CHARS, "MAX_DOCUMENT_CHARS")
        count = self._seen.get(key, 0) + 1
        self._seen[key] = count
        final_key = key if count == 1 else f"{key}~{count}"
        if count > 1:
            msg = f"duplicate key {key!r} in {self.source}; stored as {final_key!r}"
            log.warning(msg)
            self.warnings.append(msg)
        meta: Metadata = {
            "source": self.source,
            "doc_type": doc_type or self.doc_type,
            "key": final_key,
        }
        for name, value in metadata.items():
            if name in ("source", "doc_type", "key"):
                name = f"record_{name}"
            meta[name] = value
        if self.encoding and self.encoding not in ("utf_8", "ascii"):
            meta["encoding"] = self.encoding
        check_metadata(meta)
        self._text_chars += len(text)
        if self._text_chars > limits.MAX_FILE_TEXT_CHARS:
            raise LimitExceededError(f"the file's documents hold more than {limits.MAX_FILE_TEXT_CHARS:,} characters "
                                     "of text (MAX_FILE_TEXT_CHARS)")
        self._check_record_count(1)
        doc = Document(doc_id=make_doc_id(self.source, final_key), text=text, metadata=meta)
        self.documents.append(doc)
        return doc


    def result(self, fmt: str) -> "LoadResult":
        """The :class:`LoadResult` of the records built so far (documents, warnings, failures)."""
        return LoadResult(self.documents, fmt, self.encoding, self.warnings, self.failures)


@dataclass
class LoadResult:
    """What a loader returns: the documents of one file, its format name, warnings, and the
    records that failed (:class:`RecordFailure`, each with its position and reason)."""

    documents: list[Document]
    format: str
    encoding: str | None = None
    warnings: list[str] = field(default_factory=list)
    failures: list[RecordFailure] = field(default_factory=list)
