"""A space reserve (a "ballast file") in the data dir, so a full disk never locks the store.

SQLite in WAL mode and embedded Chroma write even to read: opening a database creates its
``-wal`` and ``-shm`` files, and a delete is a write transaction. On a disk with no byte free,
``copilot documents list`` and ``delete`` -- the tools that could free space -- would fail
with "database or disk is full" or "disk I/O error". So the store keeps a preallocated file of
:data:`DEFAULT_RESERVE_BYTES` in its data dir; when an open, a read or a delete meets a full
disk, the reserve is released (the file deleted) and the operation retried once. It is
allocated again when the store is next opened with room to spare. Ingest never releases it:
a full disk stops an ingest, as it must, and leaves the reserve for the clean-up.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

from ingestion.errors import StoreError

log = logging.getLogger(__name__)

#: Bytes kept in reserve (8 MiB: room for the WAL of a few deletes and Chroma's segment writes).
DEFAULT_RESERVE_BYTES = 8 * 1024 * 1024
RESERVE_NAME = "space-reserve"
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
        size: bytes to keep in reserve.
    """

    def __init__(self, data_dir: Path, size: int = DEFAULT_RESERVE_BYTES) -> None:
        self.path = Path(data_dir) / RESERVE_NAME
        self.size = size

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
        if self.size <= 0 or self.held() >= self.size:
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

    def require_room(self) -> None:
        """Refuse an ingest write where the reserve is released and cannot be allocated again:
        that room is for reading and deleting.

        Raises:
            StoreError: the disk is full (the message says what to do).
        """
        if not self.ensure():
            raise StoreError(f"the disk under {self.path.parent} is full: database or disk is full (the "
                             f"{self.size}-byte space reserve for reading and deleting is in use); "
                             "free space, then re-run")

    def release(self) -> int:
        """Delete the reserve; the bytes it freed (0 when there was none)."""
        freed = self.held()
        if freed:
            self.path.unlink(missing_ok=True)
            log.warning("the disk under %s is full: released the %d-byte space reserve so the store can be "
                        "read and cleaned up; free space, then ingest again", self.path.parent, freed)
        return freed
