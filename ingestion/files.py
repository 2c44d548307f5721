"""Which files an ingest reads, what they are called, and reading them without opening anything else.

Folders are walked recursively in a stable order, hidden entries skipped and symlinked folders
inside them not followed. A file's source name is its path relative to the ingest root, with
forward slashes; a symlink is named by its own path, not its target's. Only regular files are
read: a named pipe, socket, device or broken symlink is refused without being opened (``os.stat``
first; the file is then opened non-blocking and checked again with ``fstat``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path


def own_path(path: Path) -> Path:
    """The absolute path of ``path`` itself: folders above it resolved, a symlink's own name kept."""
    path = Path(path)
    return Path(os.path.realpath(path.parent)) / path.name


def discover_files(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """Expand ``paths`` into directory entries to ingest (folders walked recursively, sorted,
    hidden entries skipped, symlinked folders inside them not followed).

    Nothing is opened: named pipes, sockets, devices and broken symlinks are listed too (the
    pipeline reports them ``skipped``).

    Returns:
        (files, missing): entries in a stable order (each once, by its own absolute path),
        and paths that do not exist.
    """
    files: list[Path] = []
    missing: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            candidates: list[Path] = []
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                candidates.extend(Path(dirpath) / f for f in sorted(filenames) if not f.startswith("."))
        elif os.path.lexists(path):  # a file, or something that is not one (reported, never opened)
            candidates = [path]
        else:
            missing.append(path)
            continue
        for candidate in candidates:
            key = own_path(candidate)
            if key not in seen:
                seen.add(key)
                files.append(candidate)
    return files, missing


def common_root(paths: Sequence[Path]) -> Path:
    """The deepest directory containing every path (a single directory is its own root, a file's root is its parent)."""
    if not paths:
        return Path.cwd()
    dirs = [Path(p).resolve() if Path(p).is_dir() else own_path(Path(p)).parent for p in paths]
    return Path(os.path.commonpath([str(d) for d in dirs]))


def source_name(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` with forward slashes (the absolute path if outside ``root``).

    A symlink is named by its own path, not its target's.
    """
    own = own_path(path)
    try:
        return own.relative_to(root.resolve()).as_posix()
    except ValueError:
        return own.as_posix()


_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


def _not_regular(mode: int) -> str | None:
    """Why a file with this ``st_mode`` is not read (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"{kind}, not a regular file: never opened"


class NotRegularFileError(OSError):
    """The path is not a regular file (named pipe, socket, device, folder, broken symlink); it was not read."""


def read_regular_file(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file (a symlink to one is fine), never opening anything else.

    Raises:
        NotRegularFileError: a named pipe, socket, device, folder or broken symlink (message: what it is).
        OSError: the file cannot be read.
    """
    try:
        st = os.stat(path)  # follows symlinks, opens nothing
    except FileNotFoundError:
        if os.path.islink(path):
            raise NotRegularFileError(f"broken symlink to {os.readlink(path)!r}: never opened") from None
        raise
    reason = _not_regular(st.st_mode)
    if reason:
        raise NotRegularFileError(reason)
    # O_NONBLOCK: should the path have been swapped for a FIFO since stat(), open() does not hang on it
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        reason = _not_regular(os.fstat(fd).st_mode)
        if reason:
            raise NotRegularFileError(reason)
        return handle.read()
