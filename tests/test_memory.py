"""Returning freed heap memory to the OS after one-off work (glibc malloc_trim)."""

from __future__ import annotations

import platform

from decoding.backends.memory import return_freed_memory


def test_return_freed_memory_runs_on_glibc_and_is_harmless():
    big = [bytearray(1 << 20) for _ in range(32)]  # 32 MiB on the heap, then freed
    del big
    ran = return_freed_memory()
    assert isinstance(ran, bool)
    if platform.libc_ver()[0] == "glibc":
        assert ran
