"""The API server's followed sources (``COPILOT_WATCH_PATHS``): server-side paths re-ingested as they
change, by an :class:`ingestion.watch.SourceWatcher` on a thread of its own, started with the app and
stopped with it.

The paths must lie under ``COPILOT_INGEST_ROOT`` (the bound of every server-side ingest path,
:mod:`copilot.api.ingest_paths`): :func:`check_watch_paths` refuses others when the settings load,
so the server does not start. Sources are named relative to the ingest root, so adding a path to
the setting later renames nothing already stored. A file that is a symlink leading outside the
ingest root is skipped, never read, as ``POST /v1/ingest`` refuses it. Cycles take the store's
ingest lock like any ingest (an API job or a ``copilot ingest`` holding it is waited out).

What an admin sees: a log line per cycle (``watch cycle N: succeeded, files {...}``) and warnings for
paths that disappear, and the ``copilot_watch_*`` series on ``GET /metrics`` (:class:`WatchCollector`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ingestion.report import FILE_STATUSES
from ingestion.stores.chunk_store import ChunkStore
from ingestion.watch import SourceWatcher, WatchCycle, WatchOptions, WatchStatus

log = logging.getLogger(__name__)

#: Seconds :meth:`ServerWatch.stop` waits for a cycle in progress to stop at its next progress point.
STOP_WAIT_S = 10.0


def check_watch_paths(paths: Sequence[Path], ingest_root: Path | None) -> list[Path]:
    """The followed paths as absolute paths, each checked to lie under ``ingest_root``.

    A path may be relative to the ingest root or absolute inside it, and need not exist yet (it is
    followed once it appears).

    Raises:
        ValueError: paths are given without an ingest root, or one has a ``..`` component or lies
            outside the root (a symlink that leads out included); the message names it and the
            settings (``COPILOT_WATCH_PATHS``, ``COPILOT_INGEST_ROOT``).
    """
    if not paths:
        return []
    if ingest_root is None:
        raise ValueError("COPILOT_WATCH_PATHS needs COPILOT_INGEST_ROOT: followed paths are server-side ingest "
                         "paths and must lie under it")
    root_abs, root_real = Path(ingest_root).absolute(), Path(ingest_root).resolve()
    checked = []
    for raw in paths:
        if ".." in PurePosixPath(str(raw).replace("\\", "/")).parts:
            raise ValueError(f"COPILOT_WATCH_PATHS: '..' is not allowed: {raw}")
        path = Path(raw) if Path(raw).is_absolute() else root_abs / raw
        inside = path.is_relative_to(root_abs) or path.is_relative_to(root_real)
        if inside and os.path.lexists(path):
            inside = path.resolve().is_relative_to(root_real)
        if not inside:
            raise ValueError(f"COPILOT_WATCH_PATHS: {raw} lies outside COPILOT_INGEST_ROOT ({ingest_root}); "
                             "followed paths must lie under it")
        checked.append(path)
    return list(dict.fromkeys(checked))


class WatchCollector(Collector):
    """The watcher's state as Prometheus series, read from :meth:`SourceWatcher.status` at each scrape:
    ``copilot_watch_paths{state}`` (``followed``, ``missing``: gone or unreadable now),
    ``copilot_watch_polling`` (1 when polling), ``copilot_watch_cycles_total``,
    ``copilot_watch_last_cycle_timestamp_seconds``, ``copilot_watch_last_cycle_files{status}`` and
    ``copilot_watch_last_cycle_failed`` (1 when the latest cycle, or the watcher since, met an error)."""

    def __init__(self, watcher: SourceWatcher) -> None:
        self.watcher = watcher

    def collect(self) -> Iterator[Metric]:
        status = self.watcher.status()
        paths = GaugeMetricFamily("copilot_watch_paths", "Followed source paths (COPILOT_WATCH_PATHS) by state",
                                  labels=["state"])
        paths.add_metric(["followed"], len(status.paths) - len(status.missing))
        paths.add_metric(["missing"], len(status.missing))
        yield paths
        yield GaugeMetricFamily("copilot_watch_polling", "1 when the source watcher polls instead of using "
                                "file system notifications", value=float(status.mode == "polling"))
        yield CounterMetricFamily("copilot_watch_cycles", "Ingest cycles run by the source watcher",
                                  value=status.cycles)
        if status.last_cycle_at is not None:
            yield GaugeMetricFamily("copilot_watch_last_cycle_timestamp_seconds", "When the latest source watch "
                                    "cycle ended (Unix time)", value=status.last_cycle_at)
        files = GaugeMetricFamily("copilot_watch_last_cycle_files", "Files per status in the latest source "
                                  "watch cycle", labels=["status"])
        for name in FILE_STATUSES:
            files.add_metric([name], status.last_counts.get(name, 0))
        yield files
        yield GaugeMetricFamily("copilot_watch_last_cycle_failed", "1 when the latest source watch cycle (or the "
                                "watcher since) met an error; the log line says which",
                                value=float(status.last_error is not None))


class ServerWatch:
    """A :class:`SourceWatcher` on a daemon thread, with its metrics registered while it runs.

    Args:
        watcher: the watcher to run.
        registry: where its :class:`WatchCollector` is registered (the app's metrics registry), or None.
    """

    def __init__(self, watcher: SourceWatcher, registry: CollectorRegistry | None = None) -> None:
        self.watcher = watcher
        self.registry = registry
        self.collector = WatchCollector(watcher)
        self.thread = threading.Thread(target=self._run, name="source-watch", daemon=True)

    def _run(self) -> None:
        try:
            self.watcher.run()
        except Exception:  # the watcher handles its own failures; a bug must still be said
            log.exception("the source watcher stopped")

    def start(self) -> "ServerWatch":
        """Register the metrics and start the thread."""
        if self.registry is not None:
            self.registry.register(self.collector)
        self.thread.start()
        return self

    def status(self) -> WatchStatus:
        """The watcher's status now."""
        return self.watcher.status()

    def stop(self, wait_s: float = STOP_WAIT_S) -> None:
        """Stop the watcher (a cycle in progress stops at its next progress point, what it wrote
        stays stored), wait up to ``wait_s`` seconds for the thread, and unregister the metrics."""
        self.watcher.stop()
        self.thread.join(wait_s)
        if self.thread.is_alive():
            log.warning("the source watcher is still finishing a write; it stops at the next batch")
        if self.registry is not None:
            self.registry.unregister(self.collector)


class WatchSettings(Protocol):
    """What :func:`start_source_watch` reads from the settings (:class:`copilot.config.Settings`)."""

    ingest_root: Path | None
    watch_paths: list[Path]
    watch_prune: bool
    watch_poll: bool
    watch_debounce_s: float
    watch_poll_interval_s: float


def start_source_watch(settings: WatchSettings, store: ChunkStore,
                       registry: CollectorRegistry | None = None) -> ServerWatch | None:
    """Start following ``settings.watch_paths`` (already checked by :func:`check_watch_paths` when the
    settings loaded) into ``store``, sources named relative to the ingest root; None when none is set.

    Args:
        settings: the watch settings and the ingest root.
        store: the server's store.
        registry: where the ``copilot_watch_*`` series are registered (the app's metrics registry).
    """
    if not settings.watch_paths or settings.ingest_root is None:
        return None
    root = Path(settings.ingest_root).resolve()
    options = WatchOptions(prune=settings.watch_prune, poll=settings.watch_poll, debounce_s=settings.watch_debounce_s,
                           poll_interval_s=settings.watch_poll_interval_s, confine_to=root)

    def logged(cycle: WatchCycle) -> None:
        for entry in cycle.report.files if cycle.report is not None else []:
            if entry.status in ("failed", "skipped"):
                log.warning("watch: %s %s: %s", entry.source, entry.status, entry.reason)

    watcher = SourceWatcher(settings.watch_paths, store, options, root=root, on_cycle=logged)
    return ServerWatch(watcher, registry).start()
