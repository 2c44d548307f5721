"""MCP ``ask`` = ``POST /v1/ask`` (issue 45, item 2): every sample question asked both ways of one
server (the default model, the sample corpus ingested into a fresh store), through the MCP SDK's
own client over streamable HTTP and through the route; the answer, sources, citations, quotes and
checks compared field by field.

    python -m evals.mcp_parity --out evals/results/issue45/mcp_parity.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
import time
from pathlib import Path

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from evals.report import write_json

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("answer", "sources", "cited", "supported", "quotes", "unverified", "not_found", "destructive")


async def _mcp_answers(url: str, questions: list[str]) -> list[dict]:
    """Each question's ``ask`` tool result (structured), over one MCP connection."""
    out = []
    async with httpx2.AsyncClient(timeout=600) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
            for question in questions:
                result = await client.call_tool("ask", {"question": question})
                out.append({"error": result.content[0].text} if result.is_error else result.structured_content)
    return out


def run(questions_file: Path, corpus: Path, limit: int | None) -> dict:
    """Ask each question both ways; the report (per question: equal, or the differing fields)."""
    from copilot.api.app import create_app
    from copilot.api.server import ServerThread
    from copilot.config import Settings
    from copilot.service import CopilotService
    from ingestion.pipeline import ingest_paths

    questions = [json.loads(line)["question"] for line in questions_file.open() if line.strip()][:limit]
    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="opscopilot-mcp-")), _env_file=None)
    service = CopilotService.from_settings(settings, auto_draft=False)
    ingest_paths([corpus], service.store, progress=False)
    rows = []
    with ServerThread(create_app(settings, service)) as server:
        started = time.perf_counter()
        via_mcp = asyncio.run(_mcp_answers(server.url, questions))
        mcp_s = time.perf_counter() - started
        started = time.perf_counter()
        via_api = [httpx.post(server.url + "/v1/ask", json={"question": q}, timeout=600).json() for q in questions]
        api_s = time.perf_counter() - started
    for question, mcp, api in zip(questions, via_mcp, via_api):
        differ = [f for f in FIELDS if mcp.get(f) != api.get(f)]
        rows.append({"question": question, "equal": not differ, "differing_fields": differ,
                     "not_found": api.get("not_found"), "mcp_error": mcp.get("error")})
    equal = sum(r["equal"] for r in rows)
    return {"model": settings.target_model, "questions": len(rows), "equal": equal,
            "equal_share": round(equal / max(len(rows), 1), 4), "fields_compared": list(FIELDS),
            "mcp_wall_s": round(mcp_s, 1), "api_wall_s": round(api_s, 1), "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=Path, default=ROOT / "evals/data/questions.jsonl")
    ap.add_argument("--corpus", type=Path, default=ROOT / "evals/data/corpus")
    ap.add_argument("--limit", type=int, default=None, help="the first N questions only")
    ap.add_argument("--out", type=Path, help="write the report here (JSON)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    report = run(args.questions, args.corpus, args.limit)
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=2))
    if args.out:
        write_json(report, args.out)


if __name__ == "__main__":
    main()
