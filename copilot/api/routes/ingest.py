"""``POST /v1/ingest`` starts a background ingest job; ``GET /v1/ingest/{id}`` reports on it,
``GET /v1/ingest`` lists jobs, ``POST /v1/ingest/{id}/resume`` runs an interrupted one again.

Jobs are kept in the store, so every replica of a shared store reports on every job, and a
job survives the restart of the replica that ran it (as ``interrupted``).

Two request forms (chosen by ``Content-Type``):

- ``multipart/form-data``: one or more files in the field ``files`` (optionally a
  relative ``folder`` their sources are named under, and ``prune``); each is kept at
  ``data_dir/uploads/<folder>/<name>`` and ingested from there, so uploading a name again
  replaces its documents when the file changed (``unchanged`` when not), and ``prune``
  removes the folder's files not in this upload with their documents (see
  :mod:`ingestion.uploads`). Limit: ``max_upload_bytes``.
- ``application/json``: ``{"path": ..., "prune": false}``, a file or folder on the
  server that must lie under ``ingest_root``. Limit: ``max_body_bytes``.

Every route needs a key with the ``ingest`` right (when keys are configured). A key restricted
to source folders may only ingest files whose sources lie under them (uploads: ``folder`` and
the file name; paths: the sources relative to the path), and sees only the jobs all of whose
files lie under them (jobs show file names, counts and errors, never document text); any
other job answers 404. ``prune`` deletes documents wherever the job reaches, so it needs the
``delete`` right and a key without a read scope.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from copilot.access import Access
from copilot.api.dependencies import IngestAccess, IngestJobsDep, SettingsDep, ingest_access
from copilot.api.ingest_paths import PathRejectedError, resolve_ingest_path
from copilot.api.openapi import error_responses
from copilot.api.schemas.ingest import IngestAccepted, IngestJobList, IngestJobOut, IngestPathRequest, IngestProgressOut
from copilot.serving.ingest_jobs import (
    IngestJob,
    JobNotFoundError,
    JobNotResumableError,
    JobRefusedError,
    JobsBusyError,
    JobView,
)
from ingestion.uploads import (
    UploadConflictError,
    UploadNameError,
    UploadPathError,
    UploadRejectedError,
    UploadStorageError,
    safe_folder,
    safe_upload_name,
)

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/ingest", tags=["ingest"], dependencies=[Depends(ingest_access)])
#: Jobs read to filter a folder-restricted key's list (the store keeps at most ~200 finished ones).
_ALL_JOBS = 10_000

_TRUE = {"1", "true", "yes", "on"}
_OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": IngestPathRequest.model_json_schema()},
            "multipart/form-data": {"schema": {
                "type": "object", "required": ["files"],
                "properties": {
                    "files": {"type": "array", "items": {"type": "string", "format": "binary"}},
                    "folder": {"type": "string", "description": "relative folder the sources are named under"},
                    "prune": {"type": "boolean"},
                }}},
        },
    }
}


#: HTTP status of each kind of refused upload.
_UPLOAD_STATUS: dict[type[UploadRejectedError], int] = {UploadNameError: 422, UploadConflictError: 409,
                                                         UploadPathError: 400}
#: HTTP status of each kind of job the manager refuses to queue.
_JOB_STATUS: dict[type[JobRefusedError], int] = {JobsBusyError: 503, JobNotFoundError: 404,
                                                 JobNotResumableError: 409}


def _reject(exc: PathRejectedError | UploadRejectedError | JobRefusedError) -> HTTPException:
    if isinstance(exc, UploadStorageError):
        return HTTPException(exc.status, str(exc), headers={"Retry-After": "60"})
    if isinstance(exc, UploadRejectedError):
        return HTTPException(_UPLOAD_STATUS.get(type(exc), 400), str(exc))
    if isinstance(exc, JobRefusedError):
        code = _JOB_STATUS.get(type(exc), 409)
        return HTTPException(code, str(exc), headers={"Retry-After": "10"} if code == 503 else None)
    headers = {"Retry-After": "10"} if exc.status == 503 else None
    return HTTPException(exc.status, exc.reason, headers=headers)


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=IngestAccepted, openapi_extra=_OPENAPI_BODY,
             responses=error_responses(400, 401, 403, 404, 409, 413, 415, 422, 503, 507))
async def start_ingest(request: Request, settings: SettingsDep, jobs: IngestJobsDep,
                       access: IngestAccess) -> IngestAccepted:
    """Start an ingest job (uploaded files or a server-side path); answers 202 with the job id.

    Errors: 400 ``..`` in a path or a malformed form, 403 path outside the ingest root (or
    server-side ingest disabled, or sources outside the key's folders, or ``prune`` without the
    right), 404 no such path, 409 an upload folder that crosses an
    uploaded file (or a file name that is an upload folder), 413 body too large, 415 other
    content types, 422 invalid fields or no files, 503 too many pending jobs (or an unwritable
    uploads folder), 507 no space for the upload. A ``folder`` name over 255 bytes, or a folder
    over 32 names or 1,024 bytes, is a 400. Per-file
    outcomes (``skipped`` for named pipes, sockets and devices; ``failed_records`` for bad
    records) are in the job's report.
    """
    content_type = request.headers.get("content-type", "").lower()
    job_id = jobs.new_id()
    try:
        if content_type.startswith("multipart/form-data"):
            async with request.form(max_files=settings.max_upload_files, max_fields=10) as form:
                uploads = [v for v in form.getlist("files") + form.getlist("file") if isinstance(v, UploadFile)]
                if not uploads:
                    raise PathRejectedError(422, "no files: send them in the multipart field 'files'")
                folder = safe_folder(_text(form.get("folder")))
                prune = (_text(form.get("prune")) or "").lower() in _TRUE
                check_job_scope(access, [(folder / safe_upload_name(u.filename)).as_posix() for u in uploads], prune)
                paths = await asyncio.to_thread(jobs.uploads.stage, job_id, [(u.filename, u.file) for u in uploads],
                                                folder)
            job = IngestJob(job_id, "upload", paths, jobs.uploads.staging_dir(job_id), prune=prune, folder=folder,
                            writer=_writer(access))
        elif content_type.startswith("application/json") or not content_type:
            try:
                body = IngestPathRequest.model_validate_json(await request.body())
            except ValidationError as exc:
                raise RequestValidationError(exc.errors(include_url=False)) from exc
            root, files = await asyncio.to_thread(resolve_ingest_path, body.path, settings.ingest_root)
            job = IngestJob(job_id, "path", files, root, prune=body.prune, writer=_writer(access))
            check_job_scope(access, job.sources(), job.prune)
        else:
            raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                                f"unsupported Content-Type {content_type!r}: send multipart/form-data files "
                                "or application/json {\"path\": ...}")
        jobs.submit(job)
    except (PathRejectedError, UploadRejectedError, JobRefusedError) as exc:
        jobs.uploads.discard(job_id)
        raise _reject(exc) from exc
    except OSError as exc:  # e.g. the request body spooled to a full disk: one line, no traceback
        jobs.uploads.discard(job_id)
        log.error("ingest request %s: cannot take it: %s", job_id, exc.strerror or type(exc).__name__)
        raise HTTPException(507 if exc.errno in (errno.ENOSPC, errno.EDQUOT) else 503,
                            f"the server cannot take the request now: {exc.strerror or type(exc).__name__}",
                            headers={"Retry-After": "60"}) from None
    except BaseException:
        jobs.uploads.discard(job_id)
        raise
    return IngestAccepted(id=job.id, status=job.status, files=job.sources(),
                          status_url=str(request.url_for("get_ingest_job", job_id=job.id)))


@router.get("", response_model=IngestJobList)
async def list_ingest_jobs(offset: int = Query(0, ge=0, le=2**63 - 1), limit: int = Query(50, ge=1, le=500),
                           *, jobs: IngestJobsDep, access: IngestAccess) -> IngestJobList:
    """Ingest jobs of every replica, newest first, with their status and per-file reports (a key
    that may not read everything: the jobs it started)."""
    if access.reads_all:
        found, total = await asyncio.to_thread(jobs.list, offset, limit)
        return IngestJobList(jobs=[job_out(j) for j in found], total=total, offset=offset, limit=limit)
    every, _ = await asyncio.to_thread(jobs.list, 0, _ALL_JOBS)
    visible = [job_out(j) for j in every if job_visible(access, j)]
    return IngestJobList(jobs=visible[offset:offset + limit], total=len(visible), offset=offset, limit=limit)


@router.get("/{job_id}", response_model=IngestJobOut, responses=error_responses(404))
async def get_ingest_job(job_id: str, jobs: IngestJobsDep, access: IngestAccess) -> IngestJobOut:
    """Status, progress and (once finished) the per-file report of an ingest job (of any replica;
    404 for one the key may not see)."""
    job = await asyncio.to_thread(jobs.get, job_id)
    if job is None or not job_visible(access, job):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no ingest job {job_id!r} (unknown, or forgotten)")
    return job_out(job)


@router.post("/{job_id}/resume", status_code=status.HTTP_202_ACCEPTED, response_model=IngestAccepted,
             responses=error_responses(404, 409, 503))
async def resume_ingest_job(job_id: str, request: Request, jobs: IngestJobsDep,
                            access: IngestAccess) -> IngestAccepted:
    """Run an interrupted (or failed) job again on this replica, from the start; ingest is
    idempotent, so what its first run stored is kept and the rest is added.

    Errors: 403 a job that prunes and a key without the right, 404 unknown job (or one the key
    may not see), 409 the job is queued, running or succeeded (or another replica claimed it
    first), 503 too many pending jobs here.
    """
    try:
        row = await asyncio.to_thread(jobs.table.get, job_id)
        if row is not None:
            shown = await asyncio.to_thread(jobs.get, job_id)
            if shown is None or not job_visible(access, shown):
                raise PathRejectedError(404, f"no ingest job {job_id!r} (unknown, or forgotten)")
            check_job_scope(access, shown.files, bool(row.request.get("prune")))
        job = await asyncio.to_thread(jobs.resume, job_id)
    except (PathRejectedError, JobRefusedError) as exc:
        raise _reject(exc) from exc
    return IngestAccepted(id=job.id, status=job.status, files=job.sources(),
                          status_url=str(request.url_for("get_ingest_job", job_id=job.id)))


def _writer(access: Access) -> dict[str, Any] | None:
    """What a job keeps of the key that starts it: its read scope, unless it reads everything."""
    return None if access.reads_all else access.read_scope()


def job_out(job: JobView) -> IngestJobOut:
    """The API model of a job the manager reports."""
    return IngestJobOut(**{**asdict(job), "progress": IngestProgressOut(**asdict(job.progress))})


def job_visible(access: Access, job: JobView) -> bool:
    """Whether ``access`` may see (and resume) ``job``: every job for a key that reads everything,
    else the jobs it started (their reports name its files only)."""
    return access.reads_all or job.submitted_by == access.name and all(access.allows_source(s) for s in job.files)


def check_job_scope(access: Access, sources: list[str], prune: bool) -> None:
    """Refuse a job the key may not run.

    Raises:
        PathRejectedError: 403 for sources outside its folders (up to three named), or ``prune``
            without the delete right and full read scope.
    """
    outside = [s for s in sources if not access.allows_source(s)]
    if outside:
        raise PathRejectedError(403, f"the API key {access.name!r} may ingest only under {list(access.folders or ())}; "
                                     f"outside them: {', '.join(outside[:3])}")
    if prune and not (access.can_delete and access.reads_all):
        raise PathRejectedError(403, f"the API key {access.name!r} may not prune: pruning deletes documents, and "
                                     "needs the delete right and a key without a read scope")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
