"""How far an ingest run is: the snapshot passed to ``on_progress`` (:class:`IngestProgress`), the
tracker that builds it (:class:`ProgressTracker`), and what ``copilot ingest`` shows
(:class:`ProgressDisplay`: a rich progress bar with an ETA on a terminal, log lines otherwise).

Progress advances inside a file, not only between files: the pipeline reports each record
(document) it has examined, so a single 100,000-record JSON Lines file shows records done and
an ETA. Work is measured in bytes: the files done, plus the done share (records done / records)
of the current one, out of the bytes of every file found; the ETA extrapolates the elapsed time
over the bytes left.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingestion.report import FileReport

log = logging.getLogger("ingestion.pipeline")

#: Fewest seconds between two within-file progress events (after a written batch one is always sent).
PROGRESS_EVERY_S = 0.5
#: Fewest seconds between two within-file progress log lines (when no bar is drawn).
LOG_EVERY_S = 10.0


@dataclass(frozen=True)
class IngestProgress:
    """Progress snapshot passed to ``on_progress`` after each file, each written batch, and at most
    every :data:`PROGRESS_EVERY_S` seconds while a file's records are examined.

    Attributes:
        files_done / files_total: files finished / found.
        current: the file being worked on (its source name), None after a batch was written.
        documents_written / chunks_written: written to the store so far in this run.
        elapsed_s: seconds since the run started.
        records_done / records_total: records of the current file examined so far (written,
            queued for the next batch, or unchanged) / in it (0 until it is loaded).
        bytes_done / bytes_total: bytes of the files done plus the done share of the current one /
            bytes of every file found.
        eta_s: estimated seconds left (None until some work is done).
    """

    files_done: int
    files_total: int
    current: str | None
    documents_written: int
    chunks_written: int
    elapsed_s: float
    records_done: int = 0
    records_total: int = 0
    bytes_done: int = 0
    bytes_total: int = 0
    eta_s: float | None = None


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


class ProgressTracker:
    """Counts files, records and writes of one run; tells the display and ``on_progress``.

    Args:
        display: what the user sees.
        on_progress: called with each :class:`IngestProgress` (None: nobody listens).
        files: the files to ingest (their sizes are the measure of work).
        started: ``time.perf_counter()`` at the start of the run.
    """

    def __init__(self, display: ProgressDisplay, on_progress: Callable[[IngestProgress], None] | None,
                 files: Sequence[Path], started: float) -> None:
        self.display = display
        self.on_progress = on_progress
        self.total = len(files)
        self.started = started
        self.sizes = [_size(p) for p in files]
        self.bytes_total = sum(self.sizes)
        self.done = 0
        self.bytes_finished = 0
        self.docs_written = 0
        self.chunks_written = 0
        self.records_done = 0
        self.records_total = 0
        self._sent_at = 0.0

    def snapshot(self, current: str | None) -> IngestProgress:
        """The progress now, ``current`` being worked on."""
        size = self.sizes[self.done] if self.done < self.total else 0
        share = self.records_done / self.records_total if self.records_total else 0.0
        bytes_done = self.bytes_finished + int(size * min(1.0, share))
        elapsed = time.perf_counter() - self.started
        eta = elapsed * (self.bytes_total - bytes_done) / bytes_done if bytes_done and elapsed > 0 else None
        return IngestProgress(self.done, self.total, current, self.docs_written, self.chunks_written, elapsed,
                              self.records_done, self.records_total, bytes_done, self.bytes_total,
                              None if eta is None else round(eta, 1))

    def notify(self, current: str | None) -> None:
        """Show that ``current`` (a source name; None after a batch) is being worked on."""
        progress = self.snapshot(current)
        self._sent_at = time.monotonic()
        self.display.update(progress)
        if self.on_progress is not None:
            self.on_progress(progress)

    def start_file(self, records: int) -> None:
        """The current file has been loaded: it holds ``records`` records."""
        self.records_done, self.records_total = 0, records

    def record_done(self, current: str) -> None:
        """One more record of ``current`` examined; tells listeners at most every :data:`PROGRESS_EVERY_S`."""
        self.records_done += 1
        if time.monotonic() - self._sent_at >= PROGRESS_EVERY_S:
            self.notify(current)

    def file_done(self, entry: FileReport) -> None:
        """Count ``entry``'s file as done."""
        self.bytes_finished += self.sizes[self.done] if self.done < self.total else 0
        self.done += 1
        self.records_done = self.records_total = 0
        self.display.file_done(self.done, self.total, entry)
        self.notify(entry.source)

    def wrote(self, documents: int, chunks: int) -> None:
        """Count a written batch."""
        self.docs_written += documents
        self.chunks_written += chunks
        self.notify(None)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


class ProgressDisplay:
    """Rich progress bar on a terminal (bytes done, current file with its records done, chunks
    written, elapsed time, ETA), plain log lines otherwise (one per file, and one every
    :data:`LOG_EVERY_S` seconds inside a large file).

    Args:
        enabled: draw the bar (on rich's process console, where the CLI's log handler prints
            too, so log records appear above the bar instead of breaking it).
        total: files to ingest.
    """

    def __init__(self, enabled: bool, total: int) -> None:
        self.progress: Any = None
        self.task: Any = None
        self._logged_at = time.monotonic()
        self._current: str | None = None
        if enabled:
            from rich import get_console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("[bold]ingest[/bold] {task.description}"), BarColumn(),
                TextColumn("{task.fields[files]} files, {task.fields[chunks]} chunks written"), TimeElapsedColumn(),
                TextColumn("ETA"), TimeRemainingColumn(), console=get_console(), transient=False,
            )
            self.task = self.progress.add_task("", total=None, chunks=0, files=f"0/{total}")
            self.progress.start()

    def update(self, p: IngestProgress) -> None:
        """Show snapshot ``p``."""
        current = p.current or self._current
        self._current = current
        records = f" {p.records_done}/{p.records_total} records" if p.records_total else ""
        if self.progress is not None:
            self.progress.update(self.task, completed=p.bytes_done, total=p.bytes_total or None,
                                 description=f"{current or ''}{records}", chunks=p.chunks_written,
                                 files=f"{p.files_done}/{p.files_total}")
        elif p.records_total and time.monotonic() - self._logged_at >= LOG_EVERY_S:
            self._logged_at = time.monotonic()
            log.info("[%d/%d] %s:%s, %d chunks written, %.0f s elapsed, ETA %s", p.files_done + 1, p.files_total,
                     current, records, p.chunks_written, p.elapsed_s, _duration(p.eta_s))

    def file_done(self, done: int, total: int, entry: FileReport) -> None:
        """Log ``entry``'s outcome (when no bar is drawn)."""
        if self.progress is None:
            extra = f" ({entry.reason})" if entry.reason else ""
            log.info("[%d/%d] %s: %s, %d documents, %d chunks, %d written%s", done, total, entry.source,
                     entry.status, entry.documents, entry.chunks, entry.written_chunks, extra)

    def close(self) -> None:
        """Stop drawing the bar."""
        if self.progress is not None:
            self.progress.stop()
