"""What ``copilot ingest`` shows while it runs: a rich progress bar with an ETA on a terminal,
one log line per file otherwise."""

from __future__ import annotations

import logging
from typing import Any

from ingestion.report import FileReport

log = logging.getLogger("ingestion.pipeline")


class ProgressDisplay:
    """Rich progress bar on a terminal (files done, chunks written, elapsed time, ETA), plain
    log lines otherwise.

    Args:
        enabled: draw the bar (on rich's process console, where the CLI's log handler prints
            too, so log records appear above the bar instead of breaking it).
        total: files to ingest.
    """

    def __init__(self, enabled: bool, total: int) -> None:
        self.progress: Any = None
        self.task: Any = None
        if enabled:
            from rich import get_console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            # on rich's process console: the CLI's log handler prints there too, above the bar
            self.progress = Progress(
                TextColumn("[bold]ingest[/bold] {task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[chunks]} chunks written"), TimeElapsedColumn(), TextColumn("ETA"),
                TimeRemainingColumn(), console=get_console(), transient=False,
            )
            self.task = self.progress.add_task("", total=total, chunks=0)
            self.progress.start()

    def update(self, done: int, total: int, current: str | None, chunks: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=done, description=current or "", chunks=chunks)

    def file_done(self, done: int, total: int, entry: FileReport) -> None:
        if self.progress is None:
            extra = f" ({entry.reason})" if entry.reason else ""
            log.info("[%d/%d] %s: %s, %d documents, %d chunks, %d written%s", done, total, entry.source,
                     entry.status, entry.documents, entry.chunks, entry.written_chunks, extra)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
