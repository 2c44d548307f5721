"""Past incidents for alerts (issue 45, item 1): Alertmanager notifications (``evals/data/alerts/``)
posted to ``POST /v1/alerts/alertmanager`` of one server (the default model, the sample corpus
ingested into a fresh store), each kept answer scored:

- an alert whose past fix is in the corpus: the fix's literal in the answer, and its source among
  the answer's sources (shown) and cited by support; a "not found" there is a false one;
- an alert with no history: answered "not found" (``not_found: true``).

    python -m evals.alert_eval --out evals/results/issue45/alerts.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from evals.report import write_json

ROOT = Path(__file__).resolve().parents[1]


def _score(case: dict, kept: dict) -> dict:
    """One alert's row of the report."""
    answer = kept.get("answer") or {}
    text = answer.get("answer", "")
    shown = [s["doc_id"] for s in answer.get("sources", [])]
    supported = [s["doc_id"] for s in answer.get("sources", []) if s.get("supports") or s.get("cited")]
    row = {"id": case["id"], "history": case["history"], "state": kept.get("state"), "question": kept.get("question"),
           "not_found": bool(answer.get("not_found")), "answer": text, "sources": shown,
           "answer_s": kept.get("answer_s"), "error": kept.get("error")}
    if case["history"]:
        row.update(literal=case["fix_span"] in text, source_shown=case["source"] in shown,
                   source_cited=case["source"] in supported)
    return row


def run(alerts_file: Path, corpus: Path) -> dict:
    """Post every notification, wait for every answer (10 min at most), score them."""
    from copilot.api.app import create_app
    from copilot.api.server import ServerThread
    from copilot.config import Settings
    from copilot.service import CopilotService
    from ingestion.pipeline import ingest_paths

    cases = [json.loads(line) for line in alerts_file.open() if line.strip()]
    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="opscopilot-alerts-")), _env_file=None)
    service = CopilotService.from_settings(settings, auto_draft=False)
    ingest_paths([corpus], service.store, progress=False)
    kept: dict[str, dict] = {}
    with ServerThread(create_app(settings, service)) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        started = time.perf_counter()
        for case in cases:
            r = c.post("/v1/alerts/alertmanager", json=case["payload"])
            r.raise_for_status()
        fingerprints = {case["id"]: case["payload"]["alerts"][0]["fingerprint"] for case in cases}
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and len(kept) < len(cases):
            for case_id, fingerprint in fingerprints.items():
                if case_id not in kept:
                    row = c.get(f"/v1/alerts/{fingerprint}").json()
                    if row.get("state") != "answering":
                        kept[case_id] = row
            time.sleep(0.5)
        wall_s = time.perf_counter() - started
    rows = [_score(case, kept.get(case["id"], {"state": "timeout"})) for case in cases]
    history = [r for r in rows if r["history"]]
    none = [r for r in rows if not r["history"]]
    times = [r["answer_s"] for r in rows if r["answer_s"] is not None]
    return {
        "model": settings.target_model, "alerts": len(rows), "with_history": len(history), "without": len(none),
        "literal": f"{sum(r['literal'] for r in history)}/{len(history)}",
        "source_shown": f"{sum(r['source_shown'] for r in history)}/{len(history)}",
        "source_cited_by_support": f"{sum(r['source_cited'] for r in history)}/{len(history)}",
        "false_not_found": f"{sum(r['not_found'] for r in history)}/{len(history)}",
        "not_found_without_history": f"{sum(r['not_found'] for r in none)}/{len(none)}",
        "failed": sum(r["state"] != "answered" for r in rows),
        "answer_s_median": round(statistics.median(times), 2) if times else None, "wall_s": round(wall_s, 1),
        "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alerts", type=Path, default=ROOT / "evals/data/alerts/alerts.jsonl")
    ap.add_argument("--corpus", type=Path, default=ROOT / "evals/data/corpus")
    ap.add_argument("--out", type=Path, help="write the report here (JSON)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    report = run(args.alerts, args.corpus)
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=2))
    if args.out:
        write_json(report, args.out)


if __name__ == "__main__":
    main()
