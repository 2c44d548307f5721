r"""Deletes while others search, against the real API under uvicorn (a benchmark, not a test; issue 46).

    .venv/bin/python -m evals.store_storm --out evals/results/issue46/storm.json

Uploads ``--tickets`` small JSON Lines tickets (``POST /v1/ingest``, folder ``stress``), then for
``--duration`` seconds one client deletes two thirds of them one by one (``DELETE /v1/documents/...``)
while another posts ``/v1/search`` every 0.2 s — the hostile pass's run. The app is the real one over a fresh embedded
store (SQLite FTS5 + embedded Chroma, the real embedding model) with no language model (search, ingest
and delete need none). Both loops stop by themselves at the deadline or when the deletes are done.

Reported: status counts per route (goal: no 5xx other than 503), whether every deleted document is gone
and every other one listed and found by its own text, and ``pragma integrity_check`` of both SQLite files
after the server stopped.
"""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import httpx

log = logging.getLogger(__name__)
KEY = {"Authorization": "Bearer storm"}


def tickets(n: int) -> bytes:
    """``n`` small tickets as JSON Lines (``ST-0`` .. ``ST-{n-1}``), each with words of its own."""
    rows = [{"id": f"ST-{i}", "title": f"ticket {i}", "text": f"xrootd door {i} restarted on dcache pool {i} "
             f"after a hang; marker word storm{i}x"} for i in range(n)]
    return "\n".join(json.dumps(r) for r in rows).encode()


def _found(client: httpx.Client, question: str) -> list[str]:
    """The document ids ``/v1/search`` returns for ``question`` (none when it fails)."""
    r = client.post("/v1/search", json={"question": question, "max_sources": 3})
    return [s["doc_id"] for s in r.json()["sources"]] if r.status_code == 200 else []


def run(n_tickets: int, duration_s: float) -> dict:
    """The storm on a fresh store; the report (see the module docstring)."""
    from copilot.api.app import create_app
    from copilot.api.server import ServerThread
    from copilot.config import Settings
    from copilot.service import CopilotService
    from ingestion.stores.chunk_store import ChunkStore

    data = Path(tempfile.mkdtemp(prefix="opscopilot-storm-"))
    settings = Settings(data_dir=data, api_keys=["storm"], _env_file=None)
    store = ChunkStore(data)
    statuses: dict[str, Counter] = {"delete": Counter(), "search": Counter()}
    errors: list[str] = []
    with ServerThread(create_app(settings, CopilotService(settings, store, None))) as server, \
            httpx.Client(base_url=server.url, headers=KEY, timeout=60) as client:
        r = client.post("/v1/ingest", data={"folder": "stress"},
                        files=[("files", ("big.jsonl", tickets(n_tickets)))])
        job = r.json()
        while job.get("status") in ("queued", "running"):
            time.sleep(0.2)
            job = client.get(f"/v1/ingest/{job['id']}").json()
        log.info("ingest: %s", job.get("status"))
        deadline = time.monotonic() + duration_s
        deleted: list[int] = []

        def deleter() -> None:
            for i in range(n_tickets * 2 // 3):
                if time.monotonic() > deadline:
                    return
                r = client.delete("/v1/documents/" + quote(f"stress/big.jsonl#ST-{i}", safe="/"))
                statuses["delete"][r.status_code] += 1
                if r.status_code == 200:
                    deleted.append(i)
                elif r.status_code >= 500:
                    errors.append(f"delete {i}: {r.status_code} {r.text[:200]}")

        def searcher() -> None:
            i = 0
            while time.monotonic() < deadline and len(deleted) < n_tickets * 2 // 3:
                r = client.post("/v1/search", json={"question": f"xrootd door {i % n_tickets} restarted",
                                                    "max_sources": 3})
                statuses["search"][r.status_code] += 1
                if r.status_code >= 500:
                    errors.append(f"search: {r.status_code} {r.text[:200]}")
                i += 1
                time.sleep(0.2)

        threads = [threading.Thread(target=deleter), threading.Thread(target=searcher)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(duration_s + 120)
        elapsed = time.monotonic() - started
        page = client.get("/v1/documents", params={"limit": 1000})
        listed = {d["doc_id"] for d in page.json()["documents"]} if page.status_code == 200 else set()
        kept = [i for i in range(n_tickets) if i not in set(deleted)]
        gone = all(f"stress/big.jsonl#ST-{i}" not in listed for i in deleted)
        probes = kept[:: max(1, len(kept) // 20)]
        found = sum(1 for i in probes if f"stress/big.jsonl#ST-{i}" in _found(client, f"storm{i}x"))
        probed = len(probes)
    store.close()
    integrity = {}
    for db in (data / "index.sqlite3", data / "chroma" / "chroma.sqlite3"):
        try:
            with sqlite3.connect(db) as conn:
                integrity[db.name] = conn.execute("pragma integrity_check").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            integrity[db.name] = f"{type(exc).__name__}: {exc}"
    return {"tickets": n_tickets, "duration_s": round(elapsed, 1), "deleted": len(deleted),
            "statuses": {k: dict(v) for k, v in statuses.items()},
            "non_503_5xx": sum(c for v in statuses.values() for s, c in v.items() if s >= 500 and s != 503),
            "deleted_gone": gone, "kept_listed": all(f"stress/big.jsonl#ST-{i}" in listed for i in kept),
            "kept_found": f"{found}/{probed}", "integrity": integrity, "errors": errors[:10]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tickets", type=int, default=300)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of deleting and searching")
    ap.add_argument("--out", type=Path, help="write the report here (JSON)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    report = run(args.tickets, args.duration)
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
