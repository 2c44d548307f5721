"""The ingest report: one entry per file plus totals, JSON-serialisable."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

#: Exit codes of ``copilot ingest`` (and ``python -m ingestion``, which runs it).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_LOCKED = 3
EXIT_STORE = 4

#: The exit codes as ``copilot --help`` and ``copilot ingest --help`` list them.
EXIT_CODES_HELP = (
    "Exit codes of copilot ingest: "
    f"{EXIT_OK} every file indexed, unchanged or skipped; "
    f"{EXIT_FAILED} some files or records failed (outcome 'partial': the others were stored) or every file "
    "failed (outcome 'failed'); see the report; "
    f"{EXIT_USAGE} bad usage or configuration (no such path, invalid settings, report not writable); "
    f"{EXIT_LOCKED} another ingest holds the store's lock (its pid and host are named; nothing changed; re-run later); "
    f"{EXIT_STORE} the store is unusable or failed mid-run (re-run to resume)."
)


#: Allowed per-file statuses.
FILE_STATUSES = ("indexed", "unchanged", "skipped-empty", "skipped", "failed")

#: Outcomes of a whole run (:attr:`IngestReport.outcome`; an API ingest job's final status).
RunOutcome = Literal["succeeded", "partial", "failed"]
RUN_OUTCOMES: tuple[RunOutcome, ...] = ("succeeded", "partial", "failed")


@dataclass
class FileReport:
    """Outcome for one file.

    Attributes:
        path: the file as found on disk.
        source: the source path stored in doc ids (relative to the ingest root).
        status: ``indexed`` (something written or deleted), ``unchanged``, ``skipped-empty``
            (empty, whitespace-only, or no documents), ``skipped`` (not a regular file -- a
            named pipe, socket, device or broken symlink -- or the same file as another entry;
            never opened; ``reason`` says which) or ``failed`` (``reason`` says why; its
            previously stored documents are left untouched).
        documents / chunks: documents and chunks the file has in the store after the run.
        written_documents / written_chunks: re-embedded this run.
        deleted_documents: removed this run (vanished entries with ``--prune``, superseded ids).
        kept_vanished: documents no longer in the file but kept (run with ``--prune`` to delete).
    """

    path: str
    source: str
    status: str = "unchanged"
    reason: str | None = None
    format: str | None = None
    encoding: str | None = None
    documents: int = 0
    chunks: int = 0
    written_documents: int = 0
    written_chunks: int = 0
    deleted_documents: int = 0
    kept_vanished: int = 0
    warnings: list[str] = field(default_factory=list)
    failed_records: list[dict[str, str]] = field(default_factory=list)


@dataclass
class IngestReport:
    """Totals and per-file entries of one ingest run.

    Attributes:
        elapsed_s: wall time of the run in seconds.
        chunks_per_s: chunks written per second of wall time (0 when nothing was written).
        pruned_documents: documents deleted because their source file is gone (``--prune``).
        recovered_documents: documents found mid-write from an interrupted run.
        error: why the run did not happen or did not complete (e.g. another ingest holds
            the store's lock); None when it ran to the end.
    """

    files: list[FileReport] = field(default_factory=list)
    elapsed_s: float = 0.0
    pruned_documents: int = 0
    recovered_documents: int = 0
    embed_s: float = 0.0
    error: str | None = None

    @property
    def counts(self) -> dict[str, int]:
        """Number of files per status (every status present, possibly 0)."""
        seen = Counter(f.status for f in self.files)
        return {status: seen.get(status, 0) for status in FILE_STATUSES}

    @property
    def chunks_written(self) -> int:
        """Chunks embedded and written this run."""
        return sum(f.written_chunks for f in self.files)

    @property
    def documents_written(self) -> int:
        """Documents (re)written this run."""
        return sum(f.written_documents for f in self.files)

    @property
    def documents_deleted(self) -> int:
        """Documents deleted this run, pruned ones included."""
        return sum(f.deleted_documents for f in self.files) + self.pruned_documents

    @property
    def chunks_per_s(self) -> float:
        """Chunks written per second of wall time."""
        return self.chunks_written / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def failed_records(self) -> int:
        """Records not stored, over all files."""
        return sum(len(f.failed_records) for f in self.files)

    @property
    def ok(self) -> bool:
        """True when the run completed and no file and no record failed."""
        return self.error is None and self.counts["failed"] == 0 and self.failed_records == 0

    @property
    def outcome(self) -> RunOutcome:
        """One of :data:`RUN_OUTCOMES`: ``succeeded`` when :attr:`ok`; ``failed`` when the run did
        not complete (``error``) or no file was stored (none ``indexed`` or ``unchanged``) while
        some failed; otherwise ``partial``: some files or records failed, the others were stored."""
        if self.ok:
            return "succeeded"
        counts = self.counts
        if self.error is not None or counts["indexed"] + counts["unchanged"] == 0:
            return "failed"
        return "partial"

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (what ``--report FILE.json`` writes)."""
        return {
            "outcome": self.outcome,
            "counts": self.counts,
            "failed_records": self.failed_records,
            "error": self.error,
            "documents": sum(f.documents for f in self.files),
            "chunks": sum(f.chunks for f in self.files),
            "documents_written": self.documents_written,
            "chunks_written": self.chunks_written,
            "documents_deleted": self.documents_deleted,
            "pruned_documents": self.pruned_documents,
            "recovered_documents": self.recovered_documents,
            "elapsed_s": round(self.elapsed_s, 3),
            "embed_s": round(self.embed_s, 3),
            "chunks_per_s": round(self.chunks_per_s, 2),
            "files": [asdict(f) for f in self.files],
        }
