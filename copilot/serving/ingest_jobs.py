"""Background ingest jobs for ``POST /v1/ingest``.

Jobs are queued in the store (:class:`copilot.serving.job_table.JobTable`); every replica takes
queued jobs and runs them one at a time on its own thread, so status and reports outlive a
restart and every replica reports on every job. A job ends ``succeeded``, ``partial`` (some
files or records failed) or ``failed``. A job whose replica died is marked ``interrupted`` when
its lease expires and can be resumed by any replica: ingesting is idempotent.

Reports, warnings and errors name paths relative to the ingest root or the uploads folder
(:class:`copilot.redact.PathRedactor`). A job is reported as a :class:`JobView`.

Uploads are staged by the request and installed when their job runs, by
:class:`ingestion.uploads.UploadArea`. Replicas that accept uploads and resume each other's jobs
must share the uploads folder (a shared volume), as they share the store.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Literal, cast

from copilot.access import Access
from copilot.redact import PathRedactor
from copilot.serving.job_table import JobRow, JobTable
from ingestion.errors import IngestError, StoreLockedError
from ingestion.pipeline import IngestOptions, IngestProgress, ingest_paths
from ingestion.report import FileReport, IngestReport
from ingestion.stores.chunk_store import ChunkStore
from ingestion.uploads import UploadArea

log = logging.getLogger(__name__)

JobStatus = Literal["queued", "running", "succeeded", "partial", "failed", "interrupted"]
PROGRESS_SAVE_S = 1.0
"""Seconds between saves of a running job's progress to the store."""


class JobRefusedError(ValueError):
    """The manager refused to queue a job (:meth:`IngestJobManager.submit`, :meth:`~IngestJobManager.resume`)."""


class JobsBusyError(JobRefusedError):
    """``max_pending`` jobs of this replica are queued or running already."""


class JobNotFoundError(JobRefusedError):
    """No stored job has this id (unknown, or forgotten)."""


class JobNotResumableError(JobRefusedError):
    """The job is queued, running or succeeded, or another replica just claimed it."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _time_json(value: datetime | None) -> str | None:
    """``value`` as the stored JSON writes it (ISO 8601, UTC as ``Z``)."""
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@dataclass(frozen=True)
class JobView:
    """A consistent snapshot of an ingest job, as reported and as saved in the store's ``state``.

    Attributes:
        files: the files to ingest, as sources (see :meth:`IngestJob.sources`).
        progress: how far it is (all zero but ``files_total`` before it runs).
        report: the per-file ingest report (:meth:`IngestReport.to_dict`), once it finished.
        replica: the replica that runs (or ran) it.
        submitted_by: the name of the scoped API key that started it (None: a key that reads everything).
    """

    id: str
    kind: Literal["upload", "path"]
    status: JobStatus
    created: datetime
    started: datetime | None
    finished: datetime | None
    files: list[str]
    progress: IngestProgress
    report: dict[str, Any] | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    replica: str | None = None
    submitted_by: str | None = None

    def to_state(self) -> dict[str, Any]:
        """The JSON document kept in the store's ``state`` column."""
        state = asdict(self)
        state.update(created=_time_json(self.created), started=_time_json(self.started),
                     finished=_time_json(self.finished))
        return state

    @classmethod
    def from_row(cls, row: JobRow) -> "JobView":
        """The view of a stored job (its status and owner columns win over the saved snapshot's)."""
        state = row.state
        return cls(id=state["id"], kind=state["kind"], status=cast(JobStatus, row.status),
                   created=datetime.fromisoformat(state["created"]), started=_time(state.get("started")),
                   finished=_time(state.get("finished")), files=list(state["files"]),
                   progress=IngestProgress(**state["progress"]), report=state.get("report"),
                   error=state.get("error"), warnings=list(state.get("warnings") or []), replica=row.owner,
                   submitted_by=state.get("submitted_by"))


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
    #: the read scope of the key that started it (:meth:`copilot.access.Access.read_scope`), for a
    #: key that may not read everything: it sees only its own jobs, and they write only documents
    #: it may read (and replace only such)
    writer: dict[str, Any] | None = None
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

    def view(self) -> JobView:
        """A consistent snapshot."""
        with self.lock:
            progress = self.progress or IngestProgress(0, len(self.files), None, 0, 0, 0.0)
            return JobView(id=self.id, kind=self.kind, status=self.status, created=self.created,
                           started=self.started, finished=self.finished, files=self.sources(),
                           progress=progress, report=self.report, error=self.error,
                           warnings=list(self.warnings), replica=self.replica,
                           submitted_by=self.writer["name"] if self.writer else None)

    def request(self) -> dict[str, Any]:
        """What to ingest, as stored (JSON): enough to run the job again."""
        with self.lock:
            return {"kind": self.kind, "files": [str(f) for f in self.files], "root": str(self.root),
                    "prune": self.prune, "folder": None if self.folder is None else str(self.folder),
                    "writer": self.writer}

    @classmethod
    def from_row(cls, row: JobRow, note: str | None = None) -> "IngestJob":
        """The job a stored request describes (status ``queued``; progress and report reset;
        ``note`` added to its warnings)."""
        req = row.request
        shown = JobView.from_row(row)
        return cls(row.id, req["kind"], [Path(f) for f in req["files"]], Path(req["root"]), prune=bool(req["prune"]),
                   folder=None if req["folder"] is None else PurePosixPath(req["folder"]), created=shown.created,
                   warnings=[*shown.warnings, *([note] if note else [])], replica=row.owner,
                   writer=req.get("writer"))


@dataclass(frozen=True)
class JobQueueConfig:
    """How a replica takes part in the job queue.

    Attributes:
        replica_id: names this replica as the owner of the jobs it queues and runs; unique per
            process (see :func:`copilot.api.app.default_replica_id`).
        ingest_root: the server-side ingest root (None: path jobs are not run here); with the
            uploads folder and the data dir, the folders job reports show relative or by name.
        lease_s: a job whose replica sent no heartbeat for this long (seconds) is ``interrupted``.
        poll_s: seconds between looks at the queue when idle (a local submit wakes it at once).
        max_pending: jobs queued by this replica or running here before a submit is refused.
        keep: finished jobs kept in the store (oldest forgotten first).
    """

    replica_id: str
    ingest_root: Path | None = None
    lease_s: float = 30.0
    poll_s: float = 2.0
    max_pending: int = 16
    keep: int = 200


class IngestJobManager:
    """Keeps every job in the store and runs queued ones, one at a time on this replica.

    A submitted job is saved ``queued``; a worker thread on every replica of the store takes the
    oldest queued job it can run (:meth:`JobTable.take`, atomic: one replica runs each job), so an
    idle replica works through the queue whoever received the jobs. A job meeting the store's
    ingest lock (another replica's job, a ``copilot ingest``) goes back to the queue and is taken
    again after ``poll_s``. A replica only takes jobs whose files it can see: the upload staging
    folder (the uploads folder must be shared, as the store is) or, for server-side paths, a root
    under its own ingest root.

    Args:
        store: the chunk store to write to (its database also keeps the jobs).
        uploads_dir: where uploaded files live (see :class:`ingestion.uploads.UploadArea`; a job's
            files are staged under its id until it runs).
        config: the replica's id, ingest root, lease and queue limits.
        on_finish: called with each finished job (metrics).
    """

    def __init__(self, store: ChunkStore, uploads_dir: Path, config: JobQueueConfig, *,
                 on_finish: Callable[[IngestJob], None] | None = None) -> None:
        self.store = store
        self.uploads = UploadArea(uploads_dir)
        self.replica_id = config.replica_id
        self.ingest_root = ingest_root = config.ingest_root
        self.poll_s = config.poll_s
        self.max_pending = config.max_pending
        self.keep = config.keep
        self.on_finish = on_finish
        lease_s = config.lease_s
        self.redact = PathRedactor.of(relative={"<ingest root>": ingest_root, "<uploads>": self.uploads.root},
                                      named={"<data dir>": store.data_dir})
        self.table = JobTable(store.db, lease_s)
        self._queued: set[str] = set()  # queued by this replica and not yet taken (their lease is renewed here)
        self._running: dict[str, IngestJob] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest")
        expired = self.table.expire()  # never a job whose owner still renews its lease
        if expired:
            log.warning("ingest job(s) %s were interrupted (their replica stopped renewing its lease); resume them "
                        "with POST /v1/ingest/{id}/resume", ", ".join(expired))
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads = [threading.Thread(target=self._beat, args=(max(0.5, lease_s / 3),), daemon=True,
                                          name="ingest-heartbeat"),
                         threading.Thread(target=self._work, daemon=True, name="ingest-queue")]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def new_id() -> str:
        """A fresh job id (32 hex digits)."""
        return uuid.uuid4().hex

    def get(self, job_id: str) -> JobView | None:
        """The job with this id (run by any replica), or None (unknown, or forgotten)."""
        with self._lock:
            job = self._running.get(job_id)
        if job is not None:
            return self._view(job)
        row = self.table.get(job_id)
        return None if row is None else JobView.from_row(row)

    def list(self, offset: int = 0, limit: int = 50) -> tuple[list[JobView], int]:
        """Jobs of every replica, newest first, and how many the store keeps."""
        rows, total = self.table.page(offset, limit)
        return [JobView.from_row(r) for r in rows], total

    def pending(self) -> int:
        """Jobs queued by this replica (not yet taken) or running here."""
        with self._lock:
            return len(self._queued) + len(self._running)

    def _beat(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                with self._lock:
                    self.table.heartbeat(self.replica_id, [*self._queued, *self._running])
                    self._queued &= self.table.owned_queued(self.replica_id)  # forget those others took
            except Exception as exc:  # the store is briefly unreachable: the next beat retries
                log.warning("ingest job heartbeat failed: %s", exc)

    def _view(self, job: IngestJob) -> JobView:
        """The view of ``job``, server folders redacted (also what is saved)."""
        view = job.view()
        return replace(view, report=self.redact.value(view.report),
                       error=None if view.error is None else self.redact.text(view.error),
                       warnings=[self.redact.text(w) for w in view.warnings])

    def _save(self, job: IngestJob) -> None:
        view = self._view(job)
        self.table.save(job.id, view.status, self.replica_id, view.created.timestamp(), job.request(),
                        view.to_state())

    def submit(self, job: IngestJob) -> IngestJob:
        """Queue ``job`` (kept in the store, where any replica may take it).

        Raises:
            JobsBusyError: ``max_pending`` jobs of this replica are queued or running.
        """
        with self._lock:
            if len(self._queued) + len(self._running) >= self.max_pending:
                raise JobsBusyError(f"{self.max_pending} ingest jobs are already pending; retry later")
            job.status, job.replica = "queued", self.replica_id
            self._save(job)
            self._queued.add(job.id)
        self.table.forget_finished(self.keep)
        self._wake.set()
        return job

    def resume(self, job_id: str) -> IngestJob:
        """Queue an interrupted, failed or partial job again, from the start.

        Raises:
            JobNotFoundError: an unknown job.
            JobNotResumableError: it is queued, running, succeeded, or just claimed by another replica.
            JobsBusyError: as for :meth:`submit`.
        """
        if self.pending() >= self.max_pending:
            raise JobsBusyError(f"{self.max_pending} ingest jobs are already pending; retry later")
        row = self.table.claim(job_id, self.replica_id)
        if row is None:
            current = self.table.get(job_id)
            if current is None:
                raise JobNotFoundError(f"no ingest job {job_id!r} (unknown, or forgotten)")
            raise JobNotResumableError(f"ingest job {job_id} is {current.status}: only an interrupted, failed or "
                                       "partial job can be resumed")
        log.info("resuming ingest job %s (replica %s)", job_id, row.owner)
        return self.submit(IngestJob.from_row(row, "resumed: run again from the start"))

    def _work(self) -> None:
        """Take queued jobs from the table and run them, one at a time, until :meth:`close`."""
        while not self._stop.is_set():
            job = self._take_next()
            if job is None:
                self._wake.wait(self.poll_s)
                self._wake.clear()
                continue
            try:
                self._executor.submit(self._run, job).result()
            except RuntimeError:  # closed between taking and running it: back to the queue
                self._requeue(job, None)
                return
            if job.status == "queued":  # the store's ingest lock was held: wait before trying again
                self._stop.wait(self.poll_s)

    def _take_next(self) -> IngestJob | None:
        """The oldest queued job this replica can run, now ``running`` here; None when there is none."""
        try:
            rows = self.table.queued()
        except Exception as exc:
            log.warning("cannot read the ingest queue: %s", exc)
            return None
        for row in rows:
            if self._can_run(row) and (taken := self.table.take(row.id, self.replica_id)) is not None:
                with self._lock:
                    mine = taken.id in self._queued
                note = None if mine else f"taken by replica {self.replica_id} from {row.owner}"
                return IngestJob.from_row(taken, note)
        return None

    def _can_run(self, row: JobRow) -> bool:
        """Whether this replica sees the job's files: its root exists here and, for a server-side
        path, lies under this replica's ingest root."""
        root = Path(row.request["root"])
        if not root.is_dir():
            return False
        if row.request["kind"] == "path":
            return self.ingest_root is not None and root.resolve().is_relative_to(self.ingest_root.resolve())
        return True

    def _requeue(self, job: IngestJob, reason: str | None) -> None:
        """Put ``job`` back in the queue (``reason``, when given, added to its warnings once)."""
        with job.lock:
            job.status, job.started = "queued", None
            if reason and reason not in job.warnings:
                job.warnings.append(reason)
        with self._lock:
            try:
                self._save(job)
            except Exception:
                log.exception("ingest job %s: could not put it back in the queue", job.id)
            self._queued.add(job.id)

    def _run(self, job: IngestJob) -> None:
        """Run a job taken from the queue to its end, or back to the queue when the store is locked."""
        with self._lock:
            self._queued.discard(job.id)
            self._running[job.id] = job
        try:
            finished = self._ingest(job)
        finally:
            with self._lock:
                self._running.pop(job.id, None)
        if not finished:
            return
        with job.lock:
            job.finished = _now()
        try:
            self._save(job)
        except Exception:
            log.exception("ingest job %s: could not save its outcome to the store", job.id)
        if self.on_finish is not None:
            self.on_finish(job)

    def _ingest(self, job: IngestJob) -> bool:
        """Ingest ``job``'s files, setting its status, report and error; False when it went back
        to the queue (another ingest holds the store's lock)."""
        with job.lock:
            job.status, job.started, job.replica = "running", _now(), self.replica_id
        saved_at = time.monotonic()

        def progress(p: IngestProgress) -> None:
            nonlocal saved_at
            with job.lock:
                job.progress = p
            if time.monotonic() - saved_at >= PROGRESS_SAVE_S:
                saved_at = time.monotonic()
                self._save(job)

        try:
            self._save(job)
            files, install_failures, prune_under, supersede_under = self._prepare(job)
            self._save(job)  # uploads: the files now live at their home
            may_write = Access.from_read_scope(job.writer).allows if job.writer else None
            options = IngestOptions(prune_under=prune_under, supersede_under=supersede_under, may_write=may_write)
            report = ingest_paths(files, self.store, prune=job.prune, progress=False, on_progress=progress,
                                  root=job.root, options=options)
            report.files.extend(install_failures)
        except StoreLockedError as exc:
            log.info("ingest job %s waits: %s", job.id, exc)
            self._requeue(job, f"waited: {exc}")
            return False
        except IngestError as exc:
            log.warning("ingest job %s failed: %s", job.id, exc)
            stopped = getattr(exc, "report", None)  # a store error mid-run: the files done so far
            with job.lock:
                job.status, job.error = "failed", str(exc)
                job.report = stopped.to_dict() if isinstance(stopped, IngestReport) else None
        except Exception as exc:  # keep the thread alive and say what happened
            log.exception("ingest job %s failed", job.id)
            with job.lock:
                job.status, job.error = "failed", f"unexpected {type(exc).__name__}: {exc}"
        else:
            _conclude(job, report)
        return True

    # `builtins.list`: the class's own `list` method shadows it here
    def _prepare(self, job: IngestJob) -> tuple[builtins.list[Path], builtins.list[FileReport], Path | None,
                                                Path | None]:
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
        """Stop taking jobs and renewing leases; a running job finishes in the background (the
        store stays consistent). Jobs still queued stay queued for another replica to take (or
        this one once restarted); when none does within the lease they turn ``interrupted``."""
        self._stop.set()
        self._wake.set()
        self._executor.shutdown(wait=False, cancel_futures=True)


def _conclude(job: IngestJob, report: IngestReport) -> None:
    """A finished run's status (``succeeded``, ``partial`` or ``failed``, see
    :attr:`IngestReport.outcome`), report, and warnings or error naming the failed counts."""
    counts = report.counts
    with job.lock:
        job.report = report.to_dict()
        job.status = report.outcome
        if job.status == "failed":
            job.error = (f"no file was ingested: {counts['failed']} of {len(report.files)} file(s) failed "
                         "(see the report)")
        elif counts["failed"]:
            job.warnings.append(f"{counts['failed']} of {len(report.files)} file(s) failed: see the report")
        if report.failed_records:
            job.warnings.append(f"{report.failed_records} record(s) failed: see failed_records in the report")
