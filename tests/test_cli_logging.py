"""``copilot ingest`` on a terminal (issue #22): log lines print above the progress bar, never into
it, and the bar shows an ETA; elsewhere plain one-line log records."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from copilot.cli.main import LOG_FORMAT, log_handler

REPO_ROOT = Path(__file__).resolve().parents[1]
TICKETS = REPO_ROOT / "evals" / "data" / "corpus" / "tickets"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BAR_MARKS = ("chunks written", "━", "ETA")


def _segments(raw: str) -> list[str]:
    """What a terminal shows as separate lines: escapes removed, split at line feeds and carriage returns."""
    return [s for s in re.split(r"[\r\n]+", ANSI.sub("", raw)) if s.strip()]


@pytest.fixture
def terminal(monkeypatch):
    """rich's process console (the one the ingest bar draws on) writing to a buffer that claims
    to be a 100-column terminal; restored afterwards."""
    import rich

    console = rich.get_console()
    saved = dict(console.__dict__)
    buffer = io.StringIO()
    rich.reconfigure(file=buffer, force_terminal=True, width=100, color_system=None)
    yield console, buffer
    console.__dict__.clear()
    console.__dict__.update(saved)


def test_off_a_terminal_log_records_are_plain_lines():
    handler = log_handler(Console(file=io.StringIO(), force_terminal=False))
    assert isinstance(handler, logging.StreamHandler) and handler.formatter._fmt == LOG_FORMAT


def test_a_record_logged_during_ingest_prints_above_the_bar(terminal, tmp_path):
    """The CLI's handler on the console the pipeline's bar draws on: the record logged while the
    bar is live comes out as a line of its own, and the bar carries an ETA."""
    from rich.logging import RichHandler

    sys.path.insert(0, str(REPO_ROOT / "tests" / "fixtures" / "ingestion"))
    from ingestion_helpers import HashEmbedder

    from ingestion.pipeline import ingest_paths
    from ingestion.stores.chunk_store import ChunkStore

    console, buffer = terminal
    handler = log_handler(console)
    assert isinstance(handler, RichHandler) and handler.console is console
    logger = logging.getLogger("tests.ingest-progress")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # only this handler: an earlier test may have configured the root logger
    store = ChunkStore(tmp_path / "data", embedder=HashEmbedder())
    try:
        ingest_paths([TICKETS], store, progress=True,
                     on_progress=lambda p: logger.info("marker: %d of %d files", p.files_done, p.files_total))
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        store.close()
    segments = _segments(buffer.getvalue())
    logged = [s for s in segments if "marker:" in s]
    assert logged, segments
    assert all(not any(mark in s for mark in BAR_MARKS) for s in logged), logged
    assert all("tests.ingest-progress: marker:" in s for s in logged), logged
    bars = [s for s in segments if "chunks written" in s]
    assert bars and all("ETA" in s for s in bars), bars
    assert "2/2" in bars[-1]


@pytest.mark.slow
def test_copilot_ingest_on_a_terminal_logs_above_the_bar(tmp_path):
    """The real command with stderr on a pseudo-terminal: the embedding model's "loading" line,
    logged while the bar is live (the first file is being embedded), is a line of its own; the
    bar (with its ETA) is on stderr, the counts alone on stdout."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith("COPILOT_")}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", TERM="xterm-256color",
               COPILOT_DATA_DIR=str(tmp_path / "data"))
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([str(Path(sys.executable).with_name("copilot")), "ingest", str(TICKETS)],
                            stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env=env, cwd=tmp_path)
    os.close(slave)
    raw = b""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # bounded: a hang fails the test, never the suite
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            raw += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    stdout = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, raw.decode(errors="replace")[-3000:]
    segments = _segments(raw.decode(errors="replace"))
    loading = [s for s in segments if "loading embedding model" in s]
    assert loading, segments
    assert all(not any(mark in s for mark in BAR_MARKS) for s in loading), loading
    assert any("chunks written" in s and "ETA" in s for s in segments), segments
    assert json.loads(stdout)["indexed"] == 2
