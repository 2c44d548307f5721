"""Bulk ingest: files -> documents -> chunks -> stores, idempotent and resumable.

For every file: read the bytes; if its SHA-256 and the settings match the fingerprint of
its last complete ingest, it is ``unchanged`` without parsing. Otherwise it is decoded and
parsed; each document whose content hash (and index signature) matches the manifest is
skipped, the others are chunked and queued. Queued documents are written in batches of
about ``batch_chunks`` chunks through :meth:`ChunkStore.apply` (crash-safe protocol).

Deletion rules:
- a document whose entry vanished from a file that still exists is deleted only with
  ``prune=True`` (otherwise it is kept and counted in ``kept_vanished``), so a partial export
  never wipes history by accident;
- with ``prune=True``, documents whose source file no longer exists are deleted, and so are
  the documents of a file that became empty;
- documents recorded for the same absolute file under another relative source (the corpus
  was ingested with a different root) are superseded and always deleted.
A file that fails to load never changes what is stored for it. A file with some failed
records (see :mod:`ingestion.loaders.base`) stores its good records and keeps every stored
document it no longer yields, even with ``prune=True`` (the bad record may be one of them).

Only regular files are read: a named pipe, socket, device or broken symlink is reported
``skipped`` and never opened (``os.stat`` first; the file is then opened non-blocking and
checked again with ``fstat``). A symlink is ingested and reported under its own path; one
whose target is also ingested in the same run is ``skipped`` as the same file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingestion.embedding import Embedder
from ingestion.errors import LoaderError, StoreError, StoreLockedError
from ingestion.loaders import BINARY_EXTENSIONS, LoaderConfig, load_bytes
from ingestion.report import (EXIT_CODES_HELP, EXIT_FAILED, EXIT_LOCKED, EXIT_OK, EXIT_STORE, EXIT_USAGE, FileReport,
                              IngestReport)
from ingestion.store import ChunkStore, DocumentWrite, StoreSettings, WriteBatch, open_store
from ingestion.stores.manifest import FileRecord

log = logging.getLogger(__name__)

#: Chunks per write batch: large enough for efficient embedding, small enough to lose little on a kill.
DEFAULT_BATCH_CHUNKS = 256


@dataclass(frozen=True)
class IngestProgress:
    """Progress snapshot passed to ``on_progress`` after each file and each written batch."""

    files_done: int
    files_total: int
    current: str | None
    documents_written: int
    chunks_written: int
    elapsed_s: float


def own_path(path: Path) -> Path:
    """The absolute path of ``path`` itself: folders above it resolved, a symlink's own name kept."""
    path = Path(path)
    return Path(os.path.realpath(path.parent)) / path.name


def discover_files(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """Expand ``paths`` into directory entries to ingest (folders walked recursively, sorted,
    hidden entries skipped, symlinked folders inside them not followed).

    Nothing is opened: named pipes, sockets, devices and broken symlinks are listed too (the
    pipeline reports them ``skipped``).

    Returns:
        (files, missing): entries in a stable order (each once, by its own absolute path),
        and paths that do not exist.
    """
    files: list[Path] = []
    missing: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            candidates = []
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                candidates.extend(Path(dirpath) / f for f in sorted(filenames) if not f.startswith("."))
        elif os.path.lexists(path):  # a file, or something that is not one (reported, never opened)
            candidates = [path]
        else:
            missing.append(path)
            continue
        for candidate in candidates:
            key = own_path(candidate)
            if key not in seen:
                seen.add(key)
                files.append(candidate)
    return files, missing


def common_root(paths: Sequence[Path]) -> Path:
    """The deepest directory containing every path (a single directory is its own root, a file's root is its parent)."""
    if not paths:
        return Path.cwd()
    dirs = [Path(p).resolve() if Path(p).is_dir() else own_path(Path(p)).parent for p in paths]
    return Path(os.path.commonpath([str(d) for d in dirs]))


def source_name(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` with forward slashes (the absolute path if outside ``root``).

    A symlink is named by its own path, not its target's.
    """
    own = own_path(path)
    try:
        return own.relative_to(root.resolve()).as_posix()
    except ValueError:
        return own.as_posix()


_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


def _not_regular(mode: int) -> str | None:
    """Why a file with this ``st_mode`` is not read (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"{kind}, not a regular file: never opened"


def read_regular_file(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file (a symlink to one is fine), never opening anything else.

    Raises:
        NotRegularFileError: a named pipe, socket, device, folder or broken symlink (message: what it is).
        OSError: the file cannot be read.
    """
    try:
        st = os.stat(path)  # follows symlinks, opens nothing
    except FileNotFoundError:
        if os.path.islink(path):
            raise NotRegularFileError(f"broken symlink to {os.readlink(path)!r}: never opened") from None
        raise
    reason = _not_regular(st.st_mode)
    if reason:
        raise NotRegularFileError(reason)
    # O_NONBLOCK: should the path have been swapped for a FIFO since stat(), open() does not hang on it
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        reason = _not_regular(os.fstat(fd).st_mode)
        if reason:
            raise NotRegularFileError(reason)
        return handle.read()


class NotRegularFileError(OSError):
    """The path is not a regular file (named pipe, socket, device, folder, broken symlink); it was not read."""


class _Run:
    """State of one :func:`ingest_paths` call."""

    def __init__(self, store: ChunkStore, report: IngestReport, prune: bool, config: LoaderConfig,
                 batch_chunks: int, notify: Callable[[str | None], None], *, prune_under: Path | None = None,
                 supersede_under: Path | None = None) -> None:
        self.store = store
        self.prune_under = prune_under
        self.supersede_under = Path(os.path.abspath(supersede_under)) if supersede_under is not None else None
        #: realpath of each file read this run -> its source, so a symlink to it is reported as the same file
        self.targets: dict[str, str] = {}
        self.report = report
        self.prune = prune
        self.config = config
        self.batch_chunks = batch_chunks
        self.notify = notify
        self.batch = WriteBatch()
        self.settings_sig = hashlib.sha256(f"{store.index_signature}|{config.signature()}".encode()).hexdigest()[:16]
        self.docs_written = 0
        self.chunks_written = 0

    def flush(self) -> None:
        if self.batch.is_empty():
            return
        result = self.store.apply(self.batch)
        self.report.embed_s += result.embed_s
        self.docs_written += result.documents_written
        self.chunks_written += result.chunks_written
        log.debug("batch written: %d documents, %d chunks, %d deleted", result.documents_written,
                  result.chunks_written, result.documents_deleted)
        self.batch = WriteBatch()
        self.notify(None)

    def process(self, path: Path, entry: FileReport) -> None:
        source_abs = str(own_path(path))
        target = os.path.realpath(path)
        if self.targets.get(target, entry.source) != entry.source:
            entry.status, entry.reason = "skipped", f"the same file as {self.targets[target]} (symlink)"
            return
        if path.suffix.lower() in BINARY_EXTENSIONS:  # reject without reading (archives can be huge)
            entry.status, entry.reason = "failed", f"binary file type {path.suffix.lower()!r} is not ingested"
            return
        try:
            data = read_regular_file(path)
        except NotRegularFileError as exc:
            entry.status, entry.reason = "skipped", str(exc)
            return
        except OSError as exc:
            entry.status, entry.reason = "failed", f"cannot read: {exc.strerror or exc}"
            return
        self.targets[target] = entry.source
        digest = hashlib.sha256(data).hexdigest()
        known = self.store.manifest.get_file(source_abs)
        if known and known.sha256 == digest and known.settings_sig == self.settings_sig and known.source == entry.source:
            entry.status, entry.format = "unchanged", known.format
            entry.documents, entry.chunks = known.n_documents, known.n_chunks
            return
        try:
            result = load_bytes(data, entry.source, name=path.name, config=self.config)
        except LoaderError as exc:
            entry.status, entry.reason = "failed", str(exc)
            return
        except Exception as exc:  # a loader bug must not stop the run
            log.exception("unexpected error loading %s", path)
            entry.status, entry.reason = "failed", f"unexpected {type(exc).__name__}: {exc}"
            return
        entry.format, entry.encoding, entry.warnings = result.format, result.encoding, list(result.warnings)
        failures = result.failures
        entry.failed_records = [{"where": f.where, "reason": f.reason} for f in failures]
        if failures and not result.documents:
            entry.status = "failed"
            entry.reason = (f"no record could be stored ({len(failures)} failed; first: {failures[0]}); "
                            "stored documents kept")
            return
        if failures:
            entry.warnings.append(f"{len(failures)} record(s) failed and were not stored (see failed_records); "
                                  "stored documents no longer in this file are kept")
        existing = self.store.manifest.for_source(entry.source, source_abs)
        # Another file that still exists owns this source name: refuse rather than overwrite it
        # (unless it lies in a folder whose files newer ones replace, e.g. the API's uploads).
        owners = sorted({r.source_abs for r in existing if r.source == entry.source and r.source_abs
                         and r.source_abs != source_abs and Path(r.source_abs).exists()
                         and not (self.supersede_under and Path(r.source_abs).is_relative_to(self.supersede_under))})
        if owners:
            entry.status = "failed"
            entry.reason = (f"source name {entry.source!r} is already stored from {owners[0]}; ingest both from a "
                            "common parent folder so their names differ (or delete the stored documents first)")
            return
        superseded = [r.doc_id for r in existing if r.source != entry.source]
        docs = result.documents
        if not docs:
            entry.status = "skipped-empty"
            entry.reason = "empty or whitespace-only file" if result.format == "empty" else "no documents in file"
            mine = [r.doc_id for r in existing if r.source == entry.source]
            deletes = superseded + (mine if self.prune else [])
            entry.kept_vanished = 0 if self.prune else len(mine)
            if deletes:
                self.batch.deletes.extend(deletes)
                entry.deleted_documents = len(deletes)
            return
        by_id = {r.doc_id: r for r in existing if r.source == entry.source}
        new_ids = {d.doc_id for d in docs}
        vanished = [doc_id for doc_id in by_id if doc_id not in new_ids]
        sig = self.store.index_signature
        n_chunks = 0
        for doc in docs:
            rec = by_id.get(doc.doc_id)
            if rec is not None and rec.content_hash == doc.content_hash and rec.index_sig == sig:
                n_chunks += rec.n_chunks
                if rec.source_abs != source_abs:  # same document, its file moved: record where it is now
                    self.batch.relocate.append((doc.doc_id, source_abs))
                continue
            chunks = self.store.chunk_document(doc)
            self.batch.writes.append(DocumentWrite(doc, chunks, source_abs))
            entry.written_documents += 1
            entry.written_chunks += len(chunks)
            n_chunks += len(chunks)
            if self.batch.n_chunks >= self.batch_chunks:
                self.flush()
        prune_vanished = self.prune and not failures
        deletes = superseded + (vanished if prune_vanished else [])
        entry.kept_vanished = 0 if prune_vanished else len(vanished)
        if entry.kept_vanished and not failures:
            entry.warnings.append(f"{entry.kept_vanished} stored document(s) no longer in this file were kept "
                                  "(run with --prune to delete them)")
        self.batch.deletes.extend(deletes)
        entry.deleted_documents = len(deletes)
        entry.documents, entry.chunks = len(docs), n_chunks
        entry.status = "indexed" if entry.written_documents or deletes else "unchanged"
        if not entry.kept_vanished and not failures:  # else parsed again next run (failures reported again)
            self.batch.files.append(FileRecord(source_abs, entry.source, digest, self.settings_sig, len(docs),
                                               n_chunks, result.format))
        if self.batch.n_chunks >= self.batch_chunks:
            self.flush()

    def prune_missing(self) -> None:
        self.flush()  # documents relocated or rewritten this run must not look gone
        gone = self.store.prunable_documents(under=self.prune_under)
        if gone:
            log.info("pruning %d document(s) whose source file is gone", len(gone))
            self.batch.deletes.extend(gone)
            self.report.pruned_documents = len(gone)
        scope = Path(os.path.abspath(self.prune_under)) if self.prune_under is not None else None
        self.batch.forget_files.extend(p for p in self.store.manifest.all_files() if not os.path.exists(p)
                                       and (scope is None or Path(p).is_relative_to(scope)))


class _Display:
    """Rich progress bar on a terminal, plain log lines otherwise."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.progress: Any = None
        self.task: Any = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("[bold]ingest[/bold] {task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[chunks]} chunks written"), TimeElapsedColumn(), transient=False,
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


def ingest_paths(paths: list[Path], store: ChunkStore, *, prune: bool = False, progress: bool | None = None,
                 on_progress: Callable[[IngestProgress], None] | None = None, root: Path | None = None,
                 loader_config: LoaderConfig | None = None, batch_chunks: int = DEFAULT_BATCH_CHUNKS,
                 prune_under: Path | None = None, supersede_under: Path | None = None) -> IngestReport:
    """Ingest files and directories into ``store``.

    Args:
        paths: files and/or directories (walked recursively; hidden entries skipped).
        store: the target store.
        prune: delete documents whose source file is gone, entries that vanished from a
            file, and documents of files that became empty.
        prune_under: with ``prune``, only documents whose source file lay under this folder
            are pruned for being gone (None: any document of the store).
        supersede_under: a stored document with the same source name recorded from another
            file under this folder is replaced instead of refused (the API's uploads folder,
            where a newer upload of a name replaces the older one).
        progress: rich progress bar (True), log lines (False), or auto: a bar when stderr is a TTY.
        on_progress: called with an :class:`IngestProgress` after each file and batch.
        root: sources are recorded relative to it (default: :func:`common_root` of ``paths``).
        loader_config: loader options (CSV columns, time zone, shift windows).
        batch_chunks: chunks per write batch.
    Returns:
        The :class:`IngestReport`; a missing path or bad file is a ``failed`` entry, a named
        pipe, socket or device a ``skipped`` one, not an exception.
    Raises:
        StoreLockedError: another ingest runs on the same store (nothing was read or changed).
        StoreError: the store failed mid-run (re-run to resume); its ``report`` attribute holds
            the report so far.
    """
    started = time.perf_counter()
    report = IngestReport()
    config = loader_config or LoaderConfig()
    paths = [Path(p) for p in paths]
    root = Path(root) if root is not None else common_root([p for p in paths if p.exists()] or paths)
    use_bar = sys.stderr.isatty() if progress is None else progress
    with store.ingest_lock():
        report.recovered_documents = len(store.recover())
        files, missing = discover_files(paths)
        for path in missing:
            report.files.append(FileReport(path=str(path), source=source_name(path, root), status="failed",
                                           reason="no such file or directory"))
        total = len(files)
        display = _Display(use_bar, total)
        done = 0
        state: _Run

        def notify(current: str | None) -> None:
            display.update(done, total, current, state.chunks_written)
            if on_progress is not None:
                on_progress(IngestProgress(done, total, current, state.docs_written, state.chunks_written,
                                           time.perf_counter() - started))

        state = _Run(store, report, prune, config, batch_chunks, notify, prune_under=prune_under,
                     supersede_under=supersede_under)
        # a symlink whose target is also ingested in this run is that file: name it by the file's own path
        for path in files:
            if not os.path.islink(path):
                state.targets.setdefault(os.path.realpath(path), source_name(path, root))
        try:
            for path in files:
                entry = FileReport(path=str(path), source=source_name(path, root))
                report.files.append(entry)
                notify(entry.source)
                state.process(path, entry)
                done += 1
                display.file_done(done, total, entry)
                notify(entry.source)
            if prune:
                state.prune_missing()
            state.flush()
        except StoreError as exc:
            report.error = str(exc)
            exc.report = report  # type: ignore[attr-defined]
            raise
        finally:
            display.close()
    report.elapsed_s = time.perf_counter() - started
    log.info("ingest done in %.1f s: %s; %d chunks written (%.1f chunks/s), %d documents deleted",
             report.elapsed_s, report.counts, report.chunks_written, report.chunks_per_s, report.documents_deleted)
    return report


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

    Opens the store with :func:`ingestion.store.open_store`, ingests, logs each failed file
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
        unusable or failed mid-run), ``EXIT_USAGE`` (the report file cannot be written).
    """
    report = IngestReport()
    code = EXIT_OK
    try:
        store = open_store(settings, embedder=embedder)
    except StoreError as exc:
        report.error, code = str(exc), EXIT_STORE
    else:
        try:
            report = ingest_paths([Path(p) for p in paths], store, prune=prune, progress=progress,
                                  loader_config=loader_config)
        except StoreLockedError as exc:
            report.error, code = str(exc), EXIT_LOCKED
        except StoreError as exc:
            report = getattr(exc, "report", None) or report
            report.error, code = str(exc), EXIT_STORE
        finally:
            store.close()
    if code == EXIT_OK:
        code = EXIT_OK if report.ok else EXIT_FAILED
    for entry in report.files:
        if entry.status == "failed":
            log.error("failed: %s: %s", entry.source, entry.reason)
        for failure in entry.failed_records:
            log.error("record failed: %s %s: %s", entry.source, failure["where"], failure["reason"])
    if report_file is not None:
        try:
            write_report(report, Path(report_file))
        except OSError as exc:
            log.error("cannot write the report to %s: %s", report_file, exc.strerror or exc)
            if code == EXIT_OK or code == EXIT_FAILED:
                code = EXIT_USAGE
    return IngestOutcome(report, code)


__all__ = ["IngestProgress", "IngestReport", "IngestOutcome", "FileReport", "ingest_paths", "run_ingest",
           "write_report", "discover_files", "common_root", "source_name", "own_path", "read_regular_file",
           "NotRegularFileError", "StoreError", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_LOCKED", "EXIT_STORE",
           "EXIT_CODES_HELP"]
