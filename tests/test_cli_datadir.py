"""An unusable data dir (issue #23, item 2): every command that opens the store says so in one
line and exits 4, ``serve`` included, never with a traceback. The data dir is a regular file
(unusable for root too, who ignores permissions) or, when not root, a read-only folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from copilot.api.server import free_port

COPILOT = str(Path(sys.executable).with_name("copilot"))
COMMANDS = {
    "ingest": ["ingest", "{corpus}"],
    "documents list": ["documents", "list"],
    "documents delete": ["documents", "delete", "a.log#1"],
    "search": ["search", "tape robot"],
    "ask": ["ask", "What jammed on the tape robot?"],
    "serve": ["serve", "--port", "{port}"],
    "eval retrieval": ["eval", "retrieval", "--data-dir", "{data}"],
}


def _run(args: list[str], data: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    (corpus / "a.log").write_text("2026-01-20 06:04 [OPS] tape robot jammed\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COPILOT_")}
    env.update(HF_HUB_OFFLINE="1", COPILOT_DATA_DIR=str(data))
    args = [a.format(corpus=corpus, port=free_port(), data=data) for a in args]
    return subprocess.run([COPILOT, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)


def _assert_one_line_exit_4(proc: subprocess.CompletedProcess, reason: str) -> None:
    assert proc.returncode == 4, (proc.returncode, proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr[-2000:]
    assert "cannot open the store in data dir" in lines[0] and reason in lines[0], lines[0]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_data_dir_that_is_a_file_is_one_line_and_exit_4(command, tmp_path):
    data = tmp_path / "data"
    data.write_text("not a folder\n")
    _assert_one_line_exit_4(_run(COMMANDS[command], data, tmp_path), "it is not a folder")


def test_a_data_dir_under_a_file_is_one_line_and_exit_4(tmp_path):
    (tmp_path / "file").write_text("x")
    _assert_one_line_exit_4(_run(COMMANDS["documents list"], tmp_path / "file" / "data", tmp_path), "Not a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only folders")
@pytest.mark.parametrize("command", ["ingest", "documents list", "serve"])
def test_a_read_only_data_dir_is_one_line_and_exit_4(command, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o500)
    try:
        _assert_one_line_exit_4(_run(COMMANDS[command], data, tmp_path), "")
    finally:
        data.chmod(0o700)
