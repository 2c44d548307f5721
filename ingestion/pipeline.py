"""Bulk ingest: files -> documents -> chunks -> stores, idempotent and resumable.

Phases, each a function of :class:`_Run`: **read** a file (:meth:`_Run.read`), **load** it into
documents (:meth:`_Run.load`), **chunk** the changed ones into the write batch
(:meth:`_Run.chunk`), **settle** what the file's entry stores and deletes (:meth:`_Run.settle`);
full batches are **embedded and written** (:meth:`_Run.flush`). The **report** is the
:class:`~ingestion.report.IngestReport` each phase fills in; **progress** (records of the current
file, bytes, ETA) goes to :class:`~ingestion.progress.ProgressTracker`. A SIGINT or SIGTERM stops
the run between two statements: what was written stays stored and the report says what was not
(:mod:`ingestion.interrupt`).

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
``skipped`` and never opened (see :mod:`ingestion.files`). A symlink is ingested and reported
under its own path; one whose target is also ingested in the same run is ``skipped`` as the
same file.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingestion.documents import Document
from ingestion.errors import LoaderError, StoreError
from ingestion.files import NotRegularFileError, common_root, discover_files, own_path, read_regular_file, source_name
from ingestion.interrupt import IngestInterrupted, mark_stopped, stop_on_signals
from ingestion.loaders import BINARY_EXTENSIONS, LoaderConfig, LoadResult, load_bytes
from ingestion.progress import IngestProgress, ProgressDisplay, ProgressTracker
from ingestion.report import (
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_LOCKED,
    EXIT_OK,
    EXIT_STORE,
    EXIT_USAGE,
    FileReport,
    IngestReport,
)
from ingestion.stores.chunk_store import ChunkStore, DocumentWrite, WriteBatch
from ingestion.stores.ingest_lock import IngestLock
from ingestion.stores.manifest import DocumentRecord, FileRecord

log = logging.getLogger(__name__)

#: Chunks per write batch: large enough for efficient embedding, small enough to lose little on a kill.
DEFAULT_BATCH_CHUNKS = 256


@dataclass(frozen=True)
class IngestOptions:
    """How a run loads files and which stored documents it may replace or prune.

    Attributes:
        loader_config: loader options (CSV columns, time zone, shift windows).
        batch_chunks: chunks per write batch.
        prune_under: with ``prune``, only documents whose source file lay under this folder
            are pruned for being gone (None: any document of the store).
        supersede_under: a stored document of the same source name from another file under this
            folder is replaced, not refused (the API's uploads: a newer upload replaces the older).
        may_write: a file with a document (new, or stored and replaced) it refuses is ``failed``.
        confine_to: a file whose real path (symlinks followed) lies outside this folder is
            ``skipped``, never read (a server-side path followed under the ingest root).
    """

    loader_config: LoaderConfig = field(default_factory=LoaderConfig)
    batch_chunks: int = DEFAULT_BATCH_CHUNKS
    prune_under: Path | None = None
    supersede_under: Path | None = None
    may_write: Callable[[Mapping[str, Any]], bool] | None = None
    confine_to: Path | None = None


@contextlib.contextmanager
def ingest_run(store: ChunkStore, *, exclusive: bool) -> Iterator[tuple[IngestLock, list[str]]]:
    """The run lock for one ingest run and the doc ids recovered at its start.

    Intent rows are recovered (:meth:`ChunkStore.recover`) only by a run that found no other live:
    the rows of a live run's in-flight batch are not an interrupted write. Then the lock is shared.

    Raises:
        StoreLockedError: as :meth:`ChunkStore.ingest_lock`.
    """
    with store.ingest_lock(exclusive=exclusive) as lock:
        recovered = store.recover() if lock.alone else []
        if not exclusive:
            lock.share()
        yield lock, recovered


@dataclass(frozen=True)
class _Parsed:
    """A file read and loaded this run: its own absolute path, the SHA-256 of its bytes, its documents."""

    source_abs: str
    digest: str
    result: LoadResult


class _Run:
    """State of one :func:`ingest_paths` call: the store, the report, the open write batch."""

    def __init__(self, store: ChunkStore, report: IngestReport, tracker: ProgressTracker, lock: IngestLock, *,
                 prune: bool, options: IngestOptions) -> None:
        self.store = store
        self.may_write = options.may_write
        self.lock = lock  # the run lock: source locks while another run may write at once
        self.report = report
        self.tracker = tracker
        self.prune = prune
        self.config = options.loader_config
        self.batch_chunks = options.batch_chunks
        self.prune_under = options.prune_under
        self.confine_to = None if options.confine_to is None else Path(os.path.realpath(options.confine_to))
        supersede_under = options.supersede_under
        self.supersede_under = Path(os.path.abspath(supersede_under)) if supersede_under is not None else None
        #: realpath of each file read this run -> its source, so a symlink to it is reported as the same file
        self.targets: dict[str, str] = {}
        self.batch = WriteBatch()
        self.batch_chunk_count = 0  # chunks in self.batch (WriteBatch.n_chunks sums them all)
        self.current: FileReport | None = None  # the file being processed
        self.current_keys: list[str] = []  # its source locks' keys
        signature = f"{store.index_signature}|{self.config.signature()}"
        self.settings_sig = hashlib.sha256(signature.encode()).hexdigest()[:16]

    def process(self, path: Path, entry: FileReport) -> None:
        """Ingest one file, filling in ``entry``: read -> load -> chunk -> settle (each phase may end it)."""
        data = self.read(path, entry)
        if data is None:
            return
        source_abs, digest = str(own_path(path)), hashlib.sha256(data).hexdigest()
        self.hold_source(entry.source, source_abs)
        if not self._writable(entry, self.store.manifest.for_source(entry.source, source_abs)):
            return
        known = self.store.manifest.files.get(source_abs)
        if (known and known.sha256 == digest and known.settings_sig == self.settings_sig
                and known.source == entry.source):
            entry.status, entry.format = "unchanged", known.format
            entry.documents, entry.chunks = known.n_documents, known.n_chunks
            return
        result = self.load(path, entry, data)
        if result is None:
            return
        if not self._writable(entry, result.documents):
            return
        self.tracker.start_file(len(result.documents))
        parsed = _Parsed(source_abs, digest, result)
        existing = self.store.manifest.for_source(entry.source, source_abs)
        if self._owned_elsewhere(entry, existing, source_abs):
            return
        superseded = [r.doc_id for r in existing if r.source != entry.source]
        mine = {r.doc_id: r for r in existing if r.source == entry.source}
        if not result.documents:
            self._drop_empty(entry, result, list(mine), superseded)
            return
        n_chunks = self.chunk(entry, parsed, mine)
        self.settle(entry, parsed, mine, superseded, n_chunks)

    def _writable(self, entry: FileReport, documents: Sequence[DocumentRecord | Document]) -> bool:
        """False (``entry`` ``failed``) when ``may_write`` refuses one of ``documents`` (the file's new
        ones, or the stored ones it would replace): a scoped API key writes only what it may read."""
        if self.may_write is None:
            return True
        for doc in documents:
            meta = doc.metadata if isinstance(doc, Document) else {"doc_type": doc.doc_type, "source": doc.source}
            if not self.may_write(meta):
                entry.status = "failed"
                entry.reason = ("this API key may not write it: the file holds (or would replace) documents outside "
                                "the key's read scope")
                return False
        return True

    def hold_source(self, source: str, source_abs: str) -> None:
        """Hold the file's source locks until its last batch is written (a parallel run given the same
        file or source name waits); before waiting, write the open batch and release the others."""
        self.current_keys = [source, source_abs]
        self.lock.hold_sources(self.current_keys, before_wait=self._flush_and_release)

    def _flush_and_release(self) -> None:
        self.flush()
        self.lock.release_sources()

    def read(self, path: Path, entry: FileReport) -> bytes | None:
        """The file's bytes, or None with ``entry`` ``skipped`` (same file, not a regular one) or ``failed``."""
        target = os.path.realpath(path)
        if self.confine_to is not None and not Path(target).is_relative_to(self.confine_to):
            entry.status, entry.reason = "skipped", f"a symlink that leads outside {self.confine_to}"
            return None
        if self.targets.get(target, entry.source) != entry.source:
            entry.status, entry.reason = "skipped", f"the same file as {self.targets[target]} (symlink)"
            return None
        if path.suffix.lower() in BINARY_EXTENSIONS:  # reject without reading (archives can be huge)
            entry.status, entry.reason = "failed", f"binary file type {path.suffix.lower()!r} is not ingested"
            return None
        try:
            data = read_regular_file(path)
        except NotRegularFileError as exc:
            entry.status, entry.reason = "skipped", str(exc)
            return None
        except OSError as exc:
            entry.status, entry.reason = "failed", f"cannot read: {exc.strerror or exc}"
            return None
        self.targets[target] = entry.source
        return data

    def load(self, path: Path, entry: FileReport, data: bytes) -> LoadResult | None:
        """The file's documents (format, warnings and failed records noted in ``entry``), or None
        with ``entry`` ``failed`` (the file cannot be parsed, or none of its records could)."""
        try:
            result = load_bytes(data, entry.source, name=path.name, config=self.config)
        except LoaderError as exc:
            entry.status, entry.reason = "failed", str(exc)
            return None
        except Exception as exc:  # a loader bug must not stop the run
            log.exception("unexpected error loading %s", path)
            entry.status, entry.reason = "failed", f"unexpected {type(exc).__name__}: {exc}"
            return None
        entry.format, entry.encoding, entry.warnings = result.format, result.encoding, list(result.warnings)
        failures = result.failures
        entry.failed_records = [{"where": f.where, "reason": f.reason} for f in failures]
        if failures and not result.documents:
            entry.status = "failed"
            entry.reason = (f"no record could be stored ({len(failures)} failed; first: {failures[0]}); "
                            "stored documents kept")
            return None
        if failures:
            entry.warnings.append(f"{len(failures)} record(s) failed and were not stored (see failed_records); "
                                  "stored documents no longer in this file are kept")
        return result

    def _owned_elsewhere(self, entry: FileReport, existing: list[DocumentRecord], source_abs: str) -> bool:
        """True (``entry`` ``failed``) when another file that still exists owns this source name.

        Refused rather than overwritten, unless that file lies in a folder whose files newer
        ones replace (``supersede_under``, e.g. the API's uploads).
        """
        owners = sorted({r.source_abs for r in existing if r.source == entry.source and r.source_abs
                         and r.source_abs != source_abs and Path(r.source_abs).exists()
                         and not (self.supersede_under and Path(r.source_abs).is_relative_to(self.supersede_under))})
        if not owners:
            return False
        entry.status = "failed"
        entry.reason = (f"source name {entry.source!r} is already stored from {owners[0]}; ingest both from a "
                        "common parent folder so their names differ (or delete the stored documents first)")
        return True

    def _drop_empty(self, entry: FileReport, result: LoadResult, mine: list[str], superseded: list[str]) -> None:
        """A file without documents: ``skipped-empty``; its stored documents go with ``prune`` only."""
        entry.status = "skipped-empty"
        entry.reason = "empty or whitespace-only file" if result.format == "empty" else "no documents in file"
        deletes = superseded + (mine if self.prune else [])
        entry.kept_vanished = 0 if self.prune else len(mine)
        if deletes:
            self.batch.deletes.extend(deletes)
            entry.deleted_documents = len(deletes)

    def chunk(self, entry: FileReport, parsed: _Parsed, mine: dict[str, DocumentRecord]) -> int:
        """Queue the chunks of each document that changed (flushing full batches); returns the file's chunk count.

        A document whose content hash and index signature match the manifest is not chunked
        again (only its new location is recorded when its file moved).
        """
        sig = self.store.index_signature
        n_chunks = 0
        for doc in parsed.result.documents:
            rec = mine.get(doc.doc_id)
            if rec is not None and rec.content_hash == doc.content_hash and rec.index_sig == sig:
                n_chunks += rec.n_chunks
                if rec.source_abs != parsed.source_abs:  # same document, its file moved: record where it is now
                    self.batch.relocate.append((doc.doc_id, parsed.source_abs))
                self.tracker.record_done(entry.source)
                continue
            chunks = self.store.chunker.chunk(doc)
            self.batch.writes.append(DocumentWrite(doc, chunks, parsed.source_abs))
            self.batch_chunk_count += len(chunks)
            entry.written_documents += 1
            entry.written_chunks += len(chunks)
            n_chunks += len(chunks)
            self.tracker.record_done(entry.source)
            if self.batch_chunk_count >= self.batch_chunks:
                self.flush()
        return n_chunks

    def settle(self, entry: FileReport, parsed: _Parsed, mine: dict[str, DocumentRecord], superseded: list[str],
               n_chunks: int) -> None:
        """Queue the file's deletions and fingerprint, and give ``entry`` its final status and counts.

        Documents that vanished from the file are deleted with ``prune`` when no record failed;
        the fingerprint is recorded only when nothing was kept or failed (else parsed again next run).
        """
        result = parsed.result
        failures = result.failures
        new_ids = {d.doc_id for d in result.documents}
        vanished = [doc_id for doc_id in mine if doc_id not in new_ids]
        prune_vanished = self.prune and not failures
        deletes = superseded + (vanished if prune_vanished else [])
        entry.kept_vanished = 0 if prune_vanished else len(vanished)
        if entry.kept_vanished and not failures:
            entry.warnings.append(f"{entry.kept_vanished} stored document(s) no longer in this file were kept "
                                  "(run with --prune to delete them)")
        self.batch.deletes.extend(deletes)
        entry.deleted_documents = len(deletes)
        entry.documents, entry.chunks = len(result.documents), n_chunks
        entry.status = "indexed" if entry.written_documents or deletes else "unchanged"
        if not entry.kept_vanished and not failures:
            self.batch.files.append(FileRecord(parsed.source_abs, entry.source, parsed.digest, self.settings_sig,
                                               len(result.documents), n_chunks, result.format))
        if self.batch_chunk_count >= self.batch_chunks:
            self.flush()

    def flush(self) -> None:
        """Embed and write the open batch (crash-safe, see :meth:`ChunkStore.apply`), then start a new one."""
        if self.batch.is_empty():
            return
        try:
            result = self.store.apply(self.batch)
        except StoreError as exc:
            self._fail_batch(exc)
            raise
        self.report.embed_s += result.embed_s
        log.debug("batch written: %d documents, %d chunks, %d deleted", result.documents_written,
                  result.chunks_written, result.documents_deleted)
        self.batch, self.batch_chunk_count = WriteBatch(), 0
        self.tracker.wrote(result.documents_written, result.chunks_written)
        self.lock.release_sources(keep=self.current_keys)  # the files written are settled

    def _fail_batch(self, exc: StoreError) -> None:
        """The open batch could not be stored (disk full, read-only, permissions): every file with
        something in it is ``failed`` with the store's reason, its counts of written documents and
        chunks lose what the batch held, and no fingerprint of it was recorded (the next run parses
        it again). Earlier batches stay stored: each batch is one transaction (:meth:`ChunkStore.apply`)."""
        batch = self.batch
        writes: dict[str, list[DocumentWrite]] = {}
        for w in batch.writes:
            writes.setdefault(w.document.source, []).append(w)
        touched = set(writes) | {f.source for f in batch.files}
        doc_ids = list(batch.deletes) + [doc_id for doc_id, _ in batch.relocate]
        for entry in self.report.files:
            mine = writes.get(entry.source, [])
            entry.written_documents -= len(mine)
            entry.written_chunks -= sum(len(w.chunks) for w in mine)
            if entry.status == "failed" or not (entry.source in touched
                                                or any(d.startswith(entry.source + "#") for d in doc_ids)):
                continue
            entry.status, entry.documents, entry.chunks = "failed", 0, 0
            entry.reason = f"not stored: {exc} (documents stored before are kept; re-run to resume)"

    def prune_missing(self) -> None:
        """Queue the deletion of documents whose source file is gone (under ``prune_under``), and forget those files."""
        self.flush()  # documents relocated or rewritten this run must not look gone
        gone = self.store.manifest.prunable(under=self.prune_under)
        if gone:
            log.info("pruning %d document(s) whose source file is gone", len(gone))
            self.batch.deletes.extend(gone)
            self.report.pruned_documents = len(gone)
        scope = Path(os.path.abspath(self.prune_under)) if self.prune_under is not None else None
        self.batch.forget_files.extend(p for p in self.store.manifest.files.paths() if not os.path.exists(p)
                                       and (scope is None or Path(p).is_relative_to(scope)))


def ingest_paths(paths: list[Path], store: ChunkStore, *, prune: bool = False, progress: bool | None = None,
                 on_progress: Callable[[IngestProgress], None] | None = None, root: Path | None = None,
                 options: IngestOptions | None = None) -> IngestReport:
    """Ingest files and directories into ``store``.

    Args:
        paths: files and/or directories (walked recursively; hidden entries skipped).
        store: the target store.
        prune: delete documents whose source file is gone, entries that vanished from a
            file, and documents of files that became empty.
        progress: rich progress bar (True), log lines (False), or auto: a bar when stderr is a TTY.
        on_progress: called with an :class:`IngestProgress` after each file and batch.
        root: sources are recorded relative to it (default: :func:`common_root` of ``paths``).
        options: loader options, batch size and the replace/prune rules (default: :class:`IngestOptions`).
    Returns:
        The :class:`IngestReport`; a missing path or bad file is a ``failed`` entry, a named
        pipe, socket or device a ``skipped`` one, not an exception.
    Raises:
        StoreLockedError: another run holds the lock exclusively, or at all when this one must be alone
            (``prune``; embedded Chroma): nothing was read or changed (:mod:`ingestion.stores.ingest_lock`).
        StoreError: the store failed mid-run (re-run to resume); its ``report`` attribute holds
            the report so far.
        IngestInterrupted: a ``KeyboardInterrupt`` (SIGINT, or SIGTERM under
            :func:`~ingestion.interrupt.stop_on_signals`) stopped the run; its ``report`` says what
            was stored (the batches written) and what was not.
    """
    started = time.perf_counter()
    report = IngestReport()
    paths = [Path(p) for p in paths]
    root = Path(root) if root is not None else common_root([p for p in paths if p.exists()] or paths)
    with ingest_run(store, exclusive=prune) as (lock, recovered):
        report.recovered_documents = len(recovered)
        files = _discover(paths, root, report)
        display = ProgressDisplay(sys.stderr.isatty() if progress is None else progress, len(files))
        run = _Run(store, report, ProgressTracker(display, on_progress, files, started), lock, prune=prune,
                   options=options or IngestOptions())
        try:
            _ingest_files(run, files, root)
        except StoreError as exc:
            report.error = str(exc)
            mark_not_reached(report, files, root, f"not reached: the store failed ({exc}); re-run to resume")
            exc.report = report  # type: ignore[attr-defined]
            raise
        except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM under stop_on_signals()
            stop = _stopped(run, exc, files, root, started)
            raise stop from (None if stop is exc else exc)
        finally:
            display.close()
    report.elapsed_s = time.perf_counter() - started
    log.info("ingest done in %.1f s: %s; %d chunks written (%.1f chunks/s), %d documents deleted",
             report.elapsed_s, report.counts, report.chunks_written, report.chunks_per_s, report.documents_deleted)
    return report


def _discover(paths: list[Path], root: Path, report: IngestReport) -> list[Path]:
    """The files under ``paths``; each missing path becomes a ``failed`` entry of ``report``."""
    files, missing = discover_files(paths)
    report.files.extend(FileReport(path=str(path), source=source_name(path, root), status="failed",
                                   reason="no such file or directory") for path in missing)
    return files


def mark_not_reached(report: IngestReport, files: Sequence[Path], root: Path, reason: str) -> None:
    """Append each of ``files`` that ``report`` does not list yet as ``failed`` with ``reason``:
    a run that stops still names every file it was given."""
    reached = {entry.path for entry in report.files}
    report.files.extend(FileReport(path=str(p), source=source_name(p, root), status="failed", reason=reason)
                        for p in files if str(p) not in reached)


def _stopped(run: _Run, exc: KeyboardInterrupt, files: list[Path], root: Path, started: float) -> IngestInterrupted:
    """The :class:`IngestInterrupted` for a stop by ``exc``; its report says what was stored and what not."""
    stop = exc if isinstance(exc, IngestInterrupted) else IngestInterrupted(signal.SIGINT)
    report = run.report
    reached = {entry.path for entry in report.files}
    mark_stopped(report, run.batch, run.current, [FileReport(path=str(p), source=source_name(p, root))
                                                  for p in files if str(p) not in reached],
                 stop.signal_name, (run.tracker.docs_written, run.tracker.chunks_written))
    report.elapsed_s = time.perf_counter() - started
    stop.report = report
    return stop


def _ingest_files(run: _Run, files: list[Path], root: Path) -> None:
    """Every file through :meth:`_Run.process`, then pruning (with ``prune``) and the last write."""
    # a symlink whose target is also ingested in this run is that file: name it by the file's own path
    for path in files:
        if not os.path.islink(path):
            run.targets.setdefault(os.path.realpath(path), source_name(path, root))
    for path in files:
        entry = FileReport(path=str(path), source=source_name(path, root))
        run.report.files.append(entry)
        run.tracker.notify(entry.source)
        run.current = entry
        run.process(path, entry)
        run.current, run.current_keys = None, []
        run.tracker.file_done(entry)
    if run.prune:
        run.prune_missing()
    run.flush()


__all__ = ["IngestOptions", "IngestProgress", "IngestReport", "FileReport", "ingest_paths", "ingest_run",
           "discover_files", "common_root",
           "source_name", "own_path", "read_regular_file", "NotRegularFileError", "StoreError", "IngestInterrupted",
           "stop_on_signals", "mark_not_reached",
           "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_LOCKED", "EXIT_STORE", "EXIT_CODES_HELP"]
