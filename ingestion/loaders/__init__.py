"""Format detection and the single entry point :func:`load_file`.

Detection (first match wins):

1. known binary extensions (``.pdf .png .gz .zip`` ...) and undecodable bytes -> rejected;
2. content: first non-blank line ``$@MID@$: N`` -> ELOG (any extension);
3. extension: ``.md``/``.markdown`` -> Markdown, ``.json`` -> JSON (Jira search result or a
   list of ``{id, text}`` records), ``.jsonl``/``.ndjson`` -> JSON Lines, ``.csv``/``.tsv`` -> CSV
   tickets (Jira's own CSV export among them);
4. content: JSON text, YAML front matter, mostly time-stamped lines -> shift log;
5. otherwise plain text.

Empty and whitespace-only files give zero documents (the pipeline reports ``skipped-empty``).
Every loader is bounded by :mod:`ingestion.loaders.limits` (file size, records, text, metadata,
nesting, front-matter alias expansion); a file or record over a bound fails with the bound named.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

from ingestion.documents import Document
from ingestion.errors import BinaryFileError, LimitExceededError, ParseError, RecordLimitError, UnsupportedFormatError
from ingestion.loaders import csv_tickets, elog, jira, jsonl, limits, markdown, shiftlog, text
from ingestion.loaders.base import DEFAULT_CSV_COLUMNS, LoaderConfig, LoadResult
from ingestion.textio import decode_bytes

__all__ = ["DEFAULT_CSV_COLUMNS", "LoadResult", "LoaderConfig", "detect_format", "load_bytes", "load_file"]

#: Extensions that are never text; reported as failed without reading further.
BINARY_EXTENSIONS = frozenset({
    ".pdf", ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".ico", ".zip", ".gz", ".tgz",
    ".bz2", ".xz", ".zst", ".7z", ".rar", ".tar", ".exe", ".dll", ".so", ".dylib", ".o", ".a", ".bin", ".class",
    ".jar", ".pyc", ".doc", ".docx", ".xls", ".xlsx", ".ppt", ".pptx", ".odt", ".sqlite", ".sqlite3", ".db",
    ".parquet", ".pkl", ".npy", ".npz", ".pt", ".safetensors", ".gguf", ".mp3", ".mp4", ".avi", ".mov",
})


def detect_format(name: str, content: str) -> str:
    """Return ``elog``, ``markdown``, ``json``, ``jsonl``, ``csv``, ``shiftlog`` or ``text`` for decoded content."""
    ext = PurePosixPath(name).suffix.lower()
    if elog.sniff(content) or ext == ".elog":
        return "elog"
    if ext in (".md", ".markdown"):
        return "markdown"
    if ext == ".json":
        return "json"
    if ext in (".jsonl", ".ndjson"):
        return "jsonl"
    if ext in (".csv", ".tsv"):
        return "csv"
    stripped = content.lstrip()
    if stripped[:1] in ("{", "["):
        first_line = stripped.splitlines()[0] if stripped else ""
        try:
            json.loads(first_line)
            if len(stripped.splitlines()) > 1:
                return "jsonl"
        except (ValueError, RecursionError):  # not JSON, an over-long number, nested too deep
            pass
        return "json"
    if markdown.has_front_matter(content):
        return "markdown"
    if shiftlog.sniff(content):
        return "shiftlog"
    return "text"


def parse_json(content: str) -> Any:
    """Parse a whole-file JSON value within the bounds of :mod:`ingestion.loaders.limits`.

    Raises:
        LimitExceededError: over :data:`~limits.MAX_JSON_CHARS` or nested past :data:`~limits.MAX_NESTING_DEPTH`.
        ParseError: invalid or truncated JSON, or a number too long to convert.
    """
    if len(content) > limits.MAX_JSON_CHARS:
        raise LimitExceededError(f"JSON file of {len(content):,} characters; the limit is {limits.MAX_JSON_CHARS:,} "
                                 "(MAX_JSON_CHARS): export JSON Lines (one record a line) instead")
    try:
        data: Any = json.loads(content)
        limits.check_depth(data)
    except json.JSONDecodeError as exc:
        raise ParseError(f"invalid or truncated JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except RecordLimitError as exc:
        raise LimitExceededError(str(exc)) from exc
    except RecursionError as exc:
        raise LimitExceededError(str(limits.too_deep())) from exc
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise ParseError(f"invalid JSON: {exc}") from exc
    return data


def _load_json(content: str, source: str, config: LoaderConfig, encoding: str | None) -> LoadResult:
    data = parse_json(content)
    if jira.is_jira(data):
        return jira.load_data(data, source, config, encoding=encoding)
    if isinstance(data, dict) and "id" in data and "text" in data:
        data = [data]
    if jsonl.is_records(data):
        return jsonl.records_to_documents([(f"[{i}]", r) for i, r in enumerate(data)], source, config,
                                          encoding=encoding, fmt="json")
    if isinstance(data, list) and not data:
        return LoadResult([], "json", encoding)
    shape = type(data).__name__ if not isinstance(data, dict) else "object with keys " + ", ".join(list(data)[:8])
    raise UnsupportedFormatError(
        f"unrecognised JSON ({shape}): expected a Jira search result {{\"issues\": [...]}} "
        "or a list of {\"id\", \"text\"} records")


def load_bytes(data: bytes, source: str, *, name: str | None = None, config: LoaderConfig | None = None) -> LoadResult:
    """Decode and parse one file's bytes.

    Args:
        data: the file content.
        source: the source path stored in documents (relative, forward slashes).
        name: file name used for extension-based detection (default: ``source``).
        config: loader options.
    Returns:
        A :class:`LoadResult`; zero documents for empty or whitespace-only files. Records that
        could not be read (an empty key, a malformed entry) are in ``failures``, each with its
        position and reason; the file's good records are in ``documents``.
    Raises:
        BinaryFileError, ParseError, UnsupportedFormatError: the file as a whole cannot be ingested.
        LimitExceededError, RecordLimitError: the file (or the one document of a one-document
            format) exceeds a bound of :mod:`ingestion.loaders.limits`.
    """
    config = config or LoaderConfig()
    name = name or source
    if PurePosixPath(name).suffix.lower() in BINARY_EXTENSIONS:
        raise BinaryFileError(f"binary file type {PurePosixPath(name).suffix!r} is not ingested")
    if len(data) > limits.MAX_FILE_BYTES:
        raise LimitExceededError(f"file of {len(data):,} bytes; the limit is {limits.MAX_FILE_BYTES:,} "
                                 "(MAX_FILE_BYTES): split it")
    decoded = decode_bytes(data, name=name)
    content, encoding = decoded.text, decoded.encoding
    if not content.strip():
        return LoadResult([], "empty", encoding)
    fmt = detect_format(name, content)
    loaders = {"elog": elog.load, "markdown": markdown.load, "jsonl": jsonl.load, "csv": csv_tickets.load,
               "shiftlog": shiftlog.load, "text": text.load}
    if fmt == "json":
        return _load_json(content, source, config, encoding)
    return loaders[fmt](content, source, config, encoding=encoding)


def load_file(path: Path, source: str | None = None, config: LoaderConfig | None = None) -> list[Document]:
    """Load the documents of one file.

    Args:
        path: file to read.
        source: source path recorded in doc ids and metadata (default: ``path`` with forward slashes).
        config: loader options.
    Raises:
        OSError: unreadable file. LoaderError subclasses: see :func:`load_bytes`.
    """
    path = Path(path)
    return load_bytes(path.read_bytes(), source or path.as_posix(), name=path.name, config=config).documents
