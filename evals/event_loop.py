r"""Does ``/healthz`` answer while a hostile request runs? (a benchmark, not a test; issue 46 item 6)

    .venv/bin/python -m evals.event_loop --out evals/results/issue46/event_loop.json

Serves the real app (embedded target model, sample corpus) under uvicorn and sends, one at a time,
the requests the hostile pass found blocking the event loop: a chat request whose earlier
assistant turn is 150,000 (and 40,000) whitespace characters, a ``/v1/ask`` history of 25 turns of
20,000 characters (the documented limits), and ``/v1/responses`` with 150,000 spaces of earlier
input. While each runs, another client asks ``/healthz`` every 0.1 s. Reported per request: its
status and wall time, and the slowest ``/healthz`` answer during it (goal: < 1 s).
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import threading
import time
from pathlib import Path

import httpx

from evals.report import write_json

log = logging.getLogger(__name__)
CORPUS = Path(__file__).parent / "data" / "corpus"


def hostile_requests() -> dict[str, tuple[str, dict]]:
    """Name -> (path, body) of each request."""
    def chat(spaces: int) -> dict:
        return {"model": "opscopilot", "max_tokens": 16, "messages": [
            {"role": "user", "content": "How was the FTS outage fixed?"},
            {"role": "assistant", "content": "x" + " " * spaces + "y"},
            {"role": "user", "content": "and the token?"}]}

    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": "a" + " " * 19_998 + "b"} for i in range(25)]
    return {
        "chat, 150,000-space assistant turn": ("/v1/chat/completions", chat(150_000)),
        "chat, 40,000-space assistant turn": ("/v1/chat/completions", chat(40_000)),
        "ask, 25 history turns of 20,000 characters": ("/v1/ask", {"question": "and the token?",
                                                                   "history": history, "max_new_tokens": 16}),
        "responses, 150,000 spaces of earlier input": ("/v1/responses", {"model": "opscopilot", "max_output_tokens": 16,
                                                                         "input": [
            {"role": "user", "content": "How was the FTS outage fixed?" + " " * 150_000},
            {"role": "user", "content": "and the token?"}]}),
    }


def _probe_health(url: str, stop: threading.Event, worst: list[float]) -> None:
    """Ask ``/healthz`` every 0.1 s until ``stop``; keep the slowest answer's seconds in ``worst[0]``."""
    with httpx.Client(timeout=120) as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.get(url + "/healthz")
            worst[0] = max(worst[0], time.perf_counter() - started)
            stop.wait(0.1)


def run() -> dict:
    """Every request of :func:`hostile_requests` with the health probe beside it; the report."""
    from copilot.api.app import create_app
    from copilot.api.server import ServerThread
    from copilot.config import Settings
    from copilot.service import CopilotService
    from ingestion.pipeline import ingest_paths

    data = Path(tempfile.mkdtemp(prefix="opscopilot-loop-"))
    settings = Settings(data_dir=data, _env_file=None)
    service = CopilotService.from_settings(settings, auto_draft=False)
    ingest_paths([CORPUS], service.store, progress=False)
    service.warm_up()
    rows = []
    with ServerThread(create_app(settings, service)) as server, \
            httpx.Client(base_url=server.url, timeout=600) as client:
        for name, (path, body) in hostile_requests().items():
            stop, worst = threading.Event(), [0.0]
            probe = threading.Thread(target=_probe_health, args=(server.url, stop, worst))
            probe.start()
            started = time.perf_counter()
            r = client.post(path, json=body)
            wall = time.perf_counter() - started
            stop.set()
            probe.join()
            rows.append({"request": name, "status": r.status_code, "wall_s": round(wall, 2),
                         "worst_healthz_s": round(worst[0], 3), "detail": r.text[:160] if r.status_code >= 400 else ""})
            log.info("%s: %d in %.1f s; slowest /healthz %.3f s", name, r.status_code, wall, worst[0])
    service.store.close()
    return {"requests": rows, "healthz_under_1s": all(row["worst_healthz_s"] < 1.0 for row in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the report here (JSON)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    report = run()
    print(json.dumps(report, indent=2))
    if args.out:
        write_json(report, args.out)


if __name__ == "__main__":
    main()
