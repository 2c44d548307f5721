r"""Resident memory of ``copilot serve`` on the defaults (a benchmark, not a test; issue 44 item 5).

    .venv/bin/python -m evals.serve_memory --out evals/results/issue44/memory/serve_memory.json

Starts ``copilot serve`` (the embedded 1.5B on llama.cpp, every default) on a fresh data folder
with the sample corpus ingested and the existing model cache, then reads the server process's
``/proc/PID/status`` after each phase:

1. ready (nothing asked yet);
2. ``--sequential`` questions of the sample set asked one after the other (a lone operator);
3. ``--burst`` more asked at once (more than the batch holds: every batch place and KV sequence in
   use, the rest queued).

Reported per phase: ``VmHWM`` (peak resident set so far), ``VmRSS``, and its anonymous and
file-backed parts (the memory-mapped GGUF is file-backed), in MiB, and the HTTP statuses. Linux only.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from copilot.config import Settings
from evals.load_test import QUESTIONS, ServerProcess
from evals.report import write_json

log = logging.getLogger(__name__)
FIELDS = ("VmHWM", "VmRSS", "RssAnon", "RssFile")


def memory(pid: int) -> dict[str, float]:
    """``FIELDS`` of process ``pid`` from ``/proc/PID/status``, in MiB."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {f"{name}_mib": round(int(status[name].split()[0]) / 1024, 1) for name in FIELDS}


def ask(url: str, question: str, timeout_s: float) -> int:
    """``POST /v1/ask``; the HTTP status."""
    return httpx.post(url + "/v1/ask", json={"question": question}, timeout=timeout_s).status_code


def run(sequential: int, burst: int, timeout_s: float, ready_timeout_s: float, log_path: Path,
        settings: dict[str, str] | None = None) -> dict:
    """The measurement (see the module docstring), the server started with ``settings`` (``COPILOT_*``
    values) over the defaults; the report."""
    questions = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines() if line.strip()]
    models = Settings(_env_file=None).model_cache_dir.resolve()
    with tempfile.TemporaryDirectory(prefix="serve-memory-") as data:
        server = ServerProcess.launch({**(settings or {}), "COPILOT_DATA_DIR": data, "COPILOT_MODEL_DIR": str(models)},
                                      ready_timeout_s, log_path)
        try:
            phases: dict[str, dict[str, object]] = {"ready": {**memory(server.proc.pid)}}
            statuses = [ask(server.url, q, timeout_s) for q in questions[:sequential]]
            phases[f"after {sequential} questions, one at a time"] = {**memory(server.proc.pid), "statuses": statuses}
            with ThreadPoolExecutor(burst) as pool:
                statuses = list(pool.map(lambda q: ask(server.url, q, timeout_s),
                                         questions[sequential:sequential + burst]))
            phases[f"after {burst} more at once"] = {**memory(server.proc.pid), "statuses": statuses}
        finally:
            server.stop()
    return {"settings": settings or "the defaults (embedded 1.5B on llama.cpp)", "phases": phases}


def main(argv: list[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sequential", type=int, default=2)
    ap.add_argument("--burst", type=int, default=15)
    ap.add_argument("--timeout", type=float, default=900.0, help="per question (s)")
    ap.add_argument("--ready-timeout", type=float, default=600.0, help="wait for the server (s)")
    ap.add_argument("--set", action="append", default=[], metavar="COPILOT_NAME=VALUE",
                    help="a server setting over the defaults (repeatable), e.g. COPILOT_MAX_BATCH=6")
    ap.add_argument("--out", type=Path, help="write the report here (JSON)")
    args = ap.parse_args(argv)
    bad = [s for s in args.set if "=" not in s or not s.startswith("COPILOT_")]
    if bad:
        ap.error(f"--set takes COPILOT_NAME=VALUE, got {bad}")
    if not sys.platform.startswith("linux"):
        sys.exit("serve_memory reads /proc: Linux only")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    log_path = Path(tempfile.gettempdir()) / "serve_memory.server.log"
    report = run(args.sequential, args.burst, args.timeout, args.ready_timeout, log_path,
                 dict(s.split("=", 1) for s in args.set))
    print(json.dumps(report, indent=2))
    if args.out:
        write_json(report, args.out)


if __name__ == "__main__":
    main()
