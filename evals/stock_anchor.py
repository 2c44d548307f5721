"""A stock llama-cpp-python build as a latency anchor: what its users get (issue 44 item 6).

    pip install --target /opt/llama-stock llama-cpp-python==0.3.36   # built with no CMAKE_ARGS
    LLAMA_CPP_STOCK_SITE=/opt/llama-stock copilot eval latency --modes llamacpp_stock_default,ours_auto

``llamacpp_stock_default`` is ``Llama.generate(temp=0)`` of that build on the target's GGUF, loaded
the way its users load it: ``Llama()``'s defaults (its 512-token batch; weights repacked where the
CPU has a repacked kernel), the target's threads. Two builds of llama.cpp cannot share one process,
so it runs in a worker process of its own (``python -m evals.stock_anchor GGUF THREADS``, the stock
folder first on its path) that answers one JSON line per prompt on a private pipe. A worker that
cannot start or dies — llama.cpp's default load faults on CPUs that advertise AMX without enabling
it — raises :class:`StockAnchorUnavailable` with the reason, and the latency eval skips the mode.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: The latency mode this module times.
STOCK_MODE = "llamacpp_stock_default"
#: The environment variable naming the folder that holds the stock ``llama_cpp`` package.
STOCK_SITE_ENV = "LLAMA_CPP_STOCK_SITE"
_REPO = Path(__file__).resolve().parent.parent


class StockAnchorUnavailable(RuntimeError):
    """The stock build cannot be timed here; the message says why (one line)."""


def stock_site() -> Path:
    """The folder :data:`STOCK_SITE_ENV` names.

    Raises:
        StockAnchorUnavailable: the variable is unset, or the folder holds no ``llama_cpp`` package.
    """
    site = os.environ.get(STOCK_SITE_ENV, "")
    if not site:
        raise StockAnchorUnavailable(f"no stock llama-cpp-python build: set {STOCK_SITE_ENV} to a folder holding "
                                     "one (pip install --target DIR llama-cpp-python, no CMAKE_ARGS)")
    if not (Path(site) / "llama_cpp" / "__init__.py").is_file():
        raise StockAnchorUnavailable(f"{STOCK_SITE_ENV}={site} holds no llama_cpp package")
    return Path(site)


class StockWorker:
    """The worker process running the stock build on one GGUF with ``threads`` threads.

    Raises:
        StockAnchorUnavailable: on construction, no stock build (:func:`stock_site`).
    """

    def __init__(self, gguf: Path, threads: int) -> None:
        site = stock_site()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(_REPO)]))
        read_fd, write_fd = os.pipe()
        self._stderr = tempfile.TemporaryFile("w+")  # a file, not a pipe: a long run never blocks on it
        self._proc = subprocess.Popen([sys.executable, "-m", "evals.stock_anchor", str(gguf), str(threads),
                                       str(write_fd)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      stderr=self._stderr, env=env, pass_fds=(write_fd,), text=True)
        os.close(write_fd)
        self._answers = os.fdopen(read_fd, "r")

    def generate(self, prompt_ids: list[int], budget: int, eos: set[int]) -> tuple[list[int], list[float], int]:
        """Greedy ids up to EOS or ``budget``, each one's arrival time (s after the call's start) and
        the target passes after the prefill.

        Raises:
            StockAnchorUnavailable: the worker died (the signal or exit status, and its last stderr line).
        """
        request = {"prompt": prompt_ids, "budget": budget, "eos": sorted(eos)}
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._answers.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise StockAnchorUnavailable(self._death())
        answer = json.loads(line)
        return answer["ids"], answer["times"], answer["passes"]

    def _death(self) -> str:
        """Why the worker is gone, in one line."""
        try:
            code = self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            return "the stock build's worker stopped answering"
        self._stderr.seek(0)
        err = self._stderr.read().strip().splitlines()
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        return f"the stock build crashed ({how})" + (f": {err[-1][:200]}" if err else "")

    def close(self) -> None:
        """End the worker (idempotent)."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._answers.close()
        self._stderr.close()


_WORKERS: dict[tuple[str, str, int], StockWorker] = {}


@atexit.register
def _close_all() -> None:
    for worker in _WORKERS.values():
        worker.close()
    _WORKERS.clear()


def generate_stock(gguf: Path, threads: int, prompt_ids: list[int], budget: int,
                   eos: set[int]) -> tuple[list[int], list[float], int, float]:
    """:meth:`StockWorker.generate` on a worker kept per (stock folder, GGUF, threads), in the shape of
    :func:`evals.llamacpp_anchor.generate_timed`: ``(ids, arrival times, passes, start = 0.0)``.

    Raises:
        StockAnchorUnavailable: no stock build, or its worker died (it is not restarted).
    """
    key = (str(stock_site()), str(gguf), threads)
    worker = _WORKERS.get(key)
    if worker is None:
        worker = _WORKERS[key] = StockWorker(gguf, threads)
    ids, times, passes = worker.generate(prompt_ids, budget, eos)
    return ids, times, passes, 0.0


def _serve(gguf: str, threads: int, out_fd: int) -> None:
    """The worker: one JSON request per stdin line, one answer per line on ``out_fd`` (llama.cpp's
    own output goes to the inherited stdout and stderr)."""
    from llama_cpp import Llama

    from evals.llamacpp_anchor import timed_greedy

    out = os.fdopen(out_fd, "w")
    llm: Any = None
    for line in sys.stdin:
        request = json.loads(line)
        prompt, budget = request["prompt"], request["budget"]
        if llm is None or llm.n_ctx() < len(prompt) + budget + 16:
            llm = Llama(gguf, n_ctx=max(2048, len(prompt) + budget + 16), n_threads=threads,
                        n_threads_batch=threads, verbose=False)
        ids, times, passes, start = timed_greedy(llm, prompt, budget, set(request["eos"]))
        out.write(json.dumps({"ids": ids, "times": [t - start for t in times], "passes": passes}) + "\n")
        out.flush()


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
