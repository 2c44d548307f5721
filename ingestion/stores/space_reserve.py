"""A space reserve (a "ballast file") in the data dir, so a full disk never locks the store.

SQLite in WAL mode and embedded Chroma write even to read: opening a database creates its
``-wal`` and ``-shm`` files, and a delete is a write transaction. On a disk with no byte free,
``copilot documents list`` and ``delete`` -- the tools that could free space -- would fail
with "database or disk is full" or "disk I/O error". So the store keeps a preallocated file of
:data:`DEFAULT_RESERVE_BYTES` in its data dir; when an open, a read or a delete meets a full
disk, the reserve is released (the file deleted) and the operation retried once. It is
allocated again when the store is next opened with room to spare. Ingest never releases it:
a full disk stops an ingest, as it must, and leaves the reserve for the clean-up.

A full disk must also never cut a file of the dense index short: embedded Chroma saves its HNSW
segment (``data_level0.bin``, ``index_metadata.pickle``, ...) every ``sync_threshold`` records, and a
save that meets a full disk leaves a file Chroma cannot read again (issue 46). So before each
batch is written, :meth:`SpaceReserve.require_room` asks for room for the batch's chunks
(:func:`room_for`: a measured bound per byte of text and per chunk) plus a whole save of the HNSW
segment files as they are now (:func:`~ingestion.stores.hnsw_files.segment_bytes`), on top of the
reserve; an ingest on a filling disk then stops cleanly between batches, naming the sizes.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ingestion.documents import Chunk
from ingestion.errors import StoreError
from ingestion.stores.hnsw_files import segment_bytes

log = logging.getLogger(__name__)

#: Bytes kept in reserve (8 MiB: room for the WAL of a few deletes and Chroma's segment writes).
DEFAULT_RESERVE_BYTES = 8 * 1024 * 1024
#: On a small disk the reserve is an eighth of it, and never less than this (1 MiB).
MIN_RESERVE_BYTES = 1024 * 1024
RESERVE_NAME = "space-reserve"
#: Disk bytes a stored chunk takes per byte of its text and metadata: SQLite's chunk row and its
#: full-text index, Chroma's log, its metadata rows and its trigram index each keep the text, and a
#: write-ahead log holds the pages once more until a checkpoint. Measured on an empty store, per
#: corpus (bytes stored / bytes of text and metadata, all costs included): 7.0 for 20,000 short
#: tickets, 9.4 for the long-record set, 10.7 for the sample corpus. With :data:`BYTES_PER_CHUNK`
#: the estimate is 1.2-2.0x what those ingests used.
BYTES_PER_TEXT_BYTE = 12
#: Disk bytes per chunk besides its text: rows, index entries and the HNSW slot (plus 8 per dimension).
BYTES_PER_CHUNK = 1024
_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
#: SQLite's words for a full disk ("disk I/O error" is what it says when it cannot create ``-shm``).
_FULL_WORDS = ("database or disk is full", "no space left on device", "disk quota exceeded", "disk i/o error")


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the disk is full: an OSError with
    ``ENOSPC``/``EDQUOT``, or an error in SQLite's words for it (SQLite's own, or Chroma's and the
    store's, which quote them)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return True
        if any(words in str(current).lower() for words in _FULL_WORDS):
            return True
        current = current.__cause__ or current.__context__
    return False


class SpaceReserve:
    """The reserve file ``data_dir/space-reserve`` of ``size`` bytes (0: no reserve).

    Args:
        data_dir: the store's data dir (where its SQLite and Chroma files live).
        size: bytes to keep in reserve; on a disk smaller than 8 times that, an eighth of the disk
            (at least :data:`MIN_RESERVE_BYTES`), so a small disk still stores documents.
    """

    def __init__(self, data_dir: Path, size: int = DEFAULT_RESERVE_BYTES) -> None:
        self.path = Path(data_dir) / RESERVE_NAME
        try:
            disk = shutil.disk_usage(self.path.parent).total
        except OSError:
            disk = 0
        self.size = min(size, max(MIN_RESERVE_BYTES, disk // 8)) if size > 0 and disk else size

    def held(self) -> int:
        """Bytes the reserve holds now (0 when released)."""
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def free(self) -> int:
        """Bytes free on the data dir's filesystem (0 when it cannot be read)."""
        try:
            return shutil.disk_usage(self.path.parent).free
        except OSError:
            return 0

    def low(self) -> bool:
        """Whether the disk has less room than the reserve would give (a write failing now is
        likely a full disk, whatever words the failing library used)."""
        return self.size > 0 and self.free() < self.size

    def ensure(self) -> bool:
        """Allocate the reserve if it is missing and the disk has twice its size free; True when held.

        Never raises: a reserve that cannot be allocated is logged and tried again next time.
        """
        held = self.held()
        if self.size <= 0 or held == self.size:
            return True
        if held > self.size:  # kept from a larger disk, or before the reserve was sized to this one
            os.truncate(self.path, self.size)
            return True
        if self.free() < 2 * self.size:
            return False
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.size)  # real blocks, not a sparse file
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("cannot allocate the %d-byte space reserve %s: %s", self.size, self.path,
                        exc.strerror or exc)
            self.path.unlink(missing_ok=True)
            return False
        return True

    def require_room(self, chunks: Sequence[Chunk] = (), dim: int = 0) -> None:
        """Refuse an ingest write the disk cannot finish: where the reserve is released and cannot be
        allocated again (that room is for reading and deleting), or where writing ``chunks`` (vectors
        of ``dim`` float32s) and then a save of the dense index would leave less than the reserve.
        Nothing to check without a reserve (a PostgreSQL store keeps nothing in the data dir).

        Raises:
            StoreError: the disk is full, or too full for this write: the message says how many bytes
                the write needs, how many are free, and what to do.
        """
        if self.size <= 0:
            return
        if not self.ensure():
            free = self.free()
            raise StoreError(f"the disk under {self.path.parent} is full: database or disk is full ({_mib(free)} free; "
                             f"the store keeps a {_mib(self.size)} space reserve for reading and deleting and needs "
                             f"{_mib(2 * self.size)} free to set it aside); free space (or use a larger disk), "
                             "then re-run")
        need = room_for(chunks, dim) + segment_bytes(self.path.parent / "chroma") if chunks else 0
        free = self.free()  # with the reserve set aside
        if need > free:
            raise StoreError(f"the disk under {self.path.parent} is full: writing the next {len(chunks)} chunks needs "
                             f"about {_mib(need)} (the chunks, and a save of the dense index's files as they are now) "
                             f"and {_mib(free)} is free besides the {_mib(self.size)} space reserve; free space, "
                             "then re-run")

    def release(self) -> int:
        """Delete the reserve; the bytes it freed (0 when there was none)."""
        freed = self.held()
        if freed:
            self.path.unlink(missing_ok=True)
            log.warning("the disk under %s is full: released the %d-byte space reserve so the store can be "
                        "read and cleaned up; free space, then ingest again", self.path.parent, freed)
        return freed


def room_for(chunks: Sequence[Chunk], dim: int) -> int:
    """Disk bytes storing ``chunks`` with ``dim``-dimensional float32 vectors may take, at most
    (:data:`BYTES_PER_TEXT_BYTE`, :data:`BYTES_PER_CHUNK`)."""
    text = sum(len(c.text.encode()) + len(json.dumps(c.metadata, ensure_ascii=False, default=str)) for c in chunks)
    return BYTES_PER_TEXT_BYTE * text + len(chunks) * (BYTES_PER_CHUNK + 8 * dim)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"
