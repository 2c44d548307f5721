"""Stopping an ingest run on SIGINT or SIGTERM, with a report of what was stored.

:func:`stop_on_signals` turns both signals into :class:`IngestInterrupted` in the main thread
(a plain Ctrl-C is already a ``KeyboardInterrupt``; SIGTERM would otherwise end the process
without a word). :func:`ingestion.pipeline.ingest_paths` catches it, fills in the report (the
batches already written stay stored: each is one crash-safe :meth:`ChunkStore.apply`, so a
re-run resumes; the open batch and the files not reached are listed as not stored) and raises
it again with ``report`` set; ``copilot ingest --report FILE`` then writes that report.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingestion.report import FileReport, IngestReport
    from ingestion.stores.chunk_store import DocumentWrite, WriteBatch

log = logging.getLogger(__name__)

#: The signals :func:`stop_on_signals` handles.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class IngestInterrupted(KeyboardInterrupt):
    """An ingest run stopped by a signal.

    Attributes:
        signum: the signal number (``signal.SIGINT`` for a plain ``KeyboardInterrupt``).
        report: the run's :class:`~ingestion.report.IngestReport` so far, once the pipeline set it.
    """

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = int(signum)
        self.report: IngestReport | None = None

    @property
    def signal_name(self) -> str:
        """``SIGINT`` or ``SIGTERM``."""
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's status for a process ended by this signal: 128 + its number (130, 143)."""
        return 128 + self.signum


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While active, SIGINT and SIGTERM raise :class:`IngestInterrupted` in the main thread (once:
    a second signal while the first one's report is being written is logged and ignored). The
    previous handlers are restored on exit. Off the main thread (an API worker) it does nothing:
    Python delivers signals to the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired:
            log.warning("%s received again: already stopping", signal.Signals(signum).name)
            return
        fired.append(signum)
        raise IngestInterrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def mark_stopped(report: IngestReport, batch: WriteBatch, current: FileReport | None, not_reached: list[FileReport],
                 signal_name: str, written: tuple[int, int]) -> None:
    """Make ``report`` say what a stop left stored.

    The batches written stay stored (each was one crash-safe write). The open ``batch`` is not:
    its documents are taken off their files' written counts, and every file with something in
    it, or not finished (``current``), is ``failed`` with what of it was written. The files not
    reached are appended ``failed`` as not ingested. None of these was fingerprinted, so a re-run
    parses them again and skips their documents already stored.

    Args:
        written: (documents, chunks) written by the run before the stop.
    """
    queued: dict[str, list[DocumentWrite]] = {}
    for w in batch.writes:
        queued.setdefault(w.document.source, []).append(w)
    touched = set(queued) | {f.source for f in batch.files}
    doc_ids = [*batch.deletes, *(doc_id for doc_id, _ in batch.relocate)]
    for entry in report.files:
        mine = queued.get(entry.source, [])
        entry.written_documents -= len(mine)
        entry.written_chunks -= sum(len(w.chunks) for w in mine)
        hit = entry is current or entry.source in touched or any(d.startswith(f"{entry.source}#") for d in doc_ids)
        if entry.status != "failed" and hit:
            entry.status = "failed"
            entry.reason = (f"interrupted by {signal_name}: {entry.written_documents} document(s) of this file "
                            "were written, the others are not stored; re-run to resume")
    for entry in not_reached:
        entry.status, entry.reason = "failed", f"not ingested: the run was interrupted by {signal_name}"
    report.files.extend(not_reached)
    report.error = (f"interrupted by {signal_name}: {written[0]} document(s), {written[1]} chunk(s) written "
                    "and kept; re-run to resume")
    log.warning("ingest %s", report.error)
