"""Background ingest jobs for ``POST /v1/ingest``, and the checks on what they may read.

Jobs run one at a time per replica on their own thread (never on the generation worker);
the ingest pipeline's ``on_progress`` callback updates each job's progress. Every job is
kept in the store (:class:`ingestion.stores.job_table.JobTable`), so its status and per-file
report outlive a restart and every replica on a shared store can report on it. A job that
was queued or running when its replica died is marked ``interrupted`` (at once when that
replica starts again, else when its lease expires) and can be resumed by any replica
(``POST /v1/ingest/{id}/resume``): ingesting is idempotent, so running the job again from
the start converges to the state of one clean run.

Server-side paths must lie under the configured ingest root: ``..``, absolute paths
elsewhere and symlinks that lead out are refused with a reason.

Uploads are staged by the request and installed when their job runs (jobs run in submission
order), by :class:`ingestion.uploads.UploadArea`, which also says where they live and what
``prune`` removes. Documents stored from an older layout (``uploads/<job-id>/...``) are
replaced by a new upload of the same name. Replicas that accept uploads and resume each
other's jobs must share the uploads folder (a shared volume), as they share the store.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Literal

from copilot.api.schemas import IngestJobOut, IngestProgressOut
from ingestion.errors import IngestError
from ingestion.files import discover_files
from ingestion.pipeline import IngestProgress, ingest_paths
from ingestion.report import FileReport
from ingestion.store import ChunkStore
from ingestion.stores.job_table import JobRow, JobTable
from ingestion.uploads import UploadArea

log = logging.getLogger(__name__)

JobStatus = Literal["queued", "running", "succeeded", "failed", "interrupted"]
PROGRESS_SAVE_S = 1.0
"""Seconds between saves of a running job's progress to the store."""


class PathRejectedError(ValueError):
    """A requested ingest path or job request is refused; ``status`` is the HTTP code to answer."""

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
    replica: str | None = None
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
                                warnings=list(self.warnings), replica=self.replica)

    def request(self) -> dict[str, Any]:
        """What to ingest, as stored (JSON): enough to run the job again."""
        with self.lock:
            return {"kind": self.kind, "files": [str(f) for f in self.files], "root": str(self.root),
                    "prune": self.prune, "folder": None if self.folder is None else str(self.folder)}

    @classmethod
    def from_row(cls, row: JobRow) -> "IngestJob":
        """A job to run again from its stored request (status ``queued``; progress and report reset)."""
        req = row.request
        shown = IngestJobOut.model_validate(row.state)
        return cls(row.id, req["kind"], [Path(f) for f in req["files"]], Path(req["root"]), prune=bool(req["prune"]),
                   folder=None if req["folder"] is None else PurePosixPath(req["folder"]), created=shown.created,
                   warnings=[*shown.warnings, f"resumed after it was {row.status}"], replica=row.owner)


def _stored_model(row: JobRow) -> IngestJobOut:
    """The API view of a stored job (its status column wins over the saved snapshot's)."""
    return IngestJobOut.model_validate({**row.state, "status": row.status, "replica": row.owner})


class IngestJobManager:
    """Runs this replica's ingest jobs on one background thread, in submission order, and keeps
    every job in the store.

    Args:
        store: the chunk store to write to (its database also keeps the jobs).
        uploads_dir: where uploaded files live (see :class:`ingestion.uploads.UploadArea`; a job's
            files are staged under its id until it runs).
        replica_id: names this replica as the owner of the jobs it runs; stable across restarts
            (its jobs still marked active when it starts are marked ``interrupted``).
        lease_s: a job whose replica sent no heartbeat for this long (seconds) is ``interrupted``.
        max_pending: queued or running jobs of this replica allowed before :meth:`submit` refuses (503).
        keep: finished jobs kept in the store (oldest forgotten first).
        on_finish: called with each finished job (metrics).
    """

    def __init__(self, store: ChunkStore, uploads_dir: Path, *, replica_id: str, lease_s: float = 30.0,
                 max_pending: int = 16, keep: int = 200, on_finish: Callable[[IngestJob], None] | None = None) -> None:
        self.store = store
        self.uploads = UploadArea(uploads_dir)
        self.replica_id = replica_id
        self.max_pending = max_pending
        self.keep = keep
        self.on_finish = on_finish
        self.table = JobTable(store.db, lease_s)
        self._active: dict[str, IngestJob] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest")
        interrupted = self.table.interrupt_owned(replica_id)
        if interrupted:
            log.warning("ingest job(s) %s of replica %s were interrupted by its restart; resume them with "
                        "POST /v1/ingest/{id}/resume", ", ".join(interrupted), replica_id)
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, args=(max(0.5, lease_s / 3),), daemon=True,
                                           name="ingest-heartbeat")
        self._heartbeat.start()

    @staticmethod
    def new_id() -> str:
        """A fresh job id (32 hex digits)."""
        return uuid.uuid4().hex

    def get(self, job_id: str) -> IngestJobOut | None:
        """The job with this id (run by any replica), or None (unknown, or forgotten)."""
        with self._lock:
            job = self._active.get(job_id)
        if job is not None:
            return job.to_model()
        row = self.table.get(job_id)
        return None if row is None else _stored_model(row)

    def list(self, offset: int = 0, limit: int = 50) -> tuple[list[IngestJobOut], int]:
        """Jobs of every replica, newest first, and how many the store keeps."""
        rows, total = self.table.page(offset, limit)
        return [_stored_model(r) for r in rows], total

    def pending(self) -> int:
        """This replica's jobs queued or running."""
        with self._lock:
            return len(self._active)

    def _beat(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            with self._lock:
                ids = list(self._active)
            try:
                self.table.heartbeat(self.replica_id, ids)
            except Exception as exc:  # the store is briefly unreachable: the next beat retries
                log.warning("ingest job heartbeat failed: %s", exc)

    def _save(self, job: IngestJob) -> None:
        model = job.to_model()
        self.table.save(job.id, model.status, self.replica_id, model.created.timestamp(), job.request(),
                        model.model_dump(mode="json"))

    def submit(self, job: IngestJob) -> IngestJob:
        """Queue ``job`` on this replica (and keep it in the store).

        Raises:
            PathRejectedError: 503 when ``max_pending`` jobs are already queued or running here.
        """
        with self._lock:
            if len(self._active) >= self.max_pending:
                raise PathRejectedError(503, f"{self.max_pending} ingest jobs are already pending; retry later")
            job.replica = self.replica_id
            self._active[job.id] = job
        try:
            self._save(job)
            self.table.forget_finished(self.keep)
        except BaseException:
            with self._lock:
                self._active.pop(job.id, None)
            raise
        self._executor.submit(self._run, job)
        return job

    def resume(self, job_id: str) -> IngestJob:
        """Run an interrupted (or failed) job again, on this replica, from the start.

        Raises:
            PathRejectedError: 404 for an unknown job; 409 when it is not interrupted or failed
                (queued, running, succeeded, or just claimed by another replica); 503 as for
                :meth:`submit`.
        """
        row = self.table.claim(job_id, self.replica_id)
        if row is None:
            current = self.table.get(job_id)
            if current is None:
                raise PathRejectedError(404, f"no ingest job {job_id!r} (unknown, or forgotten)")
            raise PathRejectedError(409, f"ingest job {job_id} is {current.status}: only an interrupted or failed "
                                         "job can be resumed")
        log.info("resuming ingest job %s (was %s, replica %s)", job_id, row.status, row.owner)
        return self.submit(IngestJob.from_row(row))

    def _run(self, job: IngestJob) -> None:
        with job.lock:
            job.status, job.started = "running", _now()
        self._save(job)
        saved_at = time.monotonic()

        def progress(p: IngestProgress) -> None:
            nonlocal saved_at
            with job.lock:
                job.progress = p
            if time.monotonic() - saved_at >= PROGRESS_SAVE_S:
                saved_at = time.monotonic()
                self._save(job)

        try:
            files, install_failures, prune_under, supersede_under = self._prepare(job)
            self._save(job)  # uploads: the files now live at their home
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
            try:
                self._save(job)
            except Exception:
                log.exception("ingest job %s: could not save its outcome to the store", job.id)
            with self._lock:
                self._active.pop(job.id, None)
            if self.on_finish is not None:
                self.on_finish(job)

    def _prepare(self, job: IngestJob) -> tuple[list[Path], list[FileReport], Path | None, Path | None]:
        """(files to ingest, failed install entries, prune scope, supersede folder) for a job about to run."""
        if job.kind == "upload":
            if job.root == self.uploads.staging_dir(job.id):
                installed = self.uploads.install(job.id, job.files, job.folder, prune=job.prune)
                files, install_failures = installed.paths, installed.failed
                with job.lock:
                    job.files, job.root = files + [Path(f.path) for f in install_failures], self.uploads.root
                    job.warnings.extend(installed.warnings)
            else:  # resumed after its files were installed
                files, install_failures = [f for f in job.files if f.is_file()], []
            return files, install_failures, self.uploads.folder_dir(job.folder), self.uploads.root
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
        """Stop the heartbeat and drop queued jobs (kept in the store as ``interrupted``); a running
        one finishes in the background (the store stays consistent)."""
        self._stop.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            queued = [j for j in self._active.values() if j.status == "queued"]
        for job in queued:
            with job.lock:
                job.status = "interrupted"
            try:
                self._save(job)
            except Exception:
                log.exception("ingest job %s: could not mark it interrupted", job.id)
