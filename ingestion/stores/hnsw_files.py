"""The files of an embedded Chroma's HNSW segments: checking that they can be read, and clearing
the bytes hnswlib leaves in their unused slots.

Chroma keeps each collection's vector index in a folder named after its vector segment's id, next
to ``chroma.sqlite3``. Once the index has been persisted (after ``sync_threshold`` records, or a
purge) the folder holds hnswlib's files and Chroma's id map:

==========================  ===========================================================================
``header.bin``              an int32 version (1), then ``offsetLevel0, max_elements, cur_element_count,
                            size_per_element`` as uint64, then more fields (100 bytes in all)
``data_level0.bin``         one slot of ``size_per_element`` bytes per element (level-0 links, vector, label)
``length.bin``              one 4-byte link-list length per slot
``link_lists.bin``          the upper levels' links
``index_metadata.pickle``   Chroma's id <-> label map, a pickle (protocol 2+: starts ``\\x80``, ends ``.``)
==========================  ===========================================================================

``chroma.sqlite3`` records how far the log was applied to each segment (``max_seq_id``); the
records before that point may already be purged from the log, so a persisted segment whose files
are missing or cut short cannot be rebuilt by Chroma: every dense read then fails ("Error creating
hnsw segment reader"), or, worse, silently sees only the records still in the log. A disk that
fills while Chroma persists leaves exactly that (issue 46: ``index_metadata.pickle`` cut at
307,200 bytes). The checks here are cheap (a few ``stat`` calls, 100 bytes of header and the id map
read per segment, about 40 ms per MiB of it) and name the file, so the store can say what is damaged
in one line. What they cannot see (bytes changed in place) shows when a search fails twice.
"""

from __future__ import annotations

import logging
import os
import pickletools
import sqlite3
import struct
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

HEADER = "header.bin"
DATA = "data_level0.bin"
LENGTHS = "length.bin"
LINKS = "link_lists.bin"
ID_MAP = "index_metadata.pickle"
SEGMENT_FILES = (HEADER, DATA, LENGTHS, LINKS, ID_MAP)
#: Id maps up to this size (32 MiB, about 600,000 chunks) are read whole at open to check them.
PARSED_PICKLE_BYTES = 32 << 20


@dataclass(frozen=True)
class HnswHeader:
    """What ``header.bin`` says of the slots (sizes in bytes)."""

    max_elements: int
    used: int
    per_element: int

    @classmethod
    def read(cls, path: Path) -> HnswHeader | None:
        """The header at ``path``; None when it is too short or of another version.

        Raises:
            OSError: the file cannot be read.
        """
        raw = path.read_bytes()
        if len(raw) < 36 or struct.unpack_from("<i", raw, 0)[0] != 1:
            return None
        _, max_elements, used, per_element = struct.unpack_from("<4Q", raw, 4)
        if used > max_elements or per_element == 0:
            return None
        return cls(max_elements, used, per_element)


def persisted_segments(sqlite_path: Path) -> dict[str, int]:
    """Vector segment id -> the log position Chroma has persisted it to (``max_seq_id``; 0 when never).

    Reads ``chroma.sqlite3`` read-only through Python's SQLite, so call it only while no Chroma client
    of this process has the file open (closing one SQLite library's handle drops the other's locks).
    A missing or unreadable file gives ``{}`` (Chroma's own open reports it).
    """
    if not sqlite_path.is_file():
        return {}
    try:
        conn = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return {}
    try:
        rows = conn.execute("SELECT s.id, COALESCE(m.seq_id, 0) FROM segments s LEFT JOIN max_seq_id m "
                            "ON m.segment_id = s.id WHERE s.scope = 'VECTOR'").fetchall()
    except sqlite3.Error as exc:
        log.warning("cannot read Chroma's segments from %s: %s", sqlite_path, exc)
        return {}
    finally:
        conn.close()
    return {str(segment): int(seq) if isinstance(seq, int) else 0 for segment, seq in rows}


def segment_damage(folder: Path, persisted: bool) -> str | None:
    """Why the HNSW segment in ``folder`` cannot be read, naming the file; None when it can.

    Args:
        folder: the segment's folder.
        persisted: Chroma recorded the segment as persisted (its files must then exist; one that
            was not is built from Chroma's log, whatever its folder holds).
    """
    if not persisted:  # Chroma builds it from its log
        return None
    if not folder.is_dir():
        return f"{folder} is missing (the index was persisted there)"
    for name in SEGMENT_FILES:
        if not (folder / name).is_file():
            return f"{folder / name} is missing"
    try:
        header = HnswHeader.read(folder / HEADER)
        if header is None:
            return f"{folder / HEADER} is not an HNSW header (cut short, or another version)"
        for name, width in ((DATA, header.per_element), (LENGTHS, 4)):
            size = (folder / name).stat().st_size
            if size < header.used * width:
                return f"{folder / name} is cut short ({size} bytes; {header.used} elements need {header.used * width})"
        if not _whole_pickle(folder / ID_MAP):
            return f"{folder / ID_MAP} is cut short or not a pickle"
    except OSError as exc:
        return f"{folder}: {exc.strerror or exc}"
    return None


def _whole_pickle(path: Path) -> bool:
    """Whether ``path`` holds one whole pickle: read opcode by opcode (:func:`pickletools.genops`, which
    runs nothing) up to its STOP at the last byte (about 40 ms per MiB); a file over
    :data:`PARSED_PICKLE_BYTES` is only checked for its first and last opcodes.

    Raises:
        OSError: the file cannot be read.
    """
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if size > PARSED_PICKLE_BYTES:
            first = handle.read(1)
            handle.seek(size - 1)
            return first == b"\x80" and handle.read(1) == b"."
        data = handle.read()
    try:
        last = None
        for opcode, _, position in pickletools.genops(data):
            last = (opcode.name, position)
    except (ValueError, KeyError, UnicodeDecodeError):
        return False
    return data[:1] == b"\x80" and last == ("STOP", len(data) - 1)


def index_damage(chroma_dir: Path, segments: dict[str, int]) -> str | None:
    """The first damaged vector segment under ``chroma_dir`` in one line, or None.

    Args:
        chroma_dir: the embedded Chroma's folder.
        segments: :func:`persisted_segments` of its ``chroma.sqlite3``.
    """
    for segment, seq in segments.items():
        problem = segment_damage(chroma_dir / segment, persisted=seq > 0)
        if problem is not None:
            return problem
    return None


def segment_bytes(chroma_dir: Path) -> int:
    """Bytes of every HNSW segment file under ``chroma_dir`` (0 when there is none): what Chroma's
    next save of the index may write at once (it rewrites ``index_metadata.pickle`` whole, and
    ``data_level0.bin`` whole when the index grows)."""
    total = 0
    for name in SEGMENT_FILES:
        for path in chroma_dir.glob(f"*/{name}"):
            try:
                total += path.stat().st_size
            except OSError:
                continue
    return total


def zero_unused_hnsw_slots(segment_dir: Path) -> int:
    """Overwrite the unused slots of a segment's ``data_level0.bin`` and ``length.bin`` with zeros.

    hnswlib saves whole buffers: ``max_elements`` slots, of which only the first
    ``cur_element_count`` are in use (a file that holds only the used slots has nothing to clear).
    The rest is memory it allocated and never initialised, so it holds whatever the process freed
    before it — seen here: the text of a chunk just deleted, in either file. hnswlib sets a slot
    itself when it takes one, so zeros there change nothing it reads.

    Returns:
        Bytes overwritten (0 when the layout is not the one described: the files are left alone).
    """
    if not (segment_dir / DATA).is_file():
        return 0
    header = HnswHeader.read(segment_dir / HEADER)
    if header is None:
        log.warning("%s: unknown HNSW file layout; its unused slots are not cleared", segment_dir.name)
        return 0
    cleared = 0
    for path, width in ((segment_dir / DATA, header.per_element), (segment_dir / LENGTHS, 4)):
        size = path.stat().st_size if path.is_file() else 0
        if size == header.used * width:
            continue  # saved without its unused slots (or absent): nothing to clear
        if size != header.max_elements * width:
            log.warning("%s: unknown HNSW file layout of %s; its unused slots are not cleared",
                        segment_dir.name, path.name)
            continue
        cleared += _zero_from(path, header.used * width, size)
    return cleared


def _zero_from(path: Path, start: int, size: int) -> int:
    """Overwrite ``path`` with zeros from byte ``start`` to ``size`` (synced); the bytes written."""
    with open(path, "r+b") as handle:
        handle.seek(start)
        for offset in range(start, size, 1 << 20):
            handle.write(bytes(min(1 << 20, size - offset)))
        handle.flush()
        os.fsync(handle.fileno())
    return size - start
