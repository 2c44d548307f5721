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
A file that fails to load never changes what is stored for it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingestion.errors import IngestError, LoaderError, StoreError
from ingestion.loaders import BINARY_EXTENSIONS, LoaderConfig, load_bytes
from ingestion.report import FileReport, IngestReport
from ingestion.store import ChunkStore, DocumentWrite, WriteBatch
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


def discover_files(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """Expand ``paths`` into files (directories walked recursively, sorted, hidden entries skipped).

    Returns:
        (files, missing): existing files in a stable order, and paths that do not exist.
    """
    files: list[Path] = []
    missing: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            candidates = [path]
        elif path.is_dir():
            candidates = []
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                candidates.extend(Path(dirpath) / f for f in sorted(filenames) if not f.startswith("."))
        else:
            missing.append(path)
            continue
        for candidate in candidates:
            resolved = candidate.resolve()
            if resolved not in seen:
                seen.add(resolved)
                files.append(candidate)
    return files, missing


def common_root(paths: Sequence[Path]) -> Path:
    """The deepest directory containing every path (a single directory is its own root, a file's root is its parent)."""
    resolved = [Path(p).resolve() for p in paths]
    if not resolved:
        return Path.cwd()
    dirs = [p if p.is_dir() else p.parent for p in resolved]
    return Path(os.path.commonpath([str(d) for d in dirs]))


def source_name(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` with forward slashes (the absolute path if outside ``root``)."""
    resolved = path.resolve()
    try:
        return resolved.relative_to(root.resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


class _Run:
    """State of one :func:`ingest_paths` call."""

    def __init__(self, store: ChunkStore, report: IngestReport, prune: bool, config: LoaderConfig,
                 batch_chunks: int, notify: Callable[[str | None], None]) -> None:
        self.store = store
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
        source_abs = str(path.resolve())
        if path.suffix.lower() in BINARY_EXTENSIONS:  # reject without reading (archives can be huge)
            entry.status, entry.reason = "failed", f"binary file type {path.suffix.lower()!r} is not ingested"
            return
        try:
            data = path.read_bytes()
        except OSError as exc:
            entry.status, entry.reason = "failed", f"cannot read: {exc.strerror or exc}"
            return
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
        existing = self.store.manifest.for_source(entry.source, source_abs)
        # Another file that still exists owns this source name: refuse rather than overwrite it.
        owners = sorted({r.source_abs for r in existing if r.source == entry.source and r.source_abs
                         and r.source_abs != source_abs and Path(r.source_abs).exists()})
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
                continue
            chunks = self.store.chunk_document(doc)
            self.batch.writes.append(DocumentWrite(doc, chunks, source_abs))
            entry.written_documents += 1
            entry.written_chunks += len(chunks)
            n_chunks += len(chunks)
            if self.batch.n_chunks >= self.batch_chunks:
                self.flush()
        deletes = superseded + (vanished if self.prune else [])
        entry.kept_vanished = 0 if self.prune else len(vanished)
        if entry.kept_vanished:
            entry.warnings.append(f"{entry.kept_vanished} stored document(s) no longer in this file were kept "
                                  "(run with --prune to delete them)")
        self.batch.deletes.extend(deletes)
        entry.deleted_documents = len(deletes)
        entry.documents, entry.chunks = len(docs), n_chunks
        entry.status = "indexed" if entry.written_documents or deletes else "unchanged"
        if not entry.kept_vanished:
            self.batch.files.append(FileRecord(source_abs, entry.source, digest, self.settings_sig, len(docs),
                                               n_chunks, result.format))
        if self.batch.n_chunks >= self.batch_chunks:
            self.flush()

    def prune_missing(self) -> None:
        gone = self.store.prunable_documents()
        if gone:
            log.info("pruning %d document(s) whose source file is gone", len(gone))
            self.batch.deletes.extend(gone)
            self.report.pruned_documents = len(gone)
        self.batch.forget_files.extend(p for p in self.store.manifest.all_files() if not os.path.exists(p))


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
                 loader_config: LoaderConfig | None = None, batch_chunks: int = DEFAULT_BATCH_CHUNKS) -> IngestReport:
    """Ingest files and directories into ``store``.

    Args:
        paths: files and/or directories (walked recursively; hidden entries skipped).
        store: the target store.
        prune: delete documents whose source file is gone, entries that vanished from a
            file, and documents of files that became empty.
        progress: rich progress bar (True), log lines (False), or auto: a bar when stderr is a TTY.
        on_progress: called with an :class:`IngestProgress` after each file and batch.
        root: sources are recorded relative to it (default: :func:`common_root` of ``paths``).
        loader_config: loader options (CSV columns, time zone, shift windows).
        batch_chunks: chunks per write batch.
    Returns:
        The :class:`IngestReport`; a missing path or bad file is a ``failed`` entry, not an exception.
    Raises:
        StoreLockedError: another ingest runs on the same store.
        StoreError: the store failed mid-run (re-run to resume).
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

        state = _Run(store, report, prune, config, batch_chunks, notify)
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


def _print_summary(report: IngestReport) -> None:
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title="ingest report")
        for col in ("source", "status", "documents", "chunks", "written", "reason"):
            table.add_column(col)
        for f in report.files:
            if f.status != "unchanged":
                table.add_row(f.source, f.status, str(f.documents), str(f.chunks), str(f.written_chunks), f.reason or "")
        Console().print(table)
        Console().print(f"{report.counts} · {report.chunks_written} chunks written in {report.elapsed_s:.1f} s "
                        f"({report.chunks_per_s:.1f} chunks/s) · {report.documents_deleted} documents deleted")
    else:
        for f in report.files:
            if f.status == "failed":
                log.error("failed: %s: %s", f.source, f.reason)


def run_cli_ingest(paths: Sequence[Path], data_dir: Path, prune: bool = False, report_file: Path | None = None,
                   chroma_url: str | None = None, *, collection: str = "opscopilot",
                   embedding_model: str | None = None, device: str = "cpu", max_chunk_tokens: int | None = None,
                   loader_config: LoaderConfig | None = None, progress: bool | None = None) -> int:
    """Body of ``copilot ingest PATH... [--prune] [--report FILE.json]``.

    ``chroma_url`` falls back to the ``COPILOT_CHROMA_URL`` environment variable.
    Returns the process exit code: 0 all files fine, 1 some files failed (see the report),
    2 the run could not complete (store unreachable or locked; re-run to resume).
    """
    from ingestion.embedding import Embedder

    url = chroma_url or os.environ.get("COPILOT_CHROMA_URL") or None
    try:
        store = ChunkStore(Path(data_dir), chroma_url=url, collection=collection,
                           embedder=Embedder(embedding_model, device=device), max_chunk_tokens=max_chunk_tokens)
        try:
            report = ingest_paths([Path(p) for p in paths], store, prune=prune, progress=progress,
                                  loader_config=loader_config)
        finally:
            store.close()
    except IngestError as exc:
        log.error("ingest aborted: %s", exc)
        return 2
    if report_file is not None:
        write_report(report, Path(report_file))
    _print_summary(report)
    return 0 if report.ok else 1


__all__ = ["IngestProgress", "IngestReport", "FileReport", "ingest_paths", "run_cli_ingest", "write_report",
           "discover_files", "common_root", "source_name", "StoreError"]
