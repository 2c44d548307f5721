r"""Bounded load test of the web API on 127.0.0.1 (a benchmark, not a test).

    .venv/bin/python -m evals.load_test                     # starts `copilot serve` itself
    .venv/bin/python -m evals.load_test --url http://127.0.0.1:8000 --api-key KEY
    .venv/bin/python -m evals.load_test --url http://127.0.0.1:8001,http://127.0.0.1:8002   # two replicas

Phases, both bounded by a request count *and* a time limit:

1. sequential (``--sequential`` requests, one at a time): the uncontended API overhead;
2. concurrent (``--clients`` clients for ``--duration`` seconds, at most ``--max-requests``):
   each client streams ``/v1/chat/completions`` through the official ``openai`` client
   (which parses the SSE stream), measures TTFT (first content token) and end-to-end
   latency, and on a 503 waits the Retry-After it was given. With several ``--url``\ s
   (replicas of one store), client n talks to replica n mod N, as a round-robin load
   balancer would spread connections.

Reported: 5xx other than 503 (goal: 0), 503s and whether each had Retry-After, p50/p95
latency and TTFT, throughput, and API overhead = end-to-end − decoding time
(``stats.total_ms``), both raw and without the time spent waiting in the generation queue
(``stats.queue_ms``; with one model and 8 clients, most of the raw figure is queueing),
and answers per minute over the concurrent phase.
A self-started server gets ``--queue-size`` (default 4 < 8 clients, so the full-queue path
is exercised). Results go to ``--out`` (JSON) and the log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import openai

log = logging.getLogger("evals.load_test")

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = REPO / "evals" / "data" / "questions.jsonl"


@dataclass
class Sample:
    """One request's outcome. Times in milliseconds."""

    phase: str
    status: int  # 200, an HTTP error status, or 0 for a connection error / timeout
    latency_ms: float
    ttft_ms: float | None = None
    total_ms: float | None = None  # engine wall time (prefill + decode)
    queue_ms: float | None = None
    retrieval_ms: float | None = None
    new_tokens: int = 0
    retry_after: str | None = None
    error: str | None = None


@dataclass
class Report:
    """What :func:`run` measured (JSON-serialisable with ``asdict``)."""

    url: str  # comma-separated when several replicas were loaded
    clients: int
    duration_s: float
    max_new_tokens: int
    max_sources: int
    summary: dict = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)


def pct(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100, nearest-rank on sorted data), None for no data."""
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return round(ordered[index], 1)


async def one_request(client: openai.AsyncOpenAI, model: str, question: str, max_new_tokens: int, max_sources: int,
                      phase: str, timeout_s: float) -> Sample:
    """Stream one chat completion; never raises (errors become a Sample with their status)."""
    t0 = time.perf_counter()
    ttft = None
    stats: dict = {}
    try:
        stream = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": question}], max_tokens=max_new_tokens, stream=True,
            extra_body={"max_sources": max_sources}, timeout=timeout_s)
        async for chunk in stream:
            if ttft is None and chunk.choices and chunk.choices[0].delta.content:
                ttft = (time.perf_counter() - t0) * 1000
            extra = chunk.model_extra or {}
            if extra.get("stats"):
                stats = extra["stats"]
    except openai.APIStatusError as exc:
        return Sample(phase, exc.status_code, (time.perf_counter() - t0) * 1000,
                      retry_after=exc.response.headers.get("retry-after"), error=str(exc)[:200])
    except (openai.APIConnectionError, openai.APITimeoutError, httpx.HTTPError) as exc:
        return Sample(phase, 0, (time.perf_counter() - t0) * 1000, error=f"{type(exc).__name__}: {exc}"[:200])
    latency = (time.perf_counter() - t0) * 1000
    return Sample(phase, 200, latency, ttft, stats.get("total_ms"), stats.get("queue_ms"), stats.get("retrieval_ms"),
                  int(stats.get("new_tokens", 0)))


async def load(urls: list[str], api_key: str, model: str, questions: list[str],
               args: argparse.Namespace) -> tuple[list[Sample], float]:
    """Run the sequential phase against the first of ``urls``, then the concurrent phase with
    client n on ``urls[n % len(urls)]``; returns the samples and the concurrent phase's wall time (s)."""
    samples: list[Sample] = []
    limits = httpx.Limits(max_connections=args.clients + 2)
    replicas = [openai.AsyncOpenAI(base_url=url + "/v1", api_key=api_key, max_retries=0,
                                   http_client=httpx.AsyncClient(limits=limits, timeout=args.request_timeout))
                for url in urls]
    try:
        client = replicas[0]
        for i in range(args.sequential):
            samples.append(await one_request(client, model, questions[i % len(questions)], args.max_new_tokens,
                                             args.max_sources, "sequential", args.request_timeout))
        started = time.monotonic()
        deadline = started + args.duration
        budget = {"left": args.max_requests}
        rng = random.Random(0)

        async def worker(n: int) -> None:
            order = questions[:]
            rng.shuffle(order)
            i = n
            mine = replicas[n % len(replicas)]
            while time.monotonic() < deadline and budget["left"] > 0:
                budget["left"] -= 1
                sample = await one_request(mine, model, order[i % len(order)], args.max_new_tokens, args.max_sources,
                                           "concurrent", args.request_timeout)
                samples.append(sample)
                i += 1
                if sample.status == 503:  # back off as told, never past the deadline
                    wait = float(sample.retry_after) if (sample.retry_after or "").isdigit() else 1.0
                    await asyncio.sleep(max(0.0, min(wait, deadline - time.monotonic())))
                elif sample.status != 200:
                    await asyncio.sleep(0.5)

        tasks = [asyncio.create_task(worker(n)) for n in range(args.clients)]
        # in-flight requests may finish after the deadline, but not later than one request timeout
        done, pending = await asyncio.wait(tasks, timeout=args.duration + args.request_timeout + 5)
        for task in pending:
            task.cancel()
        wall = time.monotonic() - started
        log.info("concurrent phase: %d requests in %.1f s", sum(s.phase == "concurrent" for s in samples), wall)
    finally:
        for replica in replicas:
            await replica.close()
    return samples, wall


def summarise(samples: list[Sample], wall_s: float) -> dict:
    """Percentiles and counts per phase."""
    out: dict = {}
    for phase in ("sequential", "concurrent"):
        mine = [s for s in samples if s.phase == phase]
        ok = [s for s in mine if s.status == 200]
        overhead_raw = [s.latency_ms - s.total_ms for s in ok if s.total_ms is not None]
        overhead = [s.latency_ms - s.total_ms - (s.queue_ms or 0.0) for s in ok if s.total_ms is not None]
        out[phase] = {
            "requests": len(mine),
            "ok": len(ok),
            "http_503": sum(s.status == 503 for s in mine),
            "http_503_without_retry_after": sum(s.status == 503 and not s.retry_after for s in mine),
            "http_5xx_other": sum(s.status >= 500 and s.status != 503 for s in mine),
            "http_4xx": sum(400 <= s.status < 500 for s in mine),
            "connection_errors": sum(s.status == 0 for s in mine),
            "latency_ms_p50": pct([s.latency_ms for s in ok], 50),
            "latency_ms_p95": pct([s.latency_ms for s in ok], 95),
            "ttft_ms_p50": pct([s.ttft_ms for s in ok if s.ttft_ms is not None], 50),
            "ttft_ms_p95": pct([s.ttft_ms for s in ok if s.ttft_ms is not None], 95),
            "decode_total_ms_p50": pct([s.total_ms for s in ok if s.total_ms is not None], 50),
            "queue_ms_p50": pct([s.queue_ms for s in ok if s.queue_ms is not None], 50),
            "retrieval_ms_p50": pct([s.retrieval_ms for s in ok if s.retrieval_ms is not None], 50),
            "api_overhead_ms_p50": pct(overhead, 50),
            "api_overhead_ms_p95": pct(overhead, 95),
            "api_overhead_incl_queue_ms_p50": pct(overhead_raw, 50),
            "new_tokens_mean": round(statistics.mean([s.new_tokens for s in ok]), 1) if ok else None,
        }
    conc = [s for s in samples if s.phase == "concurrent" and s.status == 200]
    out["concurrent"]["throughput_req_s"] = round(len(conc) / wall_s, 3) if wall_s else None
    out["concurrent"]["answers_per_min"] = round(60 * len(conc) / wall_s, 1) if wall_s else None
    out["concurrent"]["throughput_tokens_s"] = round(sum(s.new_tokens for s in conc) / wall_s, 1) if wall_s else None
    all_5xx = sum(s.status >= 500 and s.status != 503 for s in samples)
    bad_503 = sum(s.status == 503 and not s.retry_after for s in samples)
    out["checks"] = {"zero_5xx_besides_503": all_5xx == 0, "every_503_has_retry_after": bad_503 == 0,
                     "api_overhead_p50_under_50ms": (out["sequential"]["api_overhead_ms_p50"] or 1e9) < 50}
    return out


class ServerProcess:
    """``copilot serve`` in a subprocess on 127.0.0.1 (its own process: no GIL shared with the clients)."""

    def __init__(self, port: int, env: dict[str, str], ready_timeout_s: float, log_path: Path,
                 corpus: Path = REPO / "evals" / "data" / "corpus") -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.ready_timeout_s = ready_timeout_s
        self.log_file = open(log_path, "w")
        cmd = [sys.executable, "-c", "from copilot.cli.main import app; app()", "serve", "--host", "127.0.0.1",
               "--port", str(port), "--ingest-if-empty", str(corpus)]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=self.log_file, stderr=subprocess.STDOUT)

    @classmethod
    def launch(cls, settings: dict[str, str], ready_timeout_s: float, log_path: Path,
               corpus: Path = REPO / "evals" / "data" / "corpus") -> "ServerProcess":
        """Start one on a free port with ``settings`` (``COPILOT_*`` values) over this process's
        environment, offline and without API keys, and wait until it is ready.

        Raises:
            RuntimeError: as :meth:`wait_ready` (the server is stopped).
        """
        from copilot.api.server import free_port

        env = {**os.environ, "HF_HUB_OFFLINE": "1", **settings}
        for name in ("COPILOT_API_KEYS", "COPILOT_REQUIRE_KEY_FOR_ASK"):
            env.pop(name, None)
        server = cls(free_port(), env, ready_timeout_s, log_path, corpus)
        log.info("starting a server on %s (log: %s)", server.url, server.log_file.name)
        try:
            server.wait_ready()
        except BaseException:
            server.stop()
            raise
        return server

    def wait_ready(self) -> None:
        """Poll ``/readyz`` until 200 (bounded).

        Raises:
            RuntimeError: the server exited or was not ready in time (see its log).
        """
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; see {self.log_file.name}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"server not ready after {self.ready_timeout_s} s; see {self.log_file.name}")

    def stop(self) -> None:
        """Terminate (then kill after 15 s)."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.log_file.close()


def main(argv: list[str] | None = None) -> int:
    """Run the load test; exit status 1 when a check failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server, or several replicas of one store comma-separated "
                        "(default: start `copilot serve` on a free port)")
    parser.add_argument("--api-key", default=os.environ.get("COPILOT_LOAD_API_KEY", "none"))
    parser.add_argument("--model", default="opscopilot")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--duration", type=float, default=60.0, help="concurrent phase length (s)")
    parser.add_argument("--max-requests", type=int, default=500, help="concurrent phase request cap")
    parser.add_argument("--sequential", type=int, default=5, help="requests in the sequential phase")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-sources", type=int, default=3)
    parser.add_argument("--request-timeout", type=float, default=120.0, help="per request (s)")
    parser.add_argument("--queue-size", type=int, default=4, help="queue size of a self-started server")
    parser.add_argument("--ready-timeout", type=float, default=600.0, help="wait for a self-started server (s)")
    parser.add_argument("--out", type=Path, default=REPO / "evals" / "out" / "load_test.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)

    questions = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines() if line.strip()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    server = None
    url = args.url
    if url is None:
        server = ServerProcess.launch({"COPILOT_QUEUE_SIZE": str(args.queue_size), "COPILOT_PREFIX_CACHE": "0",
                                       "COPILOT_MAX_NEW_TOKENS_CAP": str(max(1024, args.max_new_tokens))},
                                      args.ready_timeout, args.out.with_suffix(".server.log"))
        url = server.url
    try:
        urls = [u.strip().rstrip("/") for u in url.split(",") if u.strip()]
        samples, conc_wall = asyncio.run(load(urls, args.api_key, args.model, questions, args))
        metrics = httpx.get(urls[0] + "/metrics", timeout=10).text if server else None
    finally:
        if server is not None:
            server.stop()
    report = Report(url, args.clients, args.duration, args.max_new_tokens, args.max_sources,
                    summarise(samples, conc_wall), samples)
    data = asdict(report)
    if metrics:
        data["server_metrics"] = [line for line in metrics.splitlines()
                                  if line.startswith(("copilot_generations_total", "copilot_queue_rejections_total",
                                                      "copilot_generated_tokens_total"))]
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    log.info("summary: %s", json.dumps(report.summary, indent=2))
    log.info("written to %s", args.out)
    return 0 if all(report.summary["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
