"""Uploaded files' home: checking their names, staging them, installing them, pruning their folder.

An uploaded file lives at ``<uploads>/<folder>/<name>`` and its documents' source is
``<folder>/<name>``, whichever upload brought it. An upload is first staged under
``<uploads>/.incoming/<upload-id>/<folder>/`` (hidden: never ingested as such); when it is
ingested (uploads are ingested in the order they came) its files replace the files at their
home and are ingested from there. So uploading a file again under the same name and folder
replaces its documents when it changed and leaves them ``unchanged`` when not; with
``prune``, the other files of that upload folder (its files, not its sub-folders) are
removed, and the ingest deletes their documents. The files stay: they are the documents'
source files, which the fingerprints and pruning check. Everyone who installs or ingests
uploads of one store must share the uploads folder (a shared volume), as they share the store.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from ingestion.errors import IngestError
from ingestion.report import FileReport

log = logging.getLogger(__name__)


class UploadRejectedError(IngestError):
    """An upload that is refused, with the reason; nothing of it is kept."""


class UploadNameError(UploadRejectedError):
    """A missing, hidden, over-long, control-character or duplicate file name."""


class UploadConflictError(UploadRejectedError):
    """The upload folder crosses an uploaded file, or a file name is an upload folder."""


class UploadPathError(UploadRejectedError):
    """The upload folder is not a plain relative path, or the filesystem refuses it."""


class UploadStorageError(UploadRejectedError):
    """The server cannot store the upload (no space, a read-only or unwritable uploads folder).

    Attributes:
        status: the HTTP status to answer: 507 (no space) or 503 (the folder is unwritable).
    """

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


#: errnos that mean the server, not the request, is at fault (the rest: the path is refused).
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_UNWRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


def _refused(folder: PurePosixPath, exc: OSError) -> UploadRejectedError:
    """The rejection an OSError while staging an upload under ``folder`` means (no path of the server in it)."""
    reason = exc.strerror or type(exc).__name__
    if exc.errno in _NO_SPACE:
        log.error("cannot store an upload: %s", reason)
        return UploadStorageError(f"the server has no space for the upload: {reason}", 507)
    if exc.errno in _UNWRITABLE:
        log.error("cannot store an upload in the uploads folder: %s", reason)
        return UploadStorageError(f"the server cannot store uploads now: {reason}", 503)
    shown = str(folder) if len(str(folder)) <= 80 else str(folder)[:80] + "..."
    return UploadPathError(f"cannot store the upload under {shown!r}: {reason}")


#: Bytes of one folder name (the usual file-system limit, NAME_MAX) and of the whole upload folder.
MAX_NAME_BYTES = 255
MAX_FOLDER_BYTES = 1024
#: Folder names in an upload folder.
MAX_FOLDER_DEPTH = 32


def _has_control(name: str) -> bool:
    """Whether ``name`` holds a control, format or line-break character (Unicode categories Cc,
    Cf, Zl, Zp: NUL, newline, DEL, NEL, U+2028, a right-to-left override ...)."""
    return any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in name)


def safe_upload_name(filename: str | None) -> str:
    """The base name of an uploaded file, checked.

    Raises:
        UploadNameError: a missing, hidden, over-long (over :data:`MAX_NAME_BYTES` bytes) or
            control-character name.
    """
    name = PurePosixPath((filename or "").replace("\\", "/")).name
    if not name or name in (".", ".."):
        raise UploadNameError(f"upload has no usable file name: {filename!r}")
    if name.startswith("."):
        raise UploadNameError(f"hidden file names are not ingested: {name!r}")
    if len(name.encode()) > MAX_NAME_BYTES or _has_control(name):
        raise UploadNameError(f"invalid file name: {filename!r}")
    return name


def safe_folder(folder: str | None) -> PurePosixPath:
    """A relative folder for uploaded files' sources (``tickets`` → ``tickets/export.json``).

    An empty folder, ``.`` or ``./`` is the uploads root (``PurePosixPath()``); each name in
    the folder gets the checks a file name gets (:func:`safe_upload_name`).

    Raises:
        UploadPathError: an absolute path, ``..``, empty or hidden components, a control
            character (NUL, newline, ...), a name over :data:`MAX_NAME_BYTES` bytes, over
            :data:`MAX_FOLDER_DEPTH` names or over :data:`MAX_FOLDER_BYTES` bytes in all.
    """
    if not folder:
        return PurePosixPath()
    shown = repr(folder if len(folder) <= 80 else folder[:80] + "...")
    if _has_control(folder):
        raise UploadPathError(f"folder must not contain control characters (NUL, newline, ...): {shown}")
    p = PurePosixPath(folder.replace("\\", "/"))
    if p.is_absolute() or any(part in ("..", "") or part.startswith(".") for part in p.parts):
        raise UploadPathError(f"folder must be a relative path without '..' or hidden parts: {shown}")
    if not p.parts:  # "." or "./": the uploads root
        return PurePosixPath()
    longest = max(len(part.encode()) for part in p.parts)
    if longest > MAX_NAME_BYTES:
        raise UploadPathError(f"folder {shown} has a name of {longest} bytes; the limit is {MAX_NAME_BYTES}")
    if len(p.parts) > MAX_FOLDER_DEPTH:
        raise UploadPathError(f"folder {shown} is {len(p.parts)} names deep; the limit is {MAX_FOLDER_DEPTH}")
    if len(str(p).encode()) > MAX_FOLDER_BYTES:
        raise UploadPathError(f"folder {shown} is {len(str(p).encode())} bytes long; the limit is {MAX_FOLDER_BYTES}")
    return p


@dataclass
class Installed:
    """What :meth:`UploadArea.install` did: the files now at their home, ``failed`` report entries
    for those that could not be moved, and warnings (files pruning could not remove)."""

    paths: list[Path] = field(default_factory=list)
    failed: list[FileReport] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class UploadArea:
    """The uploads folder: staged uploads under ``.incoming/``, installed files at ``<folder>/<name>``.

    Args:
        root: the uploads folder (created as needed).
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def incoming_dir(self) -> Path:
        """``root/.incoming``: staged uploads not yet installed (hidden: never ingested as such)."""
        return self.root / ".incoming"

    def staging_dir(self, upload_id: str) -> Path:
        """``root/.incoming/<upload_id>`` (not created)."""
        return self.incoming_dir / upload_id

    def folder_dir(self, folder: PurePosixPath | None) -> Path:
        """Where the files of upload folder ``folder`` live (``root`` for none)."""
        return self.root / (folder or PurePosixPath())

    def stage(self, upload_id: str, uploads: list[tuple[str | None, BinaryIO]], folder: PurePosixPath) -> list[Path]:
        """Stage uploaded files (already size-checked); :meth:`install` moves them home.

        Args:
            upload_id: names the staging folder (the ingest job's id).
            uploads: (file name as sent, readable binary stream) pairs.
            folder: the upload folder (from :func:`safe_folder`).
        Returns:
            The staged paths (``staging_dir(upload_id)/<folder>/<name>``).
        Raises:
            UploadNameError: a bad or duplicate file name. UploadConflictError: the folder crosses
                an uploaded file or a name is an upload folder. UploadPathError: the filesystem
                refuses the path. Nothing is kept then.
        """
        names = [safe_upload_name(n) for n, _ in uploads]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise UploadNameError(f"duplicate file names in one upload: {', '.join(dupes)}")
        target = self.staging_dir(upload_id) / folder
        paths = []
        try:
            self._check_home(folder, names)
            target.mkdir(parents=True, exist_ok=False)
            for name, (_, handle) in zip(names, uploads, strict=True):
                path = target / name
                with open(path, "wb") as out:
                    shutil.copyfileobj(handle, out, 1 << 20)
                paths.append(path)
        except OSError as exc:
            self.discard(upload_id)
            raise _refused(folder, exc) from None  # the reason is the whole story: no traceback to log
        except BaseException:
            self.discard(upload_id)
            raise
        return paths

    def _check_home(self, folder: PurePosixPath, names: list[str]) -> None:
        """Refuse a folder that crosses an uploaded file, or a name that is an upload folder."""
        home = self.root
        for part in folder.parts:
            home = home / part
            if os.path.lexists(home) and not home.is_dir():
                raise UploadConflictError(f"upload folder {str(folder)!r} crosses the uploaded file "
                                          f"{home.relative_to(self.root).as_posix()!r}")
        for name in names:
            if (home / name).is_dir():
                raise UploadConflictError(f"{(folder / name).as_posix()!r} is an upload folder, not a file; "
                                          "upload the file under another name or folder")

    def discard(self, upload_id: str) -> None:
        """Remove an upload's staged files (a refused request, or once installed)."""
        shutil.rmtree(self.staging_dir(upload_id), ignore_errors=True)
        try:
            self.incoming_dir.rmdir()  # only when empty
        except OSError:
            pass

    def install(self, upload_id: str, staged: list[Path], folder: PurePosixPath | None, *,
                prune: bool = False) -> Installed:
        """Move an upload's staged files to their home; with ``prune``, remove the folder's other files.

        A staged file already gone whose home exists was moved by an earlier, interrupted
        install. A file that cannot be moved is a ``failed`` entry; the staging folder is
        removed in any case.
        """
        done = Installed()
        for path in staged:
            rel = path.relative_to(self.staging_dir(upload_id))
            home = self.root / rel
            if not os.path.lexists(path) and home.is_file():  # moved before the job was interrupted
                done.paths.append(home)
                continue
            try:
                home.parent.mkdir(parents=True, exist_ok=True)
                if home.is_dir() and not home.is_symlink():
                    raise IsADirectoryError(21, "an upload folder has this name")
                os.replace(path, home)
            except OSError as exc:
                done.failed.append(FileReport(path=str(home), source=rel.as_posix(), status="failed",
                                              reason=f"cannot store the upload: {exc.strerror or exc}"))
                continue
            done.paths.append(home)
        self.discard(upload_id)
        if prune:
            keep = {p.name for p in done.paths} | {Path(f.path).name for f in done.failed}
            done.warnings.extend(self._prune(self.folder_dir(folder), keep, upload_id))
        return done

    def _prune(self, folder: Path, keep: set[str], upload_id: str) -> list[str]:
        """Remove the files of ``folder`` not named in ``keep`` (not its sub-folders or hidden
        entries); returns a warning for each that could not be removed."""
        warnings = []
        for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
            if entry.name.startswith(".") or entry.name in keep or entry.is_dir():
                continue
            try:
                entry.unlink()  # a file (or link, pipe ...) of this upload folder no longer uploaded
                log.info("upload %s: removed %s from upload folder %s (prune)", upload_id, entry.name, folder)
            except OSError as exc:
                warnings.append(f"could not remove {entry.name} from the upload folder: {exc.strerror or exc}")
        return warnings


def upload_copy(root: Path, source_abs: str) -> Path | None:
    """The stored upload copy a document came from: ``source_abs`` when it names a file
    installed under the uploads folder ``root`` (not a staged one under ``.incoming``), else
    None (a server-side file, which is the operator's, not ours)."""
    path = Path(source_abs)
    try:
        rel = path.relative_to(Path(os.path.realpath(root)))
    except ValueError:
        return None
    if not rel.parts or any(part.startswith(".") for part in rel.parts):
        return None
    return path


def remove_upload_copy(path: Path) -> None:
    """Remove a stored upload copy (see :func:`upload_copy`); one already gone is fine.

    Raises:
        OSError: the file exists but cannot be removed.
    """
    try:
        path.unlink()
    except FileNotFoundError:
        return
    log.info("removed the stored upload %s: a document from it was deleted", path.name)
