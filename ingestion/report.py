"""The ingest report: one entry per file plus totals, JSON-serialisable."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

#: Allowed per-file statuses.
FILE_STATUSES = ("indexed", "unchanged", "skipped-empty", "failed")


@dataclass
class FileReport:
    """Outcome for one file.

    Attributes:
        path: the file as found on disk.
        source: the source path stored in doc ids (relative to the ingest root).
        status: ``indexed`` (something written or deleted), ``unchanged``, ``skipped-empty``
            (empty, whitespace-only, or no documents) or ``failed`` (``reason`` says why;
            its previously stored documents are left untouched).
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


@dataclass
class IngestReport:
    """Totals and per-file entries of one ingest run.

    Attributes:
        elapsed_s: wall time of the run in seconds.
        chunks_per_s: chunks written per second of wall time (0 when nothing was written).
        pruned_documents: documents deleted because their source file is gone (``--prune``).
        recovered_documents: documents found mid-write from an interrupted run.
    """

    files: list[FileReport] = field(default_factory=list)
    elapsed_s: float = 0.0
    pruned_documents: int = 0
    recovered_documents: int = 0
    embed_s: float = 0.0

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
    def ok(self) -> bool:
        """True when no file failed."""
        return self.counts["failed"] == 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (what ``--report FILE.json`` writes)."""
        return {
            "counts": self.counts,
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
