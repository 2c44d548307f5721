"""Serving many operators at once: the batched server under 1, 2, 4 and 8 concurrent clients.

``copilot eval load`` starts ``copilot serve`` on 127.0.0.1 (or loads ``--url``) and, in one
run, for each load level (closed loop: that many clients, each asking its next question as
soon as its answer is complete) and each speculation mode — ``adaptive`` (γ per request from
the batch's cost), ``off`` (no speculation), ``fixed`` (the n-gram drafter drafts γ every
round) and ``table`` (vLLM-style γ by batch size) — asks the same questions through
``POST /v1/ask`` with ``"stream": true``, the modes interleaved level by level (and in
reverse order on every second repeat). Per cell it reports what the users got: answers per
minute and tokens per second across all clients, p50/p95 answer latency and time to the
first answer text, per-request τ, γ and batch size, and whether each answer is identical to
the one the same question got alone with speculation off (the exactness contract, seen from
the client). An overload phase (16 clients for 60 s, kept up until every refused client has
waited its hint and asked again) then checks the queue: no 5xx, every 503 with a ``Retry-After``
that, once waited, gets the client in (the share admitted on that first retry), and no admitted
stream silent for longer than 15 s (the SSE heartbeats count). A newcomers phase lets
``admitted`` clients stream long answers while ``newcomers`` more arrive one by one, and
reports the admitted streams' gaps between text deltas (inter-token latency, ITL): p50, p95
and the longest, while newcomers prefill (chunked prefill keeps them near one decode round).

Writes JSON, Markdown and a PNG (``--report``). A benchmark, not a test: run it alone on an
idle machine.
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from evals.load_test import ServerProcess, pct

log = logging.getLogger(__name__)

MODES = ("adaptive", "off", "fixed", "table")
LEVELS = (1, 2, 4, 8)


@dataclass
class Answer:
    """One streamed answer as the client saw it. Times in milliseconds."""

    level: int
    mode: str
    question: str
    status: int  # 200, an HTTP error status, or 0 for a connection error / timeout
    latency_ms: float
    ttft_ms: float | None = None
    text: str = ""
    new_tokens: int = 0
    tau: float | None = None
    gamma: float | None = None
    batch: float | None = None
    queue_ms: float | None = None
    prefill_ms: float | None = None
    produced: dict | None = None
    max_gap_s: float = 0.0  # longest silence between received bytes (heartbeats included)
    delta_ms: list[float] | None = None  # when each text delta arrived, from the request's start (ms)
    retry_after: str | None = None
    error: str | None = None


async def ask(client: httpx.AsyncClient, question: str, mode: str, level: int, max_new_tokens: int, max_sources: int,
              fixed_gamma: int, timeout_s: float, first_text: asyncio.Event | None = None,
              headers: dict[str, str] | None = None) -> Answer:
    """Stream one ``/v1/ask`` answer; never raises (errors become an :class:`Answer` with their status).
    ``first_text`` is set once its first text arrived (or it ended without any); ``headers`` are
    sent besides the client's own."""
    body = {"question": question, "stream": True, "max_new_tokens": max_new_tokens, "max_sources": max_sources,
            "speculation": mode}
    if mode == "fixed":
        body["num_speculative_tokens"] = fixed_gamma
    t0 = last = time.perf_counter()
    answer = Answer(level, mode, question, 0, 0.0)
    buffer = ""
    try:
        async with client.stream("POST", "/v1/ask", json=body, timeout=timeout_s, headers=headers) as r:
            answer.status = r.status_code
            if r.status_code != 200:
                answer.retry_after = r.headers.get("retry-after")
                answer.error = (await r.aread()).decode(errors="replace")[:200]
                answer.latency_ms = (time.perf_counter() - t0) * 1000
                return answer
            async for chunk in r.aiter_text():
                now = time.perf_counter()
                answer.max_gap_s = max(answer.max_gap_s, now - last)
                last = now
                buffer += chunk
                while "\n\n" in buffer or "\r\n\r\n" in buffer:
                    sep = "\r\n\r\n" if "\r\n\r\n" in buffer else "\n\n"
                    raw, buffer = buffer.split(sep, 1)
                    _event(answer, raw, t0, now)
                    if first_text is not None and answer.ttft_ms is not None:
                        first_text.set()
    except (httpx.HTTPError, asyncio.TimeoutError) as exc:
        answer.status, answer.error = 0, f"{type(exc).__name__}: {exc}"[:200]
    if first_text is not None:
        first_text.set()
    answer.latency_ms = (time.perf_counter() - t0) * 1000
    return answer


def _event(answer: Answer, raw: str, t0: float, now: float) -> None:
    """Fold one SSE event (``event:`` / ``data:`` lines; comments are heartbeats) into ``answer``."""
    lines = raw.replace("\r", "").split("\n")
    kind = next((line[6:].strip() for line in lines if line.startswith("event:")), "message")
    data = "\n".join(line[5:].lstrip() for line in lines if line.startswith("data:"))
    if not data:
        return
    payload = json.loads(data)
    if kind == "delta" and payload.get("text"):
        answer.delta_ms = (answer.delta_ms or []) + [(now - t0) * 1000]
        if answer.ttft_ms is None:
            answer.ttft_ms = (now - t0) * 1000
    elif kind == "done":
        stats = payload.get("stats", {})
        answer.text = payload.get("answer", "")
        answer.new_tokens = int(stats.get("new_tokens", 0))
        answer.tau, answer.gamma = stats.get("tau"), stats.get("mean_gamma")
        answer.batch, answer.queue_ms = stats.get("mean_batch_size"), stats.get("queue_ms")
        answer.prefill_ms = stats.get("prefill_ms")
        answer.produced = stats.get("produced")
    elif kind == "error":
        answer.status, answer.error = 500, str(payload.get("detail"))[:200]


async def run_cell(client: httpx.AsyncClient, level: int, mode: str, questions: list[str], args) -> tuple[list, float]:
    """``level`` closed-loop clients over ``questions`` (each asked once); the answers and the cell's wall time (s)."""
    todo = list(enumerate(questions))
    answers: list[Answer] = []

    async def client_loop() -> None:
        while todo:
            _, question = todo.pop(0)
            answers.append(await ask(client, question, mode, level, args.max_new_tokens, args.max_sources,
                                     args.fixed_gamma, args.request_timeout))

    t0 = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(level)))
    return answers, time.perf_counter() - t0


def summarise_cell(answers: list[Answer], wall_s: float, solo: dict[str, str]) -> dict:
    """Throughput, latency percentiles, speculation and exactness of one (level, mode) cell."""
    ok = [a for a in answers if a.status == 200]
    same = [a.text == solo[a.question] for a in ok if a.question in solo]
    mean = lambda values: round(statistics.mean(values), 3) if values else None  # noqa: E731
    return {
        "answers": len(ok), "errors": len(answers) - len(ok), "wall_s": round(wall_s, 2),
        "answers_per_min": round(60 * len(ok) / wall_s, 2) if wall_s else None,
        "tokens_per_s": round(sum(a.new_tokens for a in ok) / wall_s, 2) if wall_s else None,
        "latency_ms_p50": pct([a.latency_ms for a in ok], 50), "latency_ms_p95": pct([a.latency_ms for a in ok], 95),
        "ttft_ms_p50": pct([a.ttft_ms for a in ok if a.ttft_ms is not None], 50),
        "ttft_ms_p95": pct([a.ttft_ms for a in ok if a.ttft_ms is not None], 95),
        "tau_mean": mean([a.tau for a in ok if a.tau is not None]),
        "gamma_mean": mean([a.gamma for a in ok if a.gamma is not None]),
        "batch_mean": mean([a.batch for a in ok if a.batch is not None]),
        "identical_to_solo": f"{sum(same)}/{len(same)}" if same else None,
        # the model's prefill passes run one at a time: their share of the cell caps what sharing decode passes gains
        "prefill_share": round(sum(a.prefill_ms or 0.0 for a in ok) / 1000 / wall_s, 3) if wall_s else None,
    }


async def overload(client: httpx.AsyncClient, questions: list[str], args) -> dict:
    """``args.overload_clients`` closed-loop clients for ``args.overload_s`` seconds; each 503
    refused in the phase waits its whole Retry-After (at most ``args.retry_wait_cap_s``) and asks
    the same question again. The others keep asking until every refused client has made that
    retry, so a retry competes with fresh questions as it would under steady load (was it
    admitted?); a refusal after the phase ends that client.

    A refusal reserves a place for who asked what (:mod:`copilot.serving.reservations`): the
    ``Authorization`` header, else the address. All clients here share one address, and two ask
    the same question, so against a server without keys (``args.api_key`` empty) each client
    sends a bearer of its own, as separate operators would have; with a key they share it."""
    deadline = time.monotonic() + args.overload_s
    hard_stop = deadline + args.retry_wait_cap_s
    answers: list[Answer] = []
    first_retries: list[bool] = []  # a refused question asked again after its Retry-After: admitted?
    waiting = 0  # clients sleeping out a Retry-After

    def phase_open() -> bool:
        now = time.monotonic()
        return now < deadline or waiting > 0 and now < hard_stop

    async def client_loop(n: int) -> None:
        nonlocal waiting
        i, retry = n, 0  # retry: how many times this question was refused so far
        caller = None if args.api_key else {"Authorization": f"Bearer load-client-{n}"}
        while retry or phase_open():
            a = await ask(client, questions[i % len(questions)], "adaptive", args.overload_clients,
                          args.max_new_tokens, args.max_sources, args.fixed_gamma, args.request_timeout,
                          headers=caller)
            answers.append(a)
            if retry == 1:
                first_retries.append(a.status == 200)
            if a.status == 503 and time.monotonic() < deadline:  # refused in the phase: wait, ask again
                retry += 1
                waiting += 1
                try:
                    hint = float(a.retry_after) if (a.retry_after or "").isdigit() else 1.0
                    await asyncio.sleep(min(hint, args.retry_wait_cap_s))
                finally:
                    waiting -= 1
            else:
                retry, i = 0, i + 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client_loop(n) for n in range(args.overload_clients)))
    ok = [a for a in answers if a.status == 200]
    return {"clients": args.overload_clients, "duration_s": round(time.perf_counter() - t0, 1),
            "requests": len(answers), "ok": len(ok), "http_503": sum(a.status == 503 for a in answers),
            "http_503_without_retry_after": sum(a.status == 503 and not a.retry_after for a in answers),
            "http_5xx_other": sum(a.status >= 500 and a.status != 503 for a in answers),
            "connection_errors": sum(a.status == 0 for a in answers),
            "retry_after_values": sorted({a.retry_after for a in answers if a.retry_after}),
            "retries_admitted_after_retry_after": f"{sum(first_retries)}/{len(first_retries)}",
            "first_retries_admitted_share": (round(sum(first_retries) / len(first_retries), 3)
                                             if first_retries else None),
            "max_gap_s": round(max((a.max_gap_s for a in ok), default=0.0), 2),
            "latency_ms_p50": pct([a.latency_ms for a in ok], 50)}


async def newcomers(client: httpx.AsyncClient, questions: list[str], args) -> dict:
    """``args.admitted`` clients stream answers of ``args.admitted_tokens`` tokens; once each
    has its first text, ``args.newcomers`` more arrive ``args.newcomer_every_s`` apart. The
    admitted streams' gaps between text deltas after their first text (ms): p50, p95, the
    longest, and p95 ÷ p50."""
    started = [asyncio.Event() for _ in range(args.admitted)]

    async def admitted(n: int) -> Answer:
        return await ask(client, questions[n % len(questions)], "adaptive", args.admitted, args.admitted_tokens,
                         args.max_sources, args.fixed_gamma, args.request_timeout, started[n])

    async def arrivals() -> list[Answer]:
        await asyncio.gather(*(e.wait() for e in started))
        tasks = []
        for i in range(args.newcomers):
            tasks.append(asyncio.create_task(ask(client, questions[(args.admitted + i) % len(questions)], "adaptive",
                                                 args.admitted, args.max_new_tokens, args.max_sources,
                                                 args.fixed_gamma, args.request_timeout)))
            await asyncio.sleep(args.newcomer_every_s)
        return list(await asyncio.gather(*tasks))

    streams = [asyncio.create_task(admitted(n)) for n in range(args.admitted)]
    arrived = await arrivals()
    done = list(await asyncio.gather(*streams))
    gaps = [b - a for s in done for a, b in zip(s.delta_ms or [], (s.delta_ms or [])[1:])]
    p50, p95 = pct(gaps, 50), pct(gaps, 95)
    return {"admitted": args.admitted, "newcomers": args.newcomers, "every_s": args.newcomer_every_s,
            "statuses": sorted({a.status for a in done + arrived}), "gaps": len(gaps), "itl_ms_p50": p50,
            "itl_ms_p95": p95, "itl_ms_max": round(max(gaps), 1) if gaps else None,
            "p95_over_p50": round(p95 / p50, 2) if p50 and p95 else None,
            "newcomer_ttft_ms_p50": pct([a.ttft_ms for a in arrived if a.ttft_ms is not None], 50)}


async def burst(client: httpx.AsyncClient, questions: list[str], args, server_pid: int | None) -> dict:
    """``args.burst`` questions sent at the same instant: their statuses, and the server's peak
    resident memory (``VmHWM``, MiB) before and after when it runs on this machine."""
    before = peak_rss_mib(server_pid)
    answers = await asyncio.gather(*(ask(client, questions[i % len(questions)], "adaptive", args.burst,
                                         args.max_new_tokens, args.max_sources, args.fixed_gamma, args.request_timeout)
                                     for i in range(args.burst)))
    statuses: dict[str, int] = {}
    for a in answers:
        statuses[str(a.status)] = statuses.get(str(a.status), 0) + 1
    return {"requests": args.burst, "statuses": statuses, "peak_rss_mib_before": before,
            "peak_rss_mib_after": peak_rss_mib(server_pid)}


def peak_rss_mib(pid: int | None) -> float | None:
    """A process's peak resident set (``VmHWM`` in ``/proc/PID/status``, MiB); None when unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, TypeError):
        pass
    return None


async def wait_for_draft(client: httpx.AsyncClient, timeout_s: float = 600.0) -> None:
    """Until ``/readyz`` no longer says a draft model is being built (bounded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            status = (await client.get("/readyz", timeout=10)).json().get("draft_model") or ""
        except (httpx.HTTPError, ValueError):
            status = ""
        if not any(word in status for word in ("building", "not started", "attaching")):
            return
        await asyncio.sleep(2.0)


async def run_load(url: str, questions: list[str], args, server_pid: int | None = None) -> dict:
    """Every (level, mode) cell, interleaved; then the overload phase and the burst."""
    limits = httpx.Limits(max_connections=max(max(args.levels), args.overload_clients, args.burst) + 4)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    async with httpx.AsyncClient(base_url=url, limits=limits, headers=headers) as client:
        await wait_for_draft(client)  # a draft model built in the background would share the CPU with the first cells
        await ask(client, questions[0], "adaptive", 1, args.max_new_tokens, args.max_sources, args.fixed_gamma,
                  args.request_timeout)  # warm-up (not counted)
        cells: dict[str, list] = {}
        for rep in range(args.repeats):
            for level in args.levels:
                for mode in (args.modes if rep % 2 == 0 else list(reversed(args.modes))):
                    answers, wall = await run_cell(client, level, mode, questions, args)
                    cells.setdefault(f"{level}|{mode}", []).append((answers, wall))
                    log.info("level %d %s: %d answers in %.1f s", level, mode, len(answers), wall)
        arriving = await newcomers(client, questions, args) if args.newcomers > 0 else None
        over = await overload(client, questions, args) if args.overload_s > 0 else None
        bursted = await burst(client, questions, args, server_pid) if args.burst > 0 else None
    solo = {a.question: a.text for answers, _ in cells.get("1|off", []) for a in answers if a.status == 200}
    table = {}
    for key, runs in cells.items():
        level, mode = key.split("|")
        summaries = [summarise_cell(answers, wall, solo) for answers, wall in runs]
        best = max(summaries, key=lambda s: s["tokens_per_s"] or 0)  # the least disturbed repeat
        table.setdefault(level, {})[mode] = {**best, "repeats_tokens_per_s": [s["tokens_per_s"] for s in summaries]}
    samples = [asdict(a) for runs in cells.values() for answers, _ in runs for a in answers]
    return {"url": url, "levels": list(args.levels), "modes": list(args.modes), "questions": len(questions),
            "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "cells": table,
            "newcomers": arriving, "overload": over, "burst": bursted,
            "goals": goals(table, over, args), "samples": samples}


def goals(cells: dict, over: dict | None, args) -> dict:
    """The issue's goals as measured ratios (``None`` where a cell is missing)."""
    def cell(level: int, mode: str) -> dict | None:
        return cells.get(str(level), {}).get(mode)

    top, one = cell(max(args.levels), "adaptive"), cell(1, "adaptive")
    out: dict = {}
    if top and one:
        out["tokens_per_s_top_vs_one_at_a_time"] = round(top["tokens_per_s"] / one["tokens_per_s"], 2)
        out["p50_latency_top_vs_lone"] = round(top["latency_ms_p50"] / one["latency_ms_p50"], 2)
    vs_best = {}
    for level in args.levels:
        mine = cell(level, "adaptive")
        others = [cell(level, m) for m in args.modes if m != "adaptive" and cell(level, m)]
        if mine and others:
            vs_best[level] = round(mine["tokens_per_s"] / max(o["tokens_per_s"] for o in others), 3)
    out["adaptive_vs_best_other_by_level"] = vs_best
    exact = [c["identical_to_solo"] for level in cells.values() for c in level.values() if c["identical_to_solo"]]
    got = sum(int(e.split("/")[0]) for e in exact)
    total = sum(int(e.split("/")[1]) for e in exact)
    out["identical_to_solo"] = f"{got}/{total}"
    if over:
        out["overload_no_5xx"] = over["http_5xx_other"] == 0 and over["connection_errors"] == 0
        out["overload_every_503_has_retry_after"] = over["http_503_without_retry_after"] == 0
        out["overload_max_gap_s"] = over["max_gap_s"]
        out["overload_first_retry_admitted"] = over["first_retries_admitted_share"]
    return out


def load_markdown(report: dict) -> str:
    """The goals, then one table per metric: levels × modes."""
    g = report["goals"]
    lines = ["# Serving under load", "", *[f"- {k}: {v}" for k, v in report.get("hardware", {}).items()],
             f"- {report['questions']} questions per cell, {report['max_new_tokens']} new tokens at most, "
             f"{report['repeats']} repeat(s) (best tokens/s kept), modes interleaved per level", "",
             "## Goals", "", "| goal | measured |", "|---|---|",
             f"| tokens/s at {max(report['levels'])} clients ÷ one at a time (≥ 3) | "
             f"{g.get('tokens_per_s_top_vs_one_at_a_time')} |",
             f"| p50 latency at {max(report['levels'])} clients ÷ a lone request's (≤ 2.5) | "
             f"{g.get('p50_latency_top_vs_lone')} |",
             "| adaptive ÷ best of the other modes, tokens/s, per level (≥ 1 everywhere, ≥ 1.2 somewhere) | "
             + ", ".join(f"{k}: {v}" for k, v in g.get("adaptive_vs_best_other_by_level", {}).items()) + " |",
             f"| answers identical to the same question alone with speculation off | {g.get('identical_to_solo')} |"]
    over = report.get("overload")
    if over:
        lines += [f"| overload ({over['clients']} clients × {over['duration_s']} s): no 5xx | "
                  f"{g.get('overload_no_5xx')} ({over['http_503']} × 503, Retry-After {over['retry_after_values']}, "
                  f"retries admitted {over['retries_admitted_after_retry_after']}) |",
                  f"| overload: refused requests admitted on their first retry after waiting the hint (≥ 80 %) | "
                  f"{over['retries_admitted_after_retry_after']} |",
                  f"| overload: longest silence in an admitted stream (≤ 15 s) | {over['max_gap_s']} s |"]
    arriving = report.get("newcomers")
    if arriving:
        lines.append(f"| admitted streams' gap between text deltas while {arriving['newcomers']} newcomers arrive "
                     f"{arriving['every_s']} s apart: p95 ÷ p50 (≤ 2.5); p50, p95, longest (ms) | "
                     f"{arriving['p95_over_p50']}; {arriving['itl_ms_p50']}, {arriving['itl_ms_p95']}, "
                     f"{arriving['itl_ms_max']} |")
    burst_ = report.get("burst")
    if burst_:
        lines.append(f"| {burst_['requests']} questions at once: statuses, server peak RSS before → after (MiB) | "
                     f"{burst_['statuses']}, {burst_['peak_rss_mib_before']} → {burst_['peak_rss_mib_after']} |")
    metrics = [("tokens_per_s", "tokens/s (all clients)"), ("answers_per_min", "answers/min"),
               ("latency_ms_p50", "p50 latency (ms)"), ("latency_ms_p95", "p95 latency (ms)"),
               ("ttft_ms_p50", "p50 time to first text (ms)"), ("tau_mean", "mean τ per request"),
               ("gamma_mean", "mean γ per request"), ("batch_mean", "mean batch size"),
               ("prefill_share", "share of the wall time spent in prefill passes"),
               ("identical_to_solo", "identical to solo")]
    for key, title in metrics:
        lines += ["", f"## {title}", "", "| clients | " + " | ".join(report["modes"]) + " |",
                  "|---|" + "---|" * len(report["modes"])]
        for level in report["levels"]:
            row = report["cells"].get(str(level), {})
            lines.append(f"| {level} | " + " | ".join(str(row.get(m, {}).get(key, "-")) for m in report["modes"])
                         + " |")
    return "\n".join(lines) + "\n"


def load_plot(report: dict, path: Path) -> Path:
    """Tokens/s and p50 latency against clients, one line per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for mode in report["modes"]:
        levels = [lv for lv in report["levels"] if mode in report["cells"].get(str(lv), {})]
        cells = [report["cells"][str(lv)][mode] for lv in levels]
        ax1.plot(levels, [c["tokens_per_s"] for c in cells], marker="o", label=mode)
        ax2.plot(levels, [c["latency_ms_p50"] / 1000 for c in cells], marker="o", label=mode)
    ax1.set(xlabel="concurrent clients", ylabel="tokens/s (all clients)", xscale="log", xticks=report["levels"])
    ax2.set(xlabel="concurrent clients", ylabel="p50 answer latency (s)", xscale="log", xticks=report["levels"])
    for ax in (ax1, ax2):
        ax.set_xticklabels([str(lv) for lv in report["levels"]])
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def start_server(args, out_dir: Path, corpus: Path, data_dir: Path) -> ServerProcess:
    """``copilot serve`` on a free port over ``data_dir`` (``corpus`` ingested when empty), with
    the batch and queue sizes of the eval, and no prefix reuse: the cells ask the same questions
    again, which would then skip their prefill and flatter the later cells."""
    return ServerProcess.launch({"COPILOT_MAX_BATCH": str(args.max_batch), "COPILOT_QUEUE_SIZE": str(args.queue_size),
                                 "COPILOT_DATA_DIR": str(data_dir), "COPILOT_PREFIX_CACHE": "0",
                                 "COPILOT_MAX_NEW_TOKENS_CAP": str(max(1024, args.max_new_tokens))},
                                args.ready_timeout, out_dir / "load.server.log", corpus)


@dataclass
class LoadArgs:
    """The knobs of :func:`run_load` (``copilot eval load`` options)."""

    levels: tuple[int, ...] = LEVELS
    modes: tuple[str, ...] = MODES
    questions: int = 8
    max_new_tokens: int = 32
    max_sources: int = 3
    fixed_gamma: int = 4
    repeats: int = 1
    overload_clients: int = 16
    overload_s: float = 60.0
    burst: int = 100
    admitted: int = 4
    admitted_tokens: int = 96
    newcomers: int = 4
    newcomer_every_s: float = 2.0
    max_batch: int = 8
    queue_size: int = 4
    request_timeout: float = 300.0
    ready_timeout: float = 900.0
    api_key: str = ""
    retry_wait_cap_s: float = 600.0


def questions_from(path: Path, n: int) -> list[str]:
    """The first ``n`` answerable questions of a questions.jsonl file."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["question"] for r in rows if r.get("answerable", True)][:n]

