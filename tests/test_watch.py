"""Sources that stay in sync (issue 45, item 3): ``copilot ingest --watch`` and the server's
``COPILOT_WATCH_PATHS`` re-ingest what changes under followed files and folders.

Real components throughout: the watcher on real files (native notifications, and polling), the
embedded store (SQLite + embedded Chroma) with hash embeddings, a real uvicorn for the server. Every
wait is a loop with a deadline; the issue's goal ("a line appended to a watched ELOG file is
answerable <= 30 s after the write, no restart") is measured by the server test and printed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import watchfiles
from pydantic import ValidationError

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import HashEmbedder  # noqa: E402

from copilot.api.app import create_app  # noqa: E402
from copilot.api.server import ServerThread  # noqa: E402
from copilot.config import Settings  # noqa: E402
from copilot.service import CopilotService  # noqa: E402
from ingestion.ingest_command import run_watch  # noqa: E402
from ingestion.report import EXIT_OK  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402
from ingestion.watch import SourceWatcher, WatchCycle, WatchOptions, diff_scans, scan_paths  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: Short waits so that each test stays well under 30 s.
FAST = WatchOptions(debounce_s=0.3, check_every_s=0.2, lock_retry_s=0.3)
DEADLINE_S = 30.0


def elog_entry(mid: int, subject: str, body: str) -> str:
    """One entry in the ELOG native format (as ``evals/data/corpus/logbooks/operations.elog``)."""
    return (f"$@MID@$: {mid}\nDate: Mon, 12 Jan 2026 08:{mid % 60:02d}:03 +0100\nAuthor: Jane Doe\nType: Problem\n"
            f"Category: Storage\nSubject: {subject}\nIn reply to: \nAttachment: \nEncoding: plain\n"
            f"{'=' * 40}\n{body}\n\n")


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


def stored(data: Path) -> set[str]:
    """The document ids in the store's manifest (read from its SQLite file, beside the watcher's writes)."""
    db = data / "index.sqlite3"
    if not db.exists():
        return set()
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
            return {row[0] for row in conn.execute("SELECT doc_id FROM documents")}
    except sqlite3.OperationalError as exc:  # the store is being created
        assert "no such table" in str(exc), exc
        return set()


def wait_for(what: str, ready: Callable[[], bool], timeout_s: float = DEADLINE_S) -> float:
    """Seconds until ``ready()`` holds; fails after ``timeout_s``."""
    start = time.monotonic()
    while not ready():
        assert time.monotonic() - start < timeout_s, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)
    return time.monotonic() - start


def settings_for(data: Path) -> Settings:
    return Settings(data_dir=data, embedding_model="test/hash-embedder", _env_file=None)


@contextmanager
def cli_watch(paths: list[Path], data: Path, options: WatchOptions = FAST) -> Iterator[list[WatchCycle]]:
    """:func:`run_watch` (the body of ``copilot ingest --watch``) on a thread; yields the cycles as they
    end; on exit stops it and checks it ended cleanly (exit 0)."""
    cycles: list[WatchCycle] = []
    stop = threading.Event()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(run_watch(
        paths, settings_for(data), options, embedder=HashEmbedder(), on_cycle=cycles.append, stop=stop)))
    thread.start()
    try:
        yield cycles
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive() and result == [EXIT_OK]


@pytest.fixture
def logbook(tmp_path) -> Path:
    """A logbook folder holding one day's ELOG file with two entries."""
    folder = tmp_path / "logbook"
    folder.mkdir()
    (folder / "260112a.log").write_text(
        elog_entry(1, "dCache pool dc-pool-07 offline", "Pool disabled after a disk failure in slot 14.")
        + elog_entry(2, "Re: dCache pool dc-pool-07 offline", "Disk swapped, pool enabled again."), encoding="utf-8")
    return folder


def test_an_appended_elog_entry_is_stored_as_a_new_document(logbook, tmp_path):
    data = tmp_path / "data"
    day = logbook / "260112a.log"
    with cli_watch([logbook], data) as cycles:
        wait_for("the first ingest", lambda: {"260112a.log#1", "260112a.log#2"} <= stored(data))
        first = len(cycles)
        append(day, elog_entry(3, "gridftp door stuck", "Restarted the door; transfers resumed (marker qzx3)."))
        written = time.monotonic()
        seconds = wait_for("the appended entry", lambda: "260112a.log#3" in stored(data))
        print(f"\nCLI watch: the appended ELOG entry was stored {seconds:.2f} s after the write")
        assert seconds < DEADLINE_S
        wait_for("its cycle's report", lambda: len(cycles) > first)
        later = [c.to_dict() for c in cycles[first:]]
    assert cycles[0].to_dict()["counts"]["indexed"] == 1 and cycles[0].number == 1
    # the later cycle re-read the day's file and wrote only the new entry
    assert sum(c["documents_written"] for c in later) == 1, later
    assert later[0]["files"][0]["source"] == "260112a.log" and later[0]["files"][0]["status"] == "indexed"
    assert time.monotonic() - written < DEADLINE_S
    store = ChunkStore(data, embedder=HashEmbedder())
    try:
        assert store.manifest.count() == 3
        assert "260112a.log#3" in {hit.chunk.doc_id for hit in store.lexical_search("qzx3", 3)}
    finally:
        store.close()


@pytest.mark.parametrize("prune", [False, True], ids=["keep", "prune"])
def test_a_deleted_files_documents_stay_without_prune_and_go_with_it(prune, logbook, tmp_path):
    data = tmp_path / "data"
    (logbook / "260113a.log").write_text(elog_entry(7, "BGP flap", "sw-border-01 flapped twice."), encoding="utf-8")
    with cli_watch([logbook], data, replace(FAST, prune=prune)):
        wait_for("the first ingest", lambda: "260113a.log#7" in stored(data) and "260112a.log#1" in stored(data))
        (logbook / "260112a.log").unlink()
        append(logbook / "260113a.log", elog_entry(8, "BGP flap again", "sw-border-01 flapped a third time."))
        wait_for("the later change", lambda: "260113a.log#8" in stored(data))
        gone = {"260112a.log#1", "260112a.log#2"}
        if prune:
            wait_for("the deleted file's documents to go", lambda: not gone & stored(data))
        else:
            time.sleep(FAST.debounce_s + 2 * FAST.check_every_s)  # had the deletion been acted on, it would be now
            assert gone <= stored(data)


def test_a_watched_folder_removed_and_recreated_is_a_warning_and_followed_again(logbook, tmp_path, caplog):
    data = tmp_path / "data"
    with caplog.at_level(logging.INFO, logger="ingestion.watch"), cli_watch([logbook], data):
        wait_for("the first ingest", lambda: "260112a.log#2" in stored(data))
        shutil.rmtree(logbook)
        wait_for("the warning", lambda: any(r.levelno == logging.WARNING and "is gone" in r.getMessage()
                                            for r in caplog.records))
        logbook.mkdir()
        (logbook / "260114a.log").write_text(elog_entry(9, "CE certificate renewed", "New host cert on ce01."),
                                             encoding="utf-8")
        wait_for("the file in the recreated folder", lambda: "260114a.log#9" in stored(data))
        append(logbook / "260114a.log", elog_entry(10, "CE back in production", "Jobs flowing on ce01 again."))
        wait_for("a later change in it", lambda: "260114a.log#10" in stored(data))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(logbook.resolve()) in warnings[0] and "documents are kept" in warnings[0]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert {"260112a.log#1", "260112a.log#2"} <= stored(data)  # no prune: the vanished file's documents stay


def test_with_prune_a_folder_that_comes_back_empty_keeps_its_documents(logbook, tmp_path, caplog):
    """An unmounted share leaves its mount point: an empty folder (or one on another device). That is
    not a deletion: the whole ingest that follows prunes nothing; later deletions in it are pruned."""
    data = tmp_path / "data"
    with caplog.at_level(logging.INFO, logger="ingestion.watch"), cli_watch([logbook], data, replace(FAST, prune=True)):
        wait_for("the first ingest", lambda: {"260112a.log#1", "260112a.log#2"} <= stored(data))
        logbook.rename(tmp_path / "elsewhere")  # the share's files go away with it, none deleted ...
        logbook.mkdir()  # ... and an empty folder is left in its place, as an unmount leaves its mount point
        wait_for("the warning", lambda: any("not a deletion" in r.getMessage() for r in caplog.records))
        time.sleep(FAST.debounce_s + 3 * FAST.check_every_s)
        assert {"260112a.log#1", "260112a.log#2"} <= stored(data)
        (logbook / "260115a.log").write_text(elog_entry(11, "Share back", "Remounted."), encoding="utf-8")
        wait_for("a new file in it", lambda: "260115a.log#11" in stored(data))
        (logbook / "260115a.log").unlink()
        wait_for("a later deletion to be pruned", lambda: "260115a.log#11" not in stored(data))


def test_polling_follows_changes(logbook, tmp_path):
    data = tmp_path / "data"
    options = replace(FAST, poll=True, poll_interval_s=0.2)
    with cli_watch([logbook / "260112a.log"], data, options):  # a watched file, not a folder
        wait_for("the first ingest", lambda: "260112a.log#2" in stored(data))
        append(logbook / "260112a.log", elog_entry(3, "tape robot jam", "Gripper jammed on slot 1187."))
        seconds = wait_for("the appended entry", lambda: "260112a.log#3" in stored(data))
        (logbook / "260112a.log").write_text(elog_entry(1, "rewritten", "The file was replaced."), encoding="utf-8")
        wait_for("the rewritten entry", lambda: _title(data, "260112a.log#1") == "rewritten")
    print(f"\npolling: the appended ELOG entry was stored {seconds:.2f} s after the write")


def test_the_poller_sees_two_writes_within_one_second(tmp_path):
    """Modification times to the nanosecond and sizes: an append right after a write is a change
    (watchfiles' own poller compares whole seconds and misses it). Hidden entries and the excluded
    data dir are not scanned."""
    day, data = tmp_path / "260112a.log", tmp_path / "data"
    day.write_text(elog_entry(1, "one", "First."), encoding="utf-8")
    (tmp_path / ".swap").write_text("x")
    data.mkdir()
    (data / "index.sqlite3").write_text("x")
    before = scan_paths([tmp_path], exclude=data)
    append(day, elog_entry(2, "two", "Second."))
    (tmp_path / "new").mkdir()
    changes = diff_scans(before, scan_paths([tmp_path], exclude=data))
    changes.discard((watchfiles.Change.modified, str(tmp_path)))  # the folder itself (its time may not move)
    assert changes == {(watchfiles.Change.modified, str(day)), (watchfiles.Change.added, str(tmp_path / "new"))}


def _title(data: Path, doc_id: str) -> str | None:
    with sqlite3.connect(f"file:{data / 'index.sqlite3'}?mode=ro", uri=True, timeout=10) as conn:
        row = conn.execute("SELECT title FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()
    return row[0] if row else None


def test_a_cycle_waits_for_the_store_lock_held_by_another_ingest(logbook, tmp_path, caplog):
    data = tmp_path / "data"
    store = ChunkStore(data, embedder=HashEmbedder())
    watcher = SourceWatcher([logbook], store, FAST, root=logbook)
    thread = threading.Thread(target=watcher.run)
    try:
        with caplog.at_level(logging.INFO, logger="ingestion.watch"):
            thread.start()
            wait_for("the first ingest", lambda: "260112a.log#2" in stored(data))
            with store.ingest_lock():  # another ingest runs
                append(logbook / "260112a.log", elog_entry(3, "gridftp door stuck", "Restarted the door."))
                wait_for("the cycle to meet the lock", lambda: any("another ingest" in r.getMessage()
                                                                   for r in caplog.records))
                assert "260112a.log#3" not in stored(data) and thread.is_alive()
            wait_for("the cycle tried again", lambda: "260112a.log#3" in stored(data))
        assert watcher.status().last_error is None and watcher.status().cycles == 2
    finally:
        watcher.stop()
        thread.join(30)
        store.close()
    assert not thread.is_alive()


def test_a_stop_during_a_cycle_keeps_what_was_written_and_exits_143(tmp_path, caplog):
    """SIGTERM (here: the stop event, which stands for it) in the middle of a cycle: the cycle stops at
    its next file, its report says what was not stored, ``run_watch`` returns 143, and the next watch
    catches up."""
    folder, data = tmp_path / "many", tmp_path / "data"
    folder.mkdir()
    for i in range(300):
        (folder / f"e{i:03d}.log").write_text(elog_entry(i + 1, f"entry {i}", f"Body of entry {i}."), encoding="utf-8")
    stop, cycles, result = threading.Event(), [], []
    thread = threading.Thread(target=lambda: result.append(run_watch(
        [folder], settings_for(data), FAST, embedder=HashEmbedder(), on_cycle=cycles.append, stop=stop)))
    with caplog.at_level(logging.INFO, logger="ingestion.pipeline"):
        thread.start()
        wait_for("the first file", lambda: any("[1/300]" in r.getMessage() for r in caplog.records))
        stop.set()
        thread.join(30)
    assert result == [143] and len(cycles) == 1
    report = cycles[0].report
    assert "interrupted by SIGTERM" in cycles[0].to_dict()["error"]
    assert any("interrupted by SIGTERM" in (f.reason or "") for f in report.files if f.status == "failed")
    assert len(stored(data)) < 300
    with cli_watch([folder], data):
        wait_for("the catch-up", lambda: len(stored(data)) == 300)


def test_watch_paths_must_lie_under_the_ingest_root(tmp_path):
    root = tmp_path / "root"
    (root / "logs").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (root / "out").symlink_to(tmp_path / "elsewhere")
    ok = Settings(data_dir=tmp_path / "d", ingest_root=root, watch_paths="logs, later", _env_file=None)
    assert ok.watch_paths == [root / "logs", root / "later"]  # relative to the root; "later" may appear later
    for paths, needle in (([tmp_path / "elsewhere"], "lies outside COPILOT_INGEST_ROOT"),
                          (["out"], "lies outside COPILOT_INGEST_ROOT"), (["logs/../.."], "'..' is not allowed")):
        with pytest.raises(ValidationError, match=needle):
            Settings(data_dir=tmp_path / "d", ingest_root=root, watch_paths=paths, _env_file=None)
    with pytest.raises(ValidationError, match="COPILOT_WATCH_PATHS needs COPILOT_INGEST_ROOT"):
        Settings(data_dir=tmp_path / "d", watch_paths=["logs"], _env_file=None)


def test_the_server_answers_from_an_appended_entry_without_a_restart(tmp_path, restore_logging):
    """``COPILOT_WATCH_PATHS``: a real uvicorn; an entry appended to a followed ELOG file is found by
    ``POST /v1/search`` within 30 s (measured from the write, with the default debounce)."""
    root, data = tmp_path / "root", tmp_path / "data"
    (root / "logs").mkdir(parents=True)
    day = root / "logs" / "260112a.log"
    day.write_text(elog_entry(1, "dCache pool dc-pool-07 offline", "Pool disabled after a disk failure."),
                   encoding="utf-8")
    settings = Settings(data_dir=data, ingest_root=root, watch_paths="logs", _env_file=None)
    store = ChunkStore(data, embedder=HashEmbedder())

    def found(client: httpx.Client, words: str, doc_id: str) -> bool:
        r = client.post("/v1/search", json={"question": words, "max_sources": 3})
        assert r.status_code == 200, r.text
        return doc_id in {s["doc_id"] for s in r.json()["sources"]}

    with ServerThread(create_app(settings, CopilotService(settings, store, None))) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        wait_for("the first cycle", lambda: found(client, "dc-pool-07 disk failure", "logs/260112a.log#1"))
        append(day, elog_entry(2, "xrootd redirector hung", "Restarted xrootd on the redirector (zqv42 marker)."))
        seconds = wait_for("the appended entry", lambda: found(client, "xrootd redirector zqv42",
                                                               "logs/260112a.log#2"))
        print(f"\nserver: an entry appended to a followed ELOG file was answerable through /v1/search "
              f"{seconds:.2f} s after the write (goal: <= 30 s)")
        secret = tmp_path / "secret.env"  # outside the ingest root: a symlink to it is never read
        secret.write_text("COPILOT_API_KEYS=topsecret-qqz91\n", encoding="utf-8")
        (root / "logs" / "secret.txt").symlink_to(secret)
        append(day, elog_entry(3, "after the symlink", "Cycle marker yyq77."))
        wait_for("the next cycle", lambda: found(client, "cycle marker yyq77", "logs/260112a.log#3"))
        assert not found(client, "COPILOT_API_KEYS topsecret-qqz91", "logs/secret.txt#secret.txt")
        metrics = client.get("/metrics").text
    store.close()
    assert seconds <= 30
    assert 'copilot_watch_paths{state="followed"} 1.0' in metrics and "copilot_watch_last_cycle_failed 0.0" in metrics
    cycles = next(float(line.split()[-1]) for line in metrics.splitlines()
                  if line.startswith("copilot_watch_cycles_total"))
    assert cycles >= 2


def test_the_command_prints_a_line_per_cycle_and_stops_on_sigterm_with_exit_0(logbook, tmp_path):
    """``python -m ingestion --watch`` (the ``copilot ingest`` command): one JSON line per cycle on stdout;
    SIGTERM between cycles ends it with exit 0 and no traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COPILOT_")}
    env.update(HF_HUB_OFFLINE="1", COPILOT_DATA_DIR=str(tmp_path / "data"))
    proc = subprocess.Popen([sys.executable, "-m", "ingestion", "--watch", "--debounce", "0.3", str(logbook)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for("the first cycle's line", lambda: len(lines) >= 1, timeout_s=120)
        append(logbook / "260112a.log", elog_entry(3, "gridftp door stuck", "Restarted the door."))
        wait_for("the second cycle's line", lambda: len(lines) >= 2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    stderr = proc.stderr.read()
    first, second = json.loads(lines[0]), json.loads(lines[1])
    assert first["cycle"] == 1 and first["outcome"] == "succeeded" and first["counts"]["indexed"] == 1
    assert second["documents_written"] == 1 and second["files"][0]["source"] == "260112a.log"
    assert "Traceback" not in stderr and "stopped watching" in stderr


_NO_INOTIFY = """
import json, logging, os, resource, sys, threading, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from ingestion_helpers import HashEmbedder
from ingestion.stores.chunk_store import ChunkStore
from ingestion.watch import SourceWatcher, WatchOptions

folder, data = Path(sys.argv[1]), Path(sys.argv[2])
embedder = HashEmbedder()
embedder.tokenizer  # loaded before the descriptors run out
store = ChunkStore(data, embedder=embedder)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
reserved = []


class GiveBackOnFallback(logging.Handler):
    # once the watcher has fallen back to polling, the process may open files again
    def emit(self, record):
        if "cannot start" in record.getMessage():
            while reserved:
                os.close(reserved.pop())
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


logging.basicConfig(level=logging.INFO)
logging.getLogger("ingestion.watch").addHandler(GiveBackOnFallback())
watcher = SourceWatcher([folder], store, WatchOptions(debounce_s=0.3, check_every_s=0.2, poll_interval_s=0.2),
                        root=folder)
# no descriptor left: no inotify instance can be made (as at fs.inotify.max_user_instances)
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
try:
    while True:
        reserved.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
thread = threading.Thread(target=watcher.run)
thread.start()
deadline = time.monotonic() + 30
while store.manifest.count() < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
with open(folder / "260112a.log", "a") as handle:
    handle.write(sys.argv[4])
while store.manifest.count() < 3 and time.monotonic() < deadline:
    time.sleep(0.05)
watcher.stop()
thread.join(30)
print(json.dumps({"documents": store.manifest.count(), **watcher.status().to_dict()}))
"""


def test_the_watcher_polls_when_native_notifications_cannot_start(logbook, tmp_path):
    """No inotify instance can be created (every file descriptor is taken, as at the per-user instance
    limit): the watcher says so once, polls, and still ingests what changes."""
    entry = elog_entry(3, "gridftp door stuck", "Restarted the door.")
    proc = subprocess.run([sys.executable, "-c", _NO_INOTIFY, str(logbook), str(tmp_path / "data"),
                           str(Path(__file__).parent / "fixtures" / "ingestion"), entry],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads(proc.stdout.strip().splitlines()[-1])
    assert status["documents"] == 3 and status["mode"] == "polling" and status["cycles"] >= 2, status
    assert proc.stderr.count("native file notifications cannot start") == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
