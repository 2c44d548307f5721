"""``/v1/ingest``: ingest jobs (uploads and server-side paths) and their progress."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from copilot.api.schemas.common import Bool
from copilot.search.filters import Text


class IngestPathRequest(BaseModel):
    """``POST /v1/ingest`` with JSON: ingest a server-side file or folder under ``ingest_root``."""

    model_config = ConfigDict(extra="forbid",
                              json_schema_extra={"examples": [{"path": "tickets/2026-q1", "prune": True}]})

    path: Text = Field(min_length=1, max_length=4096,
                      description="relative to the ingest root, or absolute inside it; no '..'")
    prune: Bool = Field(False, description="delete documents whose source file is gone or whose entry vanished")


class IngestProgressOut(BaseModel):
    """How far a running ingest job is."""

    files_done: int = 0
    files_total: int = 0
    current: str | None = None
    documents_written: int = 0
    chunks_written: int = 0
    elapsed_s: float = 0.0
    records_done: int = Field(0, description="records of the current file examined so far")
    records_total: int = Field(0, description="records in the current file (0 until it is loaded)")
    bytes_done: int = Field(0, description="bytes of the files done plus the done share of the current one")
    bytes_total: int = Field(0, description="bytes of every file of the job")
    eta_s: float | None = Field(None, description="estimated seconds left (null until some work is done)")


class IngestJobOut(BaseModel):
    """An ingest job: ``report`` (the per-file ingest report) is set once it finished."""

    id: str
    kind: Literal["upload", "path"]
    status: Literal["queued", "running", "succeeded", "partial", "failed", "interrupted"] = Field(
        description="succeeded: every file and record was stored (or unchanged, or skipped); partial: some files "
        "or records failed (report.counts, report.failed_records), the others were stored; failed: no file was "
        "stored, or the run stopped (error); interrupted: its replica stopped before it finished. "
        "POST /v1/ingest/{id}/resume runs an interrupted, failed or partial job again")
    created: datetime
    started: datetime | None = None
    finished: datetime | None = None
    files: list[str] = Field(description="the files to ingest, as sources")
    progress: IngestProgressOut
    report: dict[str, Any] | None = None
    error: str | None = None
    warnings: list[str] = []
    replica: str | None = Field(None, description="the API replica that runs (or ran) the job")
    submitted_by: str | None = Field(None, description="the name of the scoped API key that started it (a key "
                                     "that may not read everything sees only its own jobs)")


class IngestJobList(BaseModel):
    """``GET /v1/ingest``: ingest jobs of every replica, newest first."""

    jobs: list[IngestJobOut]
    total: int
    offset: int
    limit: int


class IngestAccepted(BaseModel):
    """``POST /v1/ingest`` (and ``/v1/ingest/{id}/resume``) → 202: poll ``status_url``."""

    id: str
    status: Literal["queued", "running", "succeeded", "partial", "failed", "interrupted"]
    status_url: str
    files: list[str]
