"""The ``copilot ingest`` command's body: open the store, ingest (:func:`~ingestion.pipeline.ingest_paths`),
log what failed, write the report, and choose the exit code; with ``--watch``, :func:`run_watch` follows
the paths afterwards (:mod:`ingestion.watch`)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ingestion.embedding import Embedder
from ingestion.errors import StoreError, StoreLockedError
from ingestion.files import discover_files
from ingestion.interrupt import IngestInterrupted, stop_on_signals
from ingestion.loaders import LoaderConfig
from ingestion.pipeline import IngestOptions, common_root, ingest_paths, mark_not_reached
from ingestion.report import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, EXIT_STORE, EXIT_USAGE, IngestReport
from ingestion.stores.chunk_store import StoreSettings, open_store
from ingestion.watch import SourceWatcher, WatchCycle, WatchOptions, signals_stop

log = logging.getLogger(__name__)


def write_report(report: IngestReport, path: Path) -> None:
    """Write ``report.to_dict()`` as indented JSON to ``path`` (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


@dataclass
class IngestOutcome:
    """What :func:`run_ingest` did: the report (``report.error`` says why a run did not
    complete) and the process exit code (``EXIT_*``)."""

    report: IngestReport
    exit_code: int


def run_ingest(paths: Sequence[Path], settings: StoreSettings, *, prune: bool = False,
               report_file: Path | None = None, progress: bool | None = None,
               loader_config: LoaderConfig | None = None, embedder: Embedder | None = None) -> IngestOutcome:
    """Body of ``copilot ingest PATH... [--prune] [--report FILE.json]`` (``python -m ingestion`` runs that command).

    Opens the store with :func:`ingestion.stores.chunk_store.open_store`, ingests, logs each failed file
    and record, and writes the report to ``report_file`` -- also when the run could not
    happen (another ingest holds the lock) or stopped (store error): ``error`` then says why.

    Args:
        paths: files and folders (callers check they exist).
        settings: store settings (``data_dir``, ``chroma_url``, ``collection``, ``embedding_model``).
        prune / progress / loader_config: as for :func:`ingest_paths`.
        embedder: an already-built embedder (default: from the settings).
    Returns:
        The report and the exit code: ``EXIT_OK``, ``EXIT_FAILED`` (files or records failed),
        ``EXIT_LOCKED`` (another ingest holds the store's lock), ``EXIT_STORE`` (the store is
        unusable or failed mid-run), ``EXIT_USAGE`` (the report file cannot be written), or
        128 + the signal's number (130, 143) when SIGINT or SIGTERM stopped the run (see
        :mod:`ingestion.interrupt`: what was written stays stored, the report says what was not).
    """
    report = IngestReport()
    code = EXIT_OK
    opened = True
    try:
        store = open_store(settings, embedder=embedder)
    except StoreError as exc:
        report.error, code, opened = str(exc), EXIT_STORE, False
        files, missing = discover_files([Path(p) for p in paths])
        mark_not_reached(report, files + missing, common_root([Path(p) for p in paths]),
                         f"not reached: the store cannot be opened ({exc}); re-run to resume")
    else:
        try:
            with stop_on_signals():
                report = ingest_paths([Path(p) for p in paths], store, prune=prune, progress=progress,
                                      options=IngestOptions(loader_config=loader_config or LoaderConfig()))
        except IngestInterrupted as exc:  # SIGINT / SIGTERM: the report says what was stored
            report, code = exc.report or report, exc.exit_code
            report.error = report.error or f"interrupted by {exc.signal_name} before any file was read"
        except StoreLockedError as exc:
            report.error, code = str(exc), EXIT_LOCKED
        except StoreError as exc:
            report = getattr(exc, "report", None) or report
            report.error, code = str(exc), EXIT_STORE
        finally:
            store.close()
    if code == EXIT_OK:
        code = EXIT_OK if report.ok else EXIT_FAILED
    if opened:  # a store that never opened: its one error line says it
        log_failures(report)
    if report_file is not None:
        try:
            write_report(report, Path(report_file))
        except OSError as exc:
            log.error("cannot write the report to %s: %s", report_file, exc.strerror or exc)
            if code == EXIT_OK or code == EXIT_FAILED:
                code = EXIT_USAGE
    return IngestOutcome(report, code)


def log_failures(report: IngestReport) -> None:
    """Log each failed file and each failed record of ``report`` (one error line each)."""
    for entry in report.files:
        if entry.status == "failed":
            log.error("failed: %s: %s", entry.source, entry.reason)
        for failure in entry.failed_records:
            log.error("record failed: %s %s: %s", entry.source, failure["where"], failure["reason"])


def run_watch(paths: Sequence[Path], settings: StoreSettings, options: WatchOptions | None = None, *,
              report_file: Path | None = None, embedder: Embedder | None = None,
              on_cycle: Callable[[WatchCycle], None] | None = None, stop: threading.Event | None = None) -> int:
    """Body of ``copilot ingest --watch PATH... [--prune] [--poll] [--report FILE.json]``: ingest the
    paths, then follow them and ingest what changes until SIGINT, SIGTERM or ``stop``
    (:class:`~ingestion.watch.SourceWatcher`; its first cycle is the ordinary first ingest).

    Sources are named relative to the paths' common root, as ``copilot ingest`` names them. After
    each cycle its failed files and records are logged, ``report_file`` is rewritten with its report,
    and ``on_cycle`` is called. Another ingest holding the store's lock, a store error, a watched
    path that disappears: each is logged and waited out, none ends the watch.

    Args:
        paths: files and folders (callers check they exist).
        settings: store settings (as for :func:`run_ingest`).
        options: debounce, polling, prune (default: :class:`~ingestion.watch.WatchOptions`).
        report_file: where each cycle's report is written (JSON, replaced each cycle).
        embedder: an already-built embedder (default: from the settings).
        on_cycle: called with each :class:`~ingestion.watch.WatchCycle` (the command prints it).
        stop: setting it ends the watch (as SIGINT or SIGTERM do on the main thread).
    Returns:
        ``EXIT_OK`` when stopped between cycles; 128 + the signal's number (130, 143) when a signal
        stopped a cycle half-way (what was written stays stored; that cycle's report says what not).
    Raises:
        StoreError: the store cannot be opened (the command exits 4 with the reason).
    """
    store = open_store(settings, embedder=embedder)
    given = [Path(p) for p in paths]

    def finished(cycle: WatchCycle) -> None:
        if cycle.report is not None:
            log_failures(cycle.report)
            if report_file is not None:
                try:
                    write_report(cycle.report, Path(report_file))
                except OSError as exc:
                    log.error("cannot write the report to %s: %s", report_file, exc.strerror or exc)
        if on_cycle is not None:
            on_cycle(cycle)

    watcher = SourceWatcher(given, store, options, root=common_root(given), on_cycle=finished, stop_event=stop)
    try:
        with signals_stop(watcher):
            signum = watcher.run()
    finally:
        store.close()
    return EXIT_OK if signum is None else 128 + signum
