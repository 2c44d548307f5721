"""Exceptions raised by ingestion. Loader errors become a per-file ``failed`` status."""

from __future__ import annotations

from typing import Any


class IngestError(Exception):
    """Base class for every ingestion error."""


class LoaderError(IngestError):
    """A source file cannot be turned into documents; the message is the report reason."""


class BinaryFileError(LoaderError):
    """The file is binary (or in no text encoding we can detect) and is not ingested."""


class UnsupportedFormatError(LoaderError):
    """The file's format was recognised as one we do not ingest (e.g. an unknown JSON shape)."""


class ParseError(LoaderError):
    """The file looks like a supported format but is malformed (truncated JSON, bad CSV ...)."""


class RecordError(LoaderError):
    """One record of a file (a ticket, an entry, a line) is unusable: an empty or blank key,
    a malformed entry. Only that record fails; it is reported with its position and this reason
    (see :meth:`ingestion.loaders.base.DocumentBuilder.record`)."""


class LimitExceededError(LoaderError):
    """A file exceeds one of the loaders' bounds (:mod:`ingestion.loaders.limits`: its size, its
    record count, its front matter's alias expansion ...); the whole file fails with this reason."""


class RecordLimitError(RecordError):
    """One record exceeds a per-record bound of :mod:`ingestion.loaders.limits` (its text, key,
    metadata or nesting depth); only that record fails -- or the file, for one-document formats."""


class StoreError(IngestError):
    """The chunk store is unusable (unreachable server, model mismatch, locked)."""


class StoreLockedError(StoreError):
    """Another ingest run holds the store's ingest lock.

    Attributes:
        holder: what the lock file records about the holder (``pid``, ``host``, ``started``),
            empty when it records nothing readable.
    """

    def __init__(self, message: str, holder: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.holder = dict(holder or {})
