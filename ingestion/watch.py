"""Following ingested sources: re-ingest what changes under watched files and folders.

:class:`SourceWatcher` watches paths with :func:`watchfiles.watch` (inotify and its kind), or polls
them (:func:`poll_changes`: a scan every ``poll_interval_s``) with ``WatchOptions.poll`` -- network
filesystems, where notifications miss other hosts' writes -- and on its own when the native watcher
cannot start (e.g. at the inotify watch or instance limit). Changes are collected until the paths have been
quiet for ``debounce_s`` (or ``max_delay_s`` after the first one), then a *cycle* runs the ordinary,
idempotent ingest (:func:`~ingestion.pipeline.ingest_paths`) on the files that changed: unchanged
documents are skipped, so an entry appended to a day's ELOG ``YYMMDDa.log`` is one new document.
The first cycle ingests every watched path whole (the catch-up after a restart).

Rules of a cycle:

- Sources are named relative to one fixed ``root`` (as ``copilot ingest`` names them relative to the
  common root of its paths), so a file changed later keeps the id it got in the first pass.
- A deleted file's documents stay unless ``prune`` is on; with it each watched path is ingested
  with ``--prune`` semantics scoped to that path (documents of files gone from it are deleted).
- A watched path that disappears or becomes unreadable is a one-line warning, not an error: the
  others are followed on, its documents are kept (even with ``prune``: an unmounted share is not a
  deletion), and it is ingested whole again when it comes back (checked every ``check_every_s``).
- When another ingest holds the store's lock the cycle is tried again after ``lock_retry_s``; a store
  error is logged and the cycle tried again after ``error_retry_s``. Nothing of it stops the watcher.
- :meth:`SourceWatcher.stop` ends it: between cycles at once, during one at its next progress point
  (what was written stays stored; the cycle's report says what was not, as for a stopped ingest).

Hidden entries under a watched folder and everything under the store's own data dir are ignored,
as the ingest's folder walk (:func:`ingestion.files.discover_files`) ignores them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import watchfiles

from ingestion.errors import StoreError, StoreLockedError
from ingestion.files import own_path
from ingestion.interrupt import IngestInterrupted
from ingestion.pipeline import IngestOptions, IngestProgress, ingest_paths
from ingestion.report import IngestReport
from ingestion.stores.chunk_store import ChunkStore

log = logging.getLogger(__name__)

#: Seconds the watched paths must be quiet before a cycle runs.
DEFAULT_DEBOUNCE_S = 1.0
#: Seconds between two scans of the watched paths in polling mode.
DEFAULT_POLL_INTERVAL_S = 1.0


@dataclass(frozen=True)
class WatchOptions:
    """How a :class:`SourceWatcher` follows its paths.

    Attributes:
        prune: delete the documents of files deleted under a watched path (``--prune`` semantics).
        poll: scan the paths every ``poll_interval_s`` instead of native notifications (network
            filesystems, where inotify sees no remote writes).
        debounce_s: seconds the paths must be quiet before a cycle runs.
        max_delay_s: seconds after the first change by which a cycle runs even if changes go on.
        poll_interval_s: seconds between two scans in polling mode.
        check_every_s: seconds between two checks that each watched path is still there.
        lock_retry_s: seconds before a cycle refused by the store's ingest lock is tried again.
        error_retry_s: seconds before a cycle that met a store error is tried again.
        progress: rich progress bar (True), log lines (False), or a bar when stderr is a terminal (None).
        confine_to: files whose real path (symlinks followed) lies outside this folder are skipped,
            never read (the server's ingest root; None: no bound, as ``copilot ingest``).
    """

    prune: bool = False
    poll: bool = False
    debounce_s: float = DEFAULT_DEBOUNCE_S
    max_delay_s: float = 10.0
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    check_every_s: float = 0.5
    lock_retry_s: float = 2.0
    error_retry_s: float = 10.0
    progress: bool | None = False
    confine_to: Path | None = None


PathKind = Literal["folder", "file", "missing", "unreadable"]


@dataclass(frozen=True)
class PathState:
    """What a watched path is now: its kind, its identity (device, inode) and why it cannot be followed."""

    kind: PathKind
    ident: tuple[int, int] | None = None
    reason: str | None = None

    @property
    def available(self) -> bool:
        """True when the path can be watched and read."""
        return self.kind in ("folder", "file")


def path_state(path: Path) -> PathState:
    """The :class:`PathState` of ``path`` (follows symlinks; never raises)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return PathState("missing", reason="no such file or folder")
    except OSError as exc:
        return PathState("unreadable", reason=exc.strerror or str(exc))
    folder = stat.S_ISDIR(st.st_mode)
    if not os.access(path, os.R_OK | (os.X_OK if folder else 0)):
        return PathState("unreadable", reason="permission denied")
    return PathState("folder" if folder else "file", (st.st_dev, st.st_ino))


def _maybe_unmounted(old: PathState, new: PathState, path: Path) -> bool:
    """Whether a watched path that came back, or was replaced, may be a share's empty mount point: it
    is on another device than before, or an empty folder. Its whole ingest then prunes nothing."""
    moved = old.ident is not None and new.ident is not None and old.ident[0] != new.ident[0]
    try:
        empty = new.kind == "folder" and not any(os.scandir(path))
    except OSError:
        empty = False
    return moved or empty


def merge_reports(reports: Sequence[IngestReport]) -> IngestReport:
    """One report of several ingest runs (one per watched path of a cycle): their files in order,
    their times and counts summed, the first error."""
    merged = IngestReport()
    for report in reports:
        merged.files.extend(report.files)
        merged.elapsed_s += report.elapsed_s
        merged.embed_s += report.embed_s
        merged.pruned_documents += report.pruned_documents
        merged.recovered_documents += report.recovered_documents
        merged.error = merged.error or report.error
    return merged


@dataclass(frozen=True)
class WatchCycle:
    """One cycle: what the ingest of the changes did.

    Attributes:
        number: 1 for the first cycle (every watched path whole), then 2, 3, ...
        started_at: when it started (seconds since the epoch).
        elapsed_s: its wall time in seconds.
        report: the (merged) ingest report; None when the store failed before any path was ingested.
        error: why it did not complete (a store error, an interruption), else None.
    """

    number: int
    started_at: float
    elapsed_s: float
    report: IngestReport | None
    error: str | None = None

    @property
    def outcome(self) -> str:
        """``succeeded``, ``partial`` or ``failed`` (:attr:`IngestReport.outcome`)."""
        return self.report.outcome if self.report is not None else "failed"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary: outcome, counts, documents written and deleted, and the files whose
        status is not ``unchanged`` (source, status, documents written and deleted, reason)."""
        report = self.report or IngestReport()
        data = report.to_dict()
        return {"cycle": self.number, "at": _iso(self.started_at), "outcome": self.outcome,
                "error": self.error or report.error, "counts": data["counts"],
                "documents_written": data["documents_written"], "documents_deleted": data["documents_deleted"],
                "failed_records": data["failed_records"], "elapsed_s": round(self.elapsed_s, 3),
                "files": [{"source": f.source, "status": f.status, "written_documents": f.written_documents,
                           "deleted_documents": f.deleted_documents, "reason": f.reason}
                          for f in report.files if f.status != "unchanged"]}


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class WatchStatus:
    """A snapshot of a :class:`SourceWatcher`, for whoever watches the watcher.

    Attributes:
        paths: the watched paths.
        missing: those gone or unreadable now.
        mode: ``native`` (file system notifications) or ``polling``.
        cycles: cycles run so far.
        last_cycle_at: when the latest cycle ended (seconds since the epoch), None before the first.
        last_counts: files per status in the latest cycle.
        last_error: the latest error (a store error, a watcher failure), None when there was none
            or a later cycle succeeded.
    """

    paths: tuple[str, ...]
    missing: tuple[str, ...]
    mode: Literal["native", "polling"]
    cycles: int
    last_cycle_at: float | None
    last_counts: dict[str, int]
    last_error: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (times as ISO 8601 UTC)."""
        return {"paths": list(self.paths), "missing": list(self.missing), "mode": self.mode, "cycles": self.cycles,
                "last_cycle_at": None if self.last_cycle_at is None else _iso(self.last_cycle_at),
                "last_counts": dict(self.last_counts), "last_error": self.last_error}


@dataclass
class _Pending:
    """What the next cycle ingests: per watched path, the changed entries under it, whether to take
    it whole, and how many deletions were seen under it; when the first and latest change came."""

    targets: dict[Path, set[Path]] = field(default_factory=dict)
    whole: set[Path] = field(default_factory=set)
    deleted: dict[Path, int] = field(default_factory=dict)
    unpruned: set[Path] = field(default_factory=set)  # taken whole without prune (a new mount, an empty folder)
    first_at: float | None = None
    last_at: float | None = None

    def roots(self) -> list[Path]:
        return sorted(set(self.targets) | self.whole | set(self.deleted))

    def touch(self, now: float) -> None:
        self.first_at = now if self.first_at is None else self.first_at
        self.last_at = now

    def drop(self, root: Path) -> None:
        self.targets.pop(root, None)
        self.whole.discard(root)
        self.unpruned.discard(root)
        self.deleted.pop(root, None)
        if not self.roots():
            self.first_at = self.last_at = None


def _root_of(path: Path) -> Path:
    """The form a watched path is followed and pruned under: a folder fully resolved (so it holds the
    resolved paths the store records), a file by its own path (a symlink's own name kept)."""
    return Path(os.path.realpath(path)) if os.path.isdir(path) else own_path(path)


class SourceWatcher:
    """Follows files and folders and re-ingests what changes (see the module docstring).

    Args:
        paths: files and folders to follow (missing ones are followed once they appear).
        store: the store to ingest into (kept open; re-read before each cycle when another
            process wrote to it).
        options: debounce, polling, prune and retry settings.
        root: the folder sources are named relative to (fixed for the watcher's life).
        on_cycle: called with each :class:`WatchCycle` once it ends (in the watcher's thread).
        stop_event: setting it stops the watcher, as :meth:`stop` does (default: an event of its own).
    """

    def __init__(self, paths: Sequence[Path], store: ChunkStore, options: WatchOptions | None = None, *,
                 root: Path, on_cycle: Callable[[WatchCycle], None] | None = None,
                 stop_event: threading.Event | None = None) -> None:
        self.paths = list(dict.fromkeys(_root_of(Path(p)) for p in paths))
        self.store = store
        self.options = options or WatchOptions()
        self.root = Path(root)
        self.on_cycle = on_cycle
        self._excluded = Path(os.path.realpath(store.data_dir))
        self._polling = self.options.poll
        self._stop_event = stop_event or threading.Event()
        self._signum: int | None = None
        self._interrupted: int | None = None
        self._lock = threading.Lock()  # guards what status() reads
        self._states: dict[Path, PathState] = {}
        self._pending = _Pending()
        self._retry_at = 0.0
        self._cycles = 0
        self._last: WatchCycle | None = None
        self._last_error: str | None = None
        self._lock_waits = 0
        self._restarts = 0  # watchers started so far

    # -- public ---------------------------------------------------------------------------------
    def run(self) -> int | None:
        """Follow the paths until :meth:`stop`. Blocks; run it on a thread of its own to do more.

        Returns:
            The number of the signal that stopped a cycle half-way (its report, passed to
            ``on_cycle``, says what was stored), or None when it stopped between cycles.
        """
        log.info("watching %s (%s%s; debounce %.1f s)", ", ".join(map(str, self.paths)),
                 "polling" if self._polling else "native notifications", ", prune" if self.options.prune else "",
                 self.options.debounce_s)
        self._check_paths()
        while not self._stop_event.is_set() and self._interrupted is None:
            roots = [p for p, s in self._states.items() if s.available]
            if roots:
                self._follow(roots)
            else:  # nothing to watch now: look for the paths again, and run a retry when due
                self._run_due()
                self._stop_event.wait(self.options.check_every_s)
                self._check_paths()
        log.info("stopped watching %s", ", ".join(map(str, self.paths)))
        return self._interrupted

    def stop(self, signum: int | None = None) -> None:
        """Stop following: between cycles at once, during one at its next progress point.

        Args:
            signum: the signal that asked for it (names the interruption of a cycle; default SIGTERM).
        """
        if self._stop_event.is_set():
            if signum is not None:
                log.warning("%s received again: already stopping", signal.Signals(signum).name)
            return
        self._signum = signum
        self._stop_event.set()

    def status(self) -> WatchStatus:
        """The watcher's :class:`WatchStatus` now (safe from any thread)."""
        with self._lock:
            last = self._last
            return WatchStatus(tuple(map(str, self.paths)),
                               tuple(str(p) for p, s in self._states.items() if not s.available),
                               "polling" if self._polling else "native", self._cycles,
                               None if last is None else last.started_at + last.elapsed_s,
                               dict(last.report.counts) if last is not None and last.report is not None else {},
                               self._last_error)

    # -- the watched paths ----------------------------------------------------------------------
    def _check_paths(self) -> dict[Path, PathState]:
        """Look at every watched path: log what became unavailable or came back, queue a whole
        ingest of each that is new, back or replaced; returns the states."""
        now = time.monotonic()
        for path in self.paths:
            new = path_state(path)
            old = self._states.get(path)
            if old == new:
                continue
            if not new.available:
                if old is None or old.available:
                    log.warning("watch: %s %s (%s): its documents are kept; following the other paths, and this "
                                "one again when it is back", path, "is gone" if new.kind == "missing" else
                                "cannot be read", new.reason)
            elif old is None:
                self._queue_whole(path, now - self.options.max_delay_s)  # the first pass: at once
            else:
                log.info("watch: %s %s: ingesting it", path, "is back" if not old.available else "was replaced")
                self._queue_whole(path, now)
                if self.options.prune and _maybe_unmounted(old, new, path):
                    log.warning("watch: %s is now %s: its documents are kept (a share unmounted is not a "
                                "deletion); prune resumes with the next change under it", path,
                                "an empty folder" if new.kind == "folder" else "on another device")
                    self._pending.unpruned.add(path)
            with self._lock:
                self._states[path] = new
        return dict(self._states)

    def _queue_whole(self, path: Path, at: float) -> None:
        self._pending.whole.add(path)
        self._pending.touch(at)

    # -- following ------------------------------------------------------------------------------
    def _follow(self, roots: list[Path]) -> None:
        """Watch ``roots`` until one of the watched paths changes state, the watcher fails, or a stop;
        runs the cycles that come due meanwhile. A watcher started again (paths changed state, the
        native one failed) first queues a whole ingest of every path: changes meanwhile are not lost."""
        started = dict(self._states)
        if self._restarts:
            for root in roots:
                self._queue_whole(root, time.monotonic())
        self._restarts += 1
        changes_seen = self._changes(roots)
        running = False  # the first batch (or timeout) came: the watcher started
        try:
            while not self._stop_event.is_set() and self._interrupted is None:
                try:
                    changes = next(changes_seen)
                except StopIteration:  # stopped
                    return
                except (FileNotFoundError, PermissionError):  # a path went between the check and the start
                    self._stop_event.wait(self.options.check_every_s)
                    self._check_paths()
                    return
                except (OSError, RuntimeError) as exc:
                    self._watcher_failed(exc, running)
                    return
                running = True
                self._note(changes)
                if self._check_paths() != started:
                    return  # start again on the paths there now
                self._run_due()
        finally:
            changes_seen.close()

    def _changes(self, roots: list[Path]) -> Generator[set[tuple[watchfiles.Change, str]], None, None]:
        """The batches of changes under ``roots``, an empty one at least every ``check_every_s``:
        :func:`watchfiles.watch` (native notifications), or :func:`poll_changes` when polling."""
        tick_s = self.options.check_every_s
        if self._polling:
            return poll_changes(roots, interval_s=self.options.poll_interval_s, tick_s=tick_s,
                                stop_event=self._stop_event, exclude=self._excluded)
        return watchfiles.watch(*roots, watch_filter=None, debounce=int(self.options.debounce_s * 1000), step=50,
                                rust_timeout=int(tick_s * 1000), yield_on_timeout=True, stop_event=self._stop_event,
                                raise_interrupt=False, force_polling=False, ignore_permission_denied=True)

    def _watcher_failed(self, exc: Exception, running: bool) -> None:
        """The watcher failed: one that ran is started again; native notifications that cannot start
        (watchfiles raises ``OSError`` at the inotify watch limit and its internal ``RuntimeError`` when
        no inotify instance can be created) are replaced by polling."""
        if running or self._polling:
            self._set_error(f"the file watcher failed: {exc}")
            log.warning("watch: the file watcher failed (%s); starting it again", exc)
            self._stop_event.wait(self.options.check_every_s)
            return
        log.warning("watch: native file notifications cannot start (%s); polling every %.1f s instead "
                    "(raise fs.inotify.max_user_watches / max_user_instances to avoid it)", exc,
                    self.options.poll_interval_s)
        with self._lock:
            self._polling = True

    def _note(self, changes: set[tuple[watchfiles.Change, str]]) -> None:
        """Add a batch of changes to the pending cycle."""
        now = time.monotonic()
        for change, raw in changes:
            path = Path(raw)
            root = self._watched_root(path)
            if root is None or path == root:  # a watched path itself: _check_paths follows it
                if root is not None and change != watchfiles.Change.deleted and os.path.isfile(path):
                    self._pending.targets.setdefault(root, set()).add(path)
                    self._pending.touch(now)
                continue
            if change == watchfiles.Change.deleted or not os.path.lexists(path):
                self._pending.deleted[root] = self._pending.deleted.get(root, 0) + 1
            elif os.path.isdir(path) and not os.path.islink(path):
                if change != watchfiles.Change.added:
                    continue  # its entries have events of their own
                self._pending.targets.setdefault(root, set()).add(path)  # a new folder: walk it
            else:
                self._pending.targets.setdefault(root, set()).add(path)
            self._pending.touch(now)

    def _watched_root(self, path: Path) -> Path | None:
        """The watched path ``path`` lies under (None: ignored, as hidden or in the store's data dir)."""
        if path.is_relative_to(self._excluded) or own_path(path).is_relative_to(self._excluded):
            return None
        for root in self.paths:
            if path == root:
                return root
            if path.is_relative_to(root):
                return None if any(part.startswith(".") for part in path.relative_to(root).parts) else root
        return None

    # -- cycles ---------------------------------------------------------------------------------
    def _run_due(self) -> None:
        """Run a cycle if one is due: changes quiet for ``debounce_s`` (or pending ``max_delay_s``),
        and no retry wait running."""
        pending, now = self._pending, time.monotonic()
        if pending.last_at is None or pending.first_at is None or now < self._retry_at:
            return
        if now - pending.last_at >= self.options.debounce_s or now - pending.first_at >= self.options.max_delay_s:
            self._cycle()

    def _cycle(self) -> None:
        """Ingest what is pending, one run per watched path with work (see the module docstring)."""
        started, clock = time.time(), time.perf_counter()
        reports: list[IngestReport] = []
        error: str | None = None
        try:
            self._refresh()
            for root in self._pending.roots():
                report = self._ingest_root(root)
                if report is not None:
                    reports.append(report)
                self._pending.drop(root)
        except StoreLockedError as exc:
            self._lock_waits += 1
            (log.info if self._lock_waits == 1 else log.debug)("watch: %s; trying again in %.0f s", exc,
                                                                 self.options.lock_retry_s)
            self._retry_at = time.monotonic() + self.options.lock_retry_s
        except StoreError as exc:
            error = str(exc)
            stopped = getattr(exc, "report", None)  # the files done before the store failed
            reports.extend([stopped] if isinstance(stopped, IngestReport) else [])
            log.error("watch: the store failed (%s); trying again in %.0f s", exc, self.options.error_retry_s)
            self._retry_at = time.monotonic() + self.options.error_retry_s
        except IngestInterrupted as exc:
            self._interrupted = exc.signum
            error = str(exc.report.error if exc.report is not None else exc)
            reports.extend([exc.report] if exc.report is not None else [])
        except Exception as exc:  # a bug must not end the watcher: say it, forget these changes
            log.exception("watch: the cycle failed")
            error = f"unexpected {type(exc).__name__}: {exc}"
            self._pending = _Pending()
        else:
            self._lock_waits = 0
        if reports or error:
            self._finish(WatchCycle(self._cycles + 1, started, time.perf_counter() - clock,
                                    merge_reports(reports) if reports else None, error))

    def _refresh(self) -> None:
        """Read the dense index anew when another process wrote to the store since.

        Raises:
            StoreError: the store does not answer.
        """
        try:
            self.store.refresh()
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(f"store unreachable: {type(exc).__name__}: {exc}") from exc

    def _ingest_root(self, root: Path) -> IngestReport | None:
        """Ingest the pending changes under one watched path; None when there is nothing to run
        (the path is unavailable now, or only deletions were seen and ``prune`` is off)."""
        pending, prune = self._pending, self.options.prune
        if not self._states.get(root, PathState("missing")).available:
            return None  # ingested whole when it is back
        targets = [root] if root in pending.whole else sorted(p for p in pending.targets.get(root, ())
                                                              if os.path.lexists(p))
        deleted = pending.deleted.get(root, 0)
        if deleted and not prune:
            log.info("watch: %d deletion(s) under %s: their documents are kept (prune is off)", deleted, root)
        if not targets and not (deleted and prune):
            return None
        prune = prune and root not in pending.unpruned
        return ingest_paths(targets, self.store, prune=prune, progress=self.options.progress,
                            on_progress=self._check_stop, root=self.root,
                            options=IngestOptions(prune_under=root if prune else None,
                                                  confine_to=self.options.confine_to))

    def _check_stop(self, progress: IngestProgress) -> None:
        """``on_progress`` of a cycle's ingest: a stop asked for ends the run here (the pipeline keeps
        what was written and reports what was not)."""
        if self._stop_event.is_set():
            raise IngestInterrupted(self._signum or signal.SIGTERM)

    def _finish(self, cycle: WatchCycle) -> None:
        """Record ``cycle``, log its one-line summary and pass it to ``on_cycle``."""
        error = cycle.error or (cycle.report.error if cycle.report is not None else None)
        with self._lock:
            self._cycles, self._last = cycle.number, cycle
            self._last_error = error
        report = cycle.report or IngestReport()
        counts = {k: v for k, v in report.counts.items() if v}
        log.info("watch cycle %d: %s, files %s, %d document(s) written, %d deleted, in %.1f s%s", cycle.number,
                 cycle.outcome, counts or "none", report.documents_written, report.documents_deleted,
                 cycle.elapsed_s, f" ({error})" if error else "")
        if self.on_cycle is not None:
            try:
                self.on_cycle(cycle)
            except Exception:
                log.exception("watch: on_cycle failed")

    def _set_error(self, error: str) -> None:
        with self._lock:
            self._last_error = error


#: A file's state as the poller compares it: modification time (ns), size, inode.
FileStamp = tuple[int, int, int]


def scan_paths(roots: Sequence[Path], exclude: Path | None = None) -> dict[str, FileStamp]:
    """Every file and folder under ``roots`` (the roots included) with its :data:`FileStamp`, walked as
    the ingest walks folders: hidden entries skipped, symlinked folders inside not followed, nothing
    under ``exclude``. Entries that vanish or cannot be read during the walk are left out."""
    found: dict[str, FileStamp] = {}

    def add(path: str) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return
        found[path] = (st.st_mtime_ns, st.st_size, st.st_ino)

    for root in roots:
        add(str(root))
        if not os.path.isdir(root):
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")
                           and not (exclude is not None and Path(dirpath, d).is_relative_to(exclude))]
            for name in dirnames + [f for f in filenames if not f.startswith(".")]:
                add(os.path.join(dirpath, name))
    return found


def diff_scans(before: dict[str, FileStamp], after: dict[str, FileStamp]) -> set[tuple[watchfiles.Change, str]]:
    """The changes from one :func:`scan_paths` to the next, as :func:`watchfiles.watch` reports them."""
    changes = {(watchfiles.Change.deleted, p) for p in before.keys() - after.keys()}
    changes |= {(watchfiles.Change.added, p) for p in after.keys() - before.keys()}
    changes |= {(watchfiles.Change.modified, p) for p in after.keys() & before.keys() if after[p] != before[p]}
    return changes


def poll_changes(roots: Sequence[Path], *, interval_s: float, tick_s: float, stop_event: threading.Event,
                 exclude: Path | None = None) -> Generator[set[tuple[watchfiles.Change, str]], None, None]:
    """Changes under ``roots`` found by scanning them every ``interval_s`` seconds (:func:`scan_paths`:
    modification times to the nanosecond, sizes and inodes, so two writes within one second are two
    changes); an empty set every ``tick_s`` seconds in between. Ends when ``stop_event`` is set.

    watchfiles' own poller (notify's) compares modification times in whole seconds and misses a
    write made in the same second as the one before it, which an appended logbook often is.
    """
    before = scan_paths(roots, exclude)
    next_scan = time.monotonic() + interval_s
    while not stop_event.wait(max(0.0, min(tick_s, next_scan - time.monotonic()))):
        if time.monotonic() < next_scan:
            yield set()
            continue
        after = scan_paths(roots, exclude)
        next_scan = time.monotonic() + interval_s
        changes, before = diff_scans(before, after), after
        yield changes


@contextlib.contextmanager
def signals_stop(watcher: SourceWatcher) -> Iterator[None]:
    """While active, SIGINT and SIGTERM stop ``watcher`` (:meth:`SourceWatcher.stop` with the signal's
    number) instead of raising; the previous handlers are restored on exit. Off the main thread it
    does nothing (Python delivers signals to the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        watcher.stop(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


__all__ = ["DEFAULT_DEBOUNCE_S", "DEFAULT_POLL_INTERVAL_S", "FileStamp", "PathState", "SourceWatcher", "WatchCycle",
           "WatchOptions", "WatchStatus", "diff_scans", "merge_reports", "path_state", "poll_changes", "scan_paths",
           "signals_stop"]
