"""Background ingest jobs for ``POST /v1/ingest``, and the checks on what they may read.

Jobs run one at a time on their own thread (never on the generation worker); the
ingest pipeline's ``on_progress`` callback updates each job's progress, and its report
is kept with the job. Server-side paths must lie under the configured ingest root: ``..``,
absolute paths elsewhere and symlinks that lead out are refused with a reason.

Uploads have a stable home: an uploaded file lives at ``data_dir/uploads/<folder>/<name>``
and its documents' source is ``<folder>/<name>``, whichever job brought it. The request
stages the files under ``uploads/.incoming/<job-id>/``; when the job runs (jobs run in
submission order) they replace the files at their home and are ingested from there. So
uploading a file again under the same name and folder replaces its documents when it
changed and reports ``unchanged`` when not; with ``prune``, the other files of that upload
folder (its files, not its sub-folders) are removed and their documents deleted. The files
stay: they are the documents' source files, which the fingerprints and pruning check.
Documents stored from an older layout (``uploads/<job-id>/...``) are replaced by a new
upload of the same name.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Callable, Literal

from copilot.api.schemas import IngestJobOut, IngestProgressOut
from ingestion.errors import IngestError
from ingestion.pipeline import IngestProgress, discover_files, ingest_paths
from ingestion.report import FileReport
from ingestion.store import ChunkStore

log = logging.getLogger(__name__)

JobStatus = Literal["queued", "running", "succeeded", "failed"]


class PathRejectedError(ValueError):
    """A requested ingest path or upload name is not allowed; ``status`` is the HTTP code to answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


# -- server-side paths ----------------------------------------------------------------------------
def resolve_ingest_path(raw: str, root: Path | None) -> tuple[Path, list[Path]]:
    """Check a requested server-side path and list the files to ingest under it.

    Args:
        raw: relative to ``root``, or absolute inside it.
        root: the configured ingest root (None: server-side ingest disabled).
    Returns:
        ``(source_root, files)``: the folder sources are named relative to (the path itself,
        or a file's parent, as the CLI does) and the files found (hidden entries skipped).
    Raises:
        PathRejectedError: 403 when disabled or the path (or a symlink in it) leads outside
            ``root``; 400 for ``..`` components or NUL bytes; 404 when it does not exist;
            422 when it holds no files.
    """
    if root is None:
        raise PathRejectedError(403, "server-side ingest is disabled: set COPILOT_INGEST_ROOT to allow it")
    if "\x00" in raw:
        raise PathRejectedError(400, "the path contains a NUL byte")
    if ".." in PurePosixPath(raw.replace("\\", "/")).parts:
        raise PathRejectedError(400, f"'..' is not allowed in ingest paths: {raw!r}")
    root_abs = Path(root).absolute()
    root_real = Path(root).resolve()
    candidate = Path(raw)
    path = candidate if candidate.is_absolute() else root_abs / candidate
    if not (path.is_relative_to(root_abs) or path.is_relative_to(root_real)):
        raise PathRejectedError(403, f"{raw!r} lies outside the ingest root {root_abs}")
    try:
        exists = path.exists()
    except OSError as exc:  # e.g. ENAMETOOLONG
        raise PathRejectedError(400, f"unusable path: {exc.strerror or exc}") from exc
    if not exists:
        if path.is_symlink():
            raise PathRejectedError(403, f"{raw!r} is a dangling symlink")
        raise PathRejectedError(404, f"no such file or folder under the ingest root: {raw!r}")
    real = path.resolve()
    if not real.is_relative_to(root_real):
        raise PathRejectedError(403, f"{raw!r} resolves to {real}, outside the ingest root (symlink)")
    files, _missing = discover_files([path])
    escaping = [f for f in files if not f.resolve().is_relative_to(root_real)]
    if escaping:
        shown = ", ".join(str(f.relative_to(path)) if f.is_relative_to(path) else str(f) for f in escaping[:3])
        raise PathRejectedError(403, f"{len(escaping)} file(s) under {raw!r} are symlinks that lead outside "
                                     f"the ingest root: {shown}")
    if not files:
        raise PathRejectedError(422, f"no files to ingest under {raw!r} (hidden entries are skipped)")
    return (path if path.is_dir() else path.parent), files


# -- uploads --------------------------------------------------------------------------------------
def safe_upload_name(filename: str | None) -> str:
    """The base name of an uploaded file, checked.

    Raises:
        PathRejectedError: 422 for a missing, hidden, over-long or control-character name.
    """
    name = PurePosixPath((filename or "").replace("\\", "/")).name
    if not name or name in (".", ".."):
        raise PathRejectedError(422, f"upload has no usable file name: {filename!r}")
    if name.startswith("."):
        raise PathRejectedError(422, f"hidden file names are not ingested: {name!r}")
    if len(name.encode()) > 255 or any(ord(c) < 32 or c == "\x7f" for c in name):
        raise PathRejectedError(422, f"invalid file name: {filename!r}")
    return name


def safe_folder(folder: str | None) -> PurePosixPath:
    """A relative folder for uploaded files' sources (``tickets`` → ``tickets/export.json``).

    Raises:
        PathRejectedError: 400 for absolute paths, ``..`` or hidden components.
    """
    if not folder:
        return PurePosixPath()
    p = PurePosixPath(folder.replace("\\", "/"))
    if p.is_absolute() or any(part in ("..", "") or part.startswith(".") for part in p.parts) or "\x00" in folder:
        raise PathRejectedError(400, f"folder must be a relative path without '..' or hidden parts: {folder!r}")
    return p


# -- jobs -----------------------------------------------------------------------------------------
def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class IngestJob:
    """One ingest run requested over the API (mutated by its thread under ``lock``)."""

    id: str
    kind: Literal["upload", "path"]
    files: list[Path]
    root: Path
    prune: bool = False
    folder: PurePosixPath | None = None  # uploads: the folder their sources are named under
    status: JobStatus = "queued"
    created: datetime = field(default_factory=_now)
    started: datetime | None = None
    finished: datetime | None = None
    progress: IngestProgress | None = None
    report: dict[str, Any] | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sources(self) -> list[str]:
        """The files as they will be named in document ids."""
        out = []
        for f in self.files:
            try:
                out.append(f.relative_to(self.root).as_posix())
            except ValueError:
                out.append(str(f))
        return out

    def to_model(self) -> IngestJobOut:
        """A consistent snapshot for the API."""
        with self.lock:
            progress = IngestProgressOut(**asdict(self.progress)) if self.progress else \
                IngestProgressOut(files_total=len(self.files))
            return IngestJobOut(id=self.id, kind=self.kind, status=self.status, created=self.created,
                                started=self.started, finished=self.finished, files=self.sources(),
                                progress=progress, report=self.report, error=self.error,
                                warnings=list(self.warnings))


class IngestJobManager:
    """Runs ingest jobs on one background thread, in submission order.

    Args:
        store: the chunk store to write to.
        uploads_dir: where uploaded files live (``<uploads_dir>/<folder>/<name>``; staged in
            ``<uploads_dir>/.incoming/<job-id>/`` until their job runs).
        max_pending: queued jobs allowed before :meth:`submit` refuses (QueueFullError-like 503).
        keep: finished jobs remembered for ``GET /v1/ingest/{id}`` (oldest forgotten first).
        on_finish: called with each finished job (metrics).
    """

    def __init__(self, store: ChunkStore, uploads_dir: Path, *, max_pending: int = 16, keep: int = 200,
                 on_finish: Callable[[IngestJob], None] | None = None) -> None:
        self.store = store
        self.uploads_dir = Path(uploads_dir)
        self.max_pending = max_pending
        self.keep = keep
        self.on_finish = on_finish
        self._jobs: "OrderedDict[str, IngestJob]" = OrderedDict()
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest")

    @staticmethod
    def new_id() -> str:
        """A fresh job id (32 hex digits)."""
        return uuid.uuid4().hex

    def get(self, job_id: str) -> IngestJob | None:
        """The job with this id, or None (unknown or forgotten)."""
        with self._lock:
            return self._jobs.get(job_id)

    def pending(self) -> int:
        """Jobs queued or running."""
        with self._lock:
            return sum(1 for j in self._jobs.values() if j.status in ("queued", "running"))

    @property
    def incoming_dir(self) -> Path:
        """``uploads_dir/.incoming``: staged uploads of jobs not yet run (hidden: never ingested as such)."""
        return self.uploads_dir / ".incoming"

    def staging_dir(self, job_id: str) -> Path:
        """``uploads_dir/.incoming/<job_id>`` (not created)."""
        return self.incoming_dir / job_id

    def save_uploads(self, job_id: str, uploads: list[tuple[str, BinaryIO]], folder: PurePosixPath) -> list[Path]:
        """Stage uploaded files (already size-checked) for their job; they move to
        ``uploads_dir/<folder>/<name>`` when it runs.

        Returns:
            The staged paths (``staging_dir(job_id)/<folder>/<name>``).
        Raises:
            PathRejectedError: 422 for a bad or duplicate file name; 409 when the folder
                crosses an uploaded file or a name is an upload folder; 400 when the
                filesystem refuses the path (nothing is kept then).
        """
        names = [safe_upload_name(n) for n, _ in uploads]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise PathRejectedError(422, f"duplicate file names in one upload: {', '.join(dupes)}")
        self._check_home(folder, names)
        target = self.staging_dir(job_id) / folder
        paths = []
        try:
            target.mkdir(parents=True, exist_ok=False)
            for name, (_, handle) in zip(names, uploads):
                path = target / name
                with open(path, "wb") as out:
                    shutil.copyfileobj(handle, out, 1 << 20)
                paths.append(path)
        except OSError as exc:  # e.g. a folder name too long for the filesystem
            self.discard_uploads(job_id)
            raise PathRejectedError(400, f"cannot store the upload under {str(folder)[:80]!r}: "
                                         f"{exc.strerror or exc}") from exc
        except BaseException:
            self.discard_uploads(job_id)
            raise
        return paths

    def _check_home(self, folder: PurePosixPath, names: list[str]) -> None:
        """Refuse (409) a folder that crosses an uploaded file, or a name that is an upload folder."""
        home = self.uploads_dir
        for part in folder.parts:
            home = home / part
            if os.path.lexists(home) and not home.is_dir():
                raise PathRejectedError(409, f"upload folder {str(folder)!r} crosses the uploaded file "
                                             f"{home.relative_to(self.uploads_dir).as_posix()!r}")
        for name in names:
            if (home / name).is_dir():
                raise PathRejectedError(409, f"{(folder / name).as_posix()!r} is an upload folder, not a file; "
                                             "upload the file under another name or folder")

    def discard_uploads(self, job_id: str) -> None:
        """Remove a job's staged uploads (when the request failed before the job started, or once installed)."""
        shutil.rmtree(self.staging_dir(job_id), ignore_errors=True)
        try:
            self.incoming_dir.rmdir()  # only when empty
        except OSError:
            pass

    def _install_uploads(self, job: IngestJob) -> tuple[list[Path], list[FileReport]]:
        """Move a job's staged files to their home; with ``prune``, remove the upload folder's other files.

        Returns:
            (the installed paths, ``failed`` report entries for files that could not be moved).
        """
        installed: list[Path] = []
        failed: list[FileReport] = []
        for staged in job.files:
            rel = staged.relative_to(job.root)
            home = self.uploads_dir / rel
            try:
                home.parent.mkdir(parents=True, exist_ok=True)
                if home.is_dir() and not home.is_symlink():
                    raise IsADirectoryError(21, "an upload folder has this name")
                os.replace(staged, home)
            except OSError as exc:
                failed.append(FileReport(path=str(home), source=rel.as_posix(), status="failed",
                                         reason=f"cannot store the upload: {exc.strerror or exc}"))
                continue
            installed.append(home)
        self.discard_uploads(job.id)
        if job.prune:
            folder = self.uploads_dir / (job.folder or PurePosixPath())
            keep = {p.name for p in installed} | {Path(f.path).name for f in failed}
            for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
                if entry.name.startswith(".") or entry.name in keep or entry.is_dir():
                    continue
                try:
                    entry.unlink()  # a file (or link, pipe ...) of this upload folder no longer uploaded
                    log.info("ingest job %s: removed %s from upload folder %s (prune)", job.id, entry.name, folder)
                except OSError as exc:
                    with job.lock:
                        job.warnings.append(f"could not remove {entry.name} from the upload folder: "
                                            f"{exc.strerror or exc}")
        return installed, failed

    def submit(self, job: IngestJob) -> IngestJob:
        """Queue ``job``.

        Raises:
            PathRejectedError: 503 when ``max_pending`` jobs are already queued or running.
        """
        with self._lock:
            if sum(1 for j in self._jobs.values() if j.status in ("queued", "running")) >= self.max_pending:
                raise PathRejectedError(503, f"{self.max_pending} ingest jobs are already pending; retry later")
            self._jobs[job.id] = job
            finished = [k for k, j in self._jobs.items() if j.status in ("succeeded", "failed")]
            for k in finished[: max(0, len(self._jobs) - self.keep)]:
                del self._jobs[k]
        self._executor.submit(self._run, job)
        return job

    def _run(self, job: IngestJob) -> None:
        with job.lock:
            job.status, job.started = "running", _now()

        def progress(p: IngestProgress) -> None:
            with job.lock:
                job.progress = p

        try:
            files, install_failures, prune_under, supersede_under = self._prepare(job)
            report = ingest_paths(files, self.store, prune=job.prune, progress=False, on_progress=progress,
                                  root=job.root, prune_under=prune_under, supersede_under=supersede_under)
            report.files.extend(install_failures)
        except IngestError as exc:
            log.warning("ingest job %s failed: %s", job.id, exc)
            with job.lock:
                job.status, job.error = "failed", str(exc)
        except Exception as exc:  # keep the thread alive and say what happened
            log.exception("ingest job %s failed", job.id)
            with job.lock:
                job.status, job.error = "failed", f"unexpected {type(exc).__name__}: {exc}"
        else:
            with job.lock:
                job.report = report.to_dict()
                job.status = "succeeded"
                if report.counts["failed"]:
                    job.warnings.append(f"{report.counts['failed']} file(s) failed: see the report")
                if report.failed_records:
                    job.warnings.append(f"{report.failed_records} record(s) failed: see failed_records in the report")
        finally:
            with job.lock:
                job.finished = _now()
            if self.on_finish is not None:
                self.on_finish(job)

    def _prepare(self, job: IngestJob) -> tuple[list[Path], list[FileReport], Path | None, Path | None]:
        """(files to ingest, failed install entries, prune scope, supersede folder) for a job about to run."""
        if job.kind == "upload":
            files, install_failures = self._install_uploads(job)
            with job.lock:
                job.files, job.root = files + [Path(f.path) for f in install_failures], self.uploads_dir
            return files, install_failures, self.uploads_dir / (job.folder or PurePosixPath()), self.uploads_dir
        root_real = job.root.resolve()
        files = []
        for f in job.files:  # re-check: a file may have been swapped for a symlink since the request
            if f.resolve().is_relative_to(root_real):
                files.append(f)
            else:
                with job.lock:
                    job.warnings.append(f"skipped {f}: it now leads outside {job.root}")
        return files, [], None, None

    def close(self) -> None:
        """Drop queued jobs; a running one finishes in the background (the store stays consistent)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
