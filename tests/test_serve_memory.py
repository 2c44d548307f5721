"""evals.serve_memory: what it reads from /proc, and its refusal of a malformed setting."""

from __future__ import annotations

import os
import sys

import pytest

from evals import serve_memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_memory_reads_the_resident_set_of_a_process_in_mib():
    got = serve_memory.memory(os.getpid())
    assert set(got) == {"VmHWM_mib", "VmRSS_mib", "RssAnon_mib", "RssFile_mib"}
    assert got["VmHWM_mib"] >= got["VmRSS_mib"] > 0
    assert got["VmRSS_mib"] == pytest.approx(got["RssAnon_mib"] + got["RssFile_mib"], abs=64)


@pytest.mark.parametrize("setting", ["MAX_BATCH=6", "COPILOT_MAX_BATCH"])
def test_a_setting_that_is_not_copilot_name_value_is_refused(setting, capsys):
    with pytest.raises(SystemExit) as exit_:
        serve_memory.main(["--set", setting])
    assert exit_.value.code == 2
    assert "--set takes COPILOT_NAME=VALUE" in capsys.readouterr().err
