"""Issue #14 (ingestion, pipeline): only regular files are read; symlinks under their own path;
bad records fail alone without losing stored documents; oversize fields are stored chunked;
a moved corpus keeps its documents. Real files, real Chroma + SQLite (hash embedder)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import HashEmbedder  # noqa: E402

from ingestion.pipeline import ingest_paths  # noqa: E402
from ingestion.report import IngestReport  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402

#: A run that would block on a FIFO must fail the test, never hang the suite.
HANG_TIMEOUT_S = 120


@pytest.fixture
def store(tmp_path):
    s = ChunkStore(tmp_path / "store", embedder=HashEmbedder(), collection="files-test")
    yield s
    s.close()


def ingest_bounded(paths, store, **kw) -> IngestReport:
    """``ingest_paths`` on a daemon thread with a deadline (a hang fails the test instead of blocking it)."""
    out: dict = {}

    def run() -> None:
        try:
            out["report"] = ingest_paths(paths, store, progress=False, **kw)
        except BaseException as exc:  # re-raised in the test thread
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_TIMEOUT_S)
    assert not thread.is_alive(), f"ingest still running after {HANG_TIMEOUT_S} s (blocked on a special file?)"
    if "error" in out:
        raise out["error"]
    return out["report"]


def statuses(report: IngestReport) -> dict[str, tuple[str, str | None]]:
    return {f.source: (f.status, f.reason) for f in report.files}


def test_named_pipe_socket_device_and_broken_symlink_are_skipped_never_opened(store, tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "ops.log").write_text("2026-01-20 06:04 [OPS] restarted xrootd on dc-door-02\n")
    os.mkfifo(folder / "pipe.log")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(folder / "agent.sock"))
    (folder / "zero.log").symlink_to("/dev/zero")  # a character device: reading it would never end
    (folder / "gone.log").symlink_to(tmp_path / "missing.log")
    try:
        report = ingest_bounded([folder], store)
    finally:
        sock.close()
    got = statuses(report)
    assert got["ops.log"][0] == "indexed"
    assert got["pipe.log"] == ("skipped", "a named pipe (FIFO), not a regular file: never opened")
    assert got["agent.sock"] == ("skipped", "a socket, not a regular file: never opened")
    assert got["zero.log"] == ("skipped", "a character device, not a regular file: never opened")
    assert got["gone.log"][0] == "skipped" and "broken symlink" in got["gone.log"][1]
    assert report.counts["skipped"] == 4 and report.counts["failed"] == 0 and report.ok
    assert store.manifest.count() == 1
    # named explicitly, a pipe is skipped too (not "no such file")
    report = ingest_bounded([folder / "pipe.log"], store)
    assert [(f.status, f.reason) for f in report.files] == [
        ("skipped", "a named pipe (FIFO), not a regular file: never opened")]


def test_symlinks_are_reported_under_their_own_path(store, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.jsonl").write_text(json.dumps({"id": "KB-1", "text": "renew the host cert"}) + "\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps({"id": "KB-2", "text": "drain dc-pool-07"}) + "\n")
    (folder / "0-latest.jsonl").symlink_to(folder / "a.jsonl")  # sorts before its target
    (folder / "linked.jsonl").symlink_to(outside / "target.jsonl")
    report = ingest_bounded([folder], store)
    got = statuses(report)
    assert got["a.jsonl"][0] == "indexed"
    assert got["linked.jsonl"][0] == "indexed"
    assert got["0-latest.jsonl"] == ("skipped", "the same file as a.jsonl (symlink)")
    assert store.manifest.info("linked.jsonl#KB-1") is not None  # its own name, not the target's path
    assert {r["source"] for r in store.manifest.page(0, 10)[0]} == {"a.jsonl", "linked.jsonl"}
    assert ingest_bounded([folder], store).counts["unchanged"] == 2


def test_bad_records_fail_alone_and_never_lose_stored_documents(store, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    records = src / "kb.jsonl"
    good = [{"id": f"KB-{i}", "text": f"runbook {i}: restart dc-pool-0{i}"} for i in (1, 2, 3)]
    records.write_text("".join(json.dumps(r) + "\n" for r in good))
    ingest_bounded([src], store)
    assert store.manifest.count() == 3
    # KB-2's id blanked, KB-3 edited, a truncated line appended; pruning must not delete KB-2
    edited = [good[0], {**good[1], "id": ""}, {**good[2], "text": "runbook 3: drain first"}]
    records.write_text("".join(json.dumps(r) + "\n" for r in edited) + '{"id": "KB-4", "te')
    report = ingest_bounded([src], store, prune=True)
    (entry,) = report.files
    assert entry.status == "indexed" and entry.written_documents == 1 and entry.deleted_documents == 0
    assert entry.failed_records == [{"where": "line 2", "reason": "empty or blank 'id' ''"},
                                    {"where": "line 4", "reason": "invalid JSON at column 16: Unterminated string "
                                                                  "starting at"}]
    assert not report.ok and report.failed_records == 2 and report.to_dict()["failed_records"] == 2
    assert "drain first" in store.lexical.document_chunks("kb.jsonl#KB-3")[0].text
    assert store.manifest.info("kb.jsonl#KB-2") is not None  # kept: the bad record may be it
    # the file is parsed again next run, so its bad records are reported again (not "unchanged")
    again = ingest_bounded([src], store, prune=True)
    assert again.files[0].status == "unchanged" and len(again.files[0].failed_records) == 2
    # a file whose every record is bad fails as a whole and keeps what is stored
    records.write_text(json.dumps({"id": " ", "text": "x"}) + "\n")
    report = ingest_bounded([src], store, prune=True)
    assert report.files[0].status == "failed" and "no record could be stored" in report.files[0].reason
    assert store.manifest.count() == 3


def test_a_200000_character_csv_field_is_stored_chunked(store, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    huge = " ".join(f"line{i}: pool dc-pool-{i % 50:02d} reports ERR{i}" for i in range(6000))[:200_000]
    (src / "ggus.csv").write_text("ticket_id,site,subject,status,opened,updated,description\n"
                                  "GGUS-1,CERN,disk full,open,2026-01-20,,cleaned\n"
                                  f'GGUS-2,FNAL,huge log,open,2026-01-20,,"{huge}"\n')
    report = ingest_bounded([src], store)
    assert report.files[0].status == "indexed" and report.files[0].failed_records == [] and report.ok
    chunks = store.lexical.document_chunks("ggus.csv#GGUS-2")
    assert len(chunks) > 10 and "reports ERR4800 " in " ".join(c.text for c in chunks)
    assert store.manifest.info("ggus.csv#GGUS-1") is not None


def test_a_moved_corpus_keeps_its_documents_even_with_prune(store, tmp_path):
    first = tmp_path / "first" / "corpus"
    first.mkdir(parents=True)
    (first / "kb.jsonl").write_text(json.dumps({"id": "KB-1", "text": "renew the host cert"}) + "\n")
    ingest_bounded([first], store)
    moved = tmp_path / "moved" / "corpus"
    moved.parent.mkdir()
    shutil.move(str(first), str(moved))
    report = ingest_bounded([moved], store, prune=True)
    assert report.files[0].status == "unchanged" and report.pruned_documents == 0
    assert store.manifest.info("kb.jsonl#KB-1") is not None
    assert ingest_bounded([moved], store, prune=True).documents_deleted == 0
