"""The loaders' bounds: how much one file may make, in one place.

A hostile or broken file must never hang a loader or make it use memory out of proportion to
the file (a 326-byte YAML alias bomb once expanded to 3.85 MB of text). Every loader is bound
by the limits below; exceeding one fails the record (a JSON Lines line, a CSV row, an issue)
with :class:`~ingestion.errors.RecordLimitError` or the whole file with
:class:`~ingestion.errors.LimitExceededError`, each with a reason naming the limit. Valid
exports sit far below every one of them: the largest real Jira ADF tree nests about 50
levels, front matter is a few hundred bytes, a 100,000-ticket export is about 54 MB.

The checks that need the parsed value (nesting depth) are here; the checks on what a loader
builds (key, text, metadata, record counts) sit in
:class:`ingestion.loaders.base.DocumentBuilder`, the one place every document is made.
"""

from __future__ import annotations

from typing import Any

from ingestion.errors import RecordLimitError

KiB = 2**10
MiB = 2**20

#: Bytes of one file; a larger one fails before it is decoded.
MAX_FILE_BYTES = 256 * MiB
#: Characters of a file parsed as one JSON value (``.json``: a Jira search result, a record list);
#: the whole value is in memory at once (up to ~25x its text), so this is lower than the file bound.
#: JSON Lines is read line by line and is bound by :data:`MAX_RECORD_CHARS` per line instead.
MAX_JSON_CHARS = 32 * MiB
#: Characters of one record's source text (a JSON Lines line): twice the document bound, as JSON
#: escapes (``\\n``, ``\\"``) may double a text's length.
MAX_RECORD_CHARS = 16 * MiB

#: Records of one file: documents built plus records that failed.
MAX_RECORDS = 500_000
#: Failed records of one file; past this the file is not the format it looks like and fails whole.
MAX_FAILED_RECORDS = 10_000

#: Characters of one document's text (the body that is chunked and embedded).
MAX_DOCUMENT_CHARS = 8 * MiB
#: Characters of text of all documents of one file (a safety net: loaders add labels, never multiply).
MAX_FILE_TEXT_CHARS = 512 * MiB
#: Characters of a document key (ticket key, record id, MID, shift name); it is part of the doc id.
MAX_KEY_CHARS = 1 * KiB
#: Characters of one metadata value (a list: its items together). Metadata is copied to every chunk.
MAX_FIELD_CHARS = 32 * KiB
#: Characters of all metadata of one document, names and values together.
MAX_METADATA_CHARS = 64 * KiB

#: Containers inside containers in a JSON or YAML value (serde_json's default; real exports < 60).
MAX_NESTING_DEPTH = 128

#: Characters of a Markdown file's YAML front matter block.
MAX_FRONT_MATTER_CHARS = 64 * KiB
#: YAML nodes (scalars, lists, mappings) of the front matter with every alias expanded.
MAX_YAML_NODES = 10_000
#: Characters of the front matter's scalars with every alias expanded.
MAX_YAML_SCALAR_CHARS = 64 * KiB


def check_depth(value: Any, what: str = "JSON value") -> None:
    """Fail when ``value`` (parsed JSON: dicts, lists, scalars) nests containers deeper than
    :data:`MAX_NESTING_DEPTH`.

    Walks the value iteratively (no recursion, so any depth is safe) and stops at the first
    container past the limit.

    Raises:
        RecordLimitError: a container one level past the limit (the message names ``what`` and the limit).
    """
    limit = MAX_NESTING_DEPTH
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            raise RecordLimitError(f"{what} nests deeper than {limit} levels (MAX_NESTING_DEPTH)")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def too_deep(what: str = "JSON value") -> RecordLimitError:
    """The error for a value so deep that Python's parser gave up (a ``RecursionError``)."""
    return RecordLimitError(f"{what} nests deeper than {MAX_NESTING_DEPTH} levels (MAX_NESTING_DEPTH)")
