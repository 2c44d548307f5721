r"""Deletes while others search, and a six-client storm, against the real API under uvicorn (a
benchmark, not a test; issue 46).

    .venv/bin/python -m evals.store_storm --out evals/results/issue46/storm.json
    .venv/bin/python -m evals.store_storm --clients 6 --duration 90 --out evals/results/issue46/storm6.json

Uploads ``--tickets`` small JSON Lines tickets (``POST /v1/ingest``, folder ``stress``), then for
``--duration`` seconds:

- ``--clients 2`` (the hostile pass's first run): one client deletes two thirds of them one by one
  (``DELETE /v1/documents/...``) while another posts ``/v1/search`` every 0.2 s;
- ``--clients 6`` (its second run): as above, plus one client uploading a new three-ticket file every
  second (folder ``uploads``), one listing documents every second, and two asking questions
  (``/v1/ask``, 24-token answers from the embedded target model, loaded for this run).

The app is the real one over a fresh embedded store (SQLite FTS5 + embedded Chroma, the real
embedding model). Every loop stops by itself at the deadline (the deleter also when its deletes are
done).

Reported: status counts per route (goal: no 5xx other than 503), the ingest jobs' end states (goal:
all ``succeeded``), whether every deleted document is gone and every listed one found by its own
marker word, and ``pragma integrity_check`` of both SQLite files after the server stopped.
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

from evals.report import write_json

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


def _marker(doc_id: str) -> str:
    """The marker word of a stored ticket: ``storm{i}x`` (stress) or ``up{k}n{j}x`` (uploads)."""
    key = doc_id.rsplit("#", 1)[1]
    return f"storm{key[3:]}x" if key.startswith("ST-") else f"up{key[3:].replace('-', 'n')}x"


def run(n_tickets: int, duration_s: float, clients: int = 2) -> dict:
    """The storm on a fresh store; the report (see the module docstring)."""
    from copilot.api.app import create_app
    from copilot.api.server import ServerThread
    from copilot.config import Settings
    from copilot.service import CopilotService

    data = Path(tempfile.mkdtemp(prefix="opscopilot-storm-"))
    settings = Settings(data_dir=data, api_keys=["storm"], _env_file=None)
    service = CopilotService.from_settings(settings, load_models=clients > 2, auto_draft=False)
    statuses: dict[str, Counter] = {name: Counter() for name in ("delete", "search", "upload", "list", "ask")}
    errors: list[str] = []
    with ServerThread(create_app(settings, service)) as server, \
            httpx.Client(base_url=server.url, headers=KEY, timeout=300) as client:
        r = client.post("/v1/ingest", data={"folder": "stress"},
                        files=[("files", ("big.jsonl", tickets(n_tickets)))])
        jobs = [r.json()["id"]]
        _wait(client, jobs)
        deadline = time.monotonic() + duration_s
        deleted: list[int] = []

        def record(route: str, r: httpx.Response, what: str) -> None:
            statuses[route][r.status_code] += 1
            if r.status_code >= 500 and r.status_code != 503:
                errors.append(f"{route} {what}: {r.status_code} {r.text[:200]}")

        def deleter() -> None:
            for i in range(n_tickets * 2 // 3):
                if time.monotonic() > deadline:
                    return
                r = client.delete("/v1/documents/" + quote(f"stress/big.jsonl#ST-{i}", safe="/"))
                record("delete", r, str(i))
                if r.status_code == 200:
                    deleted.append(i)

        def searcher() -> None:
            i = 0
            while time.monotonic() < deadline:
                record("search", client.post("/v1/search", json={"question": f"xrootd door {i % n_tickets} restarted",
                                                                 "max_sources": 3}), str(i))
                i += 1
                time.sleep(0.2)

        def uploader() -> None:
            k = 0
            while time.monotonic() < deadline:
                rows = [{"id": f"UP-{k}-{j}", "title": f"upload {k}", "text": f"gridftp mover {k} stalled; "
                         f"restarted it. marker word up{k}n{j}x"} for j in range(3)]
                r = client.post("/v1/ingest", data={"folder": "uploads"}, files=[(
                    "files", (f"up-{k}.jsonl", "\n".join(json.dumps(row) for row in rows).encode()))])
                record("upload", r, str(k))
                if r.status_code == 202:
                    jobs.append(r.json()["id"])
                k += 1
                time.sleep(1.0)

        def lister() -> None:
            while time.monotonic() < deadline:
                record("list", client.get("/v1/documents", params={"limit": 100}), "")
                time.sleep(1.0)

        def asker(n: int) -> None:
            i = n
            while time.monotonic() < deadline:
                record("ask", client.post("/v1/ask", json={"question": f"How was xrootd door {i % n_tickets} fixed?",
                                                           "max_new_tokens": 24}), str(i))
                i += 2

        workers = [deleter, searcher] + ([uploader, lister, lambda: asker(0), lambda: asker(1)] if clients > 2 else [])
        threads = [threading.Thread(target=w) for w in workers]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(duration_s + 300)
        elapsed = time.monotonic() - started
        job_states = Counter(_wait(client, jobs))
        listed = _all_listed(client)
        stress_kept = [i for i in range(n_tickets) if i not in set(deleted)]
        gone = all(f"stress/big.jsonl#ST-{i}" not in listed for i in deleted)
        probes = sorted(listed)[:: max(1, len(listed) // 40)]
        found = sum(1 for doc_id in probes if doc_id in _found(client, _marker(doc_id)))
    service.store.close()
    integrity = {}
    for db in (data / "index.sqlite3", data / "chroma" / "chroma.sqlite3"):
        try:
            with sqlite3.connect(db) as conn:
                integrity[db.name] = conn.execute("pragma integrity_check").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            integrity[db.name] = f"{type(exc).__name__}: {exc}"
    return {"clients": len(workers), "tickets": n_tickets, "duration_s": round(elapsed, 1), "deleted": len(deleted),
            "statuses": {k: dict(v) for k, v in statuses.items() if v},
            "non_503_5xx": sum(c for v in statuses.values() for s, c in v.items() if s >= 500 and s != 503),
            "ingest_jobs": dict(job_states), "listed": len(listed), "deleted_gone": gone,
            "stress_kept_listed": all(f"stress/big.jsonl#ST-{i}" in listed for i in stress_kept),
            "listed_found": f"{found}/{len(probes)}", "integrity": integrity, "errors": errors[:10]}


def _wait(client: httpx.Client, jobs: list[str], limit_s: float = 600.0) -> list[str]:
    """The end state of each ingest job (polled every 0.2 s for ``limit_s`` at most; ``timeout`` past it)."""
    deadline, states = time.monotonic() + limit_s, []
    for job_id in jobs:
        state = "queued"
        while state in ("queued", "running") and time.monotonic() < deadline:
            state = client.get(f"/v1/ingest/{job_id}").json().get("status", "unknown")
            if state in ("queued", "running"):
                time.sleep(0.2)
        states.append(state if state not in ("queued", "running") else "timeout")
    return states


def _all_listed(client: httpx.Client) -> set[str]:
    """Every document id ``GET /v1/documents`` lists (paged)."""
    out: set[str] = set()
    while True:
        page = client.get("/v1/documents", params={"limit": 1000, "offset": len(out)}).json()
        out.update(d["doc_id"] for d in page["documents"])
        if not page["documents"] or len(out) >= page["total"]:
            return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tickets", type=int, default=300)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of deleting and searching")
    ap.add_argument("--clients", type=int, choices=(2, 6), default=2, help="2: delete + search; 6: also upload, "
                    "list and two asking")
    ap.add_argument("--out", type=Path, help="write the report here (JSON)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    report = run(args.tickets, args.duration, args.clients)
    print(json.dumps(report, indent=2))
    if args.out:
        write_json(report, args.out)


if __name__ == "__main__":
    main()
