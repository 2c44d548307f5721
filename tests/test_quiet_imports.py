"""torchao (installed for the quantized derived drafts) prints CUDA-extension load failures
and ``register_constant`` deprecation warnings when imported; no command may show them."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from decoding.backends.quiet import NOISY_LOGGERS, quiet_torchao

NOISE = ("Failed to load", "register_constant", "torchao", "_C_")


def test_quiet_torchao_restores_logger_levels_and_warnings():
    before = [logging.getLogger(n).level for n in NOISY_LOGGERS]
    with quiet_torchao():
        assert all(logging.getLogger(n).level == logging.ERROR for n in NOISY_LOGGERS)
        warnings.warn("hidden", stacklevel=2)  # ignored inside
    assert [logging.getLogger(n).level for n in NOISY_LOGGERS] == before
    with pytest.warns(UserWarning):
        warnings.warn("shown again", stacklevel=2)


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed")
def test_copilot_help_prints_no_torchao_noise():
    copilot = Path(sys.executable).with_name("copilot")
    cmd = [str(copilot), "--help"] if copilot.exists() else [sys.executable, "-m", "copilot.cli.main", "--help"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Usage" in out.stdout
    noisy = [line for line in (out.stdout + out.stderr).splitlines() if any(n in line for n in NOISE)]
    assert noisy == []
