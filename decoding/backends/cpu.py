"""What the CPU offers the kernels, reported honestly (``copilot config``, ``/readyz``).

The CPU's model and the instruction sets it *advertises* come from ``/proc/cpuinfo``; the ones
llama.cpp's CPU backend *uses* on this machine from its own ``llama_print_system_info`` (the
build's kernels, as detected at run time). They can differ: a VM may advertise AMX without the
kernel enabling it, and llama.cpp's default load (weights repacked into its tiled layouts) then
crashes on the first decode with a general-protection fault. OpsCopilot loads GGUFs without
repacking (``LlamaCppOptions.repack`` off, for exactness: the repacked kernels sum 4+ rows
differently from one), so it runs on such machines.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

#: The ``/proc/cpuinfo`` flags worth reporting: vector and matrix extensions the kernels may use.
_REPORTED = ("avx", "amx", "fma", "f16c")


@dataclass(frozen=True)
class CpuReport:
    """The CPU as the kernels see it.

    Attributes:
        model: the CPU's model name ("" when unknown).
        advertised: vector/matrix flags ``/proc/cpuinfo`` lists (``avx2``, ``avx512f``, ``amx_tile`` ...).
        llama_cpp: the instruction sets llama.cpp's CPU backend uses here (``AVX2``, ``AVX512`` ...);
            empty without llama-cpp-python.
    """

    model: str = ""
    advertised: tuple[str, ...] = field(default_factory=tuple)
    llama_cpp: tuple[str, ...] = field(default_factory=tuple)

    @property
    def amx_advertised_not_used(self) -> bool:
        """The CPU advertises AMX but llama.cpp does not use it (where its default, repacking load crashes)."""
        return any(f.startswith("amx") for f in self.advertised) and not any(
            f.startswith("AMX") for f in self.llama_cpp)

    def summary(self) -> str:
        """One line: the model, then what llama.cpp uses (or what the CPU advertises)."""
        used = " ".join(self.llama_cpp) or "llama.cpp not loaded; advertises " + " ".join(self.advertised)
        note = "; advertises AMX, which llama.cpp does not use here" if self.amx_advertised_not_used else ""
        return f"{self.model or 'unknown CPU'}: {used} (GGUF weights loaded without repacking){note}"


def _cpuinfo() -> tuple[str, tuple[str, ...]]:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "", ()
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    return model, tuple(sorted(f for f in flags if f.startswith(_REPORTED)))


@functools.lru_cache(maxsize=1)
def cpu_report() -> CpuReport:
    """This machine's :class:`CpuReport` (read once)."""
    from decoding.backends.llamacpp import system_features

    model, advertised = _cpuinfo()
    return CpuReport(model, advertised, system_features())
