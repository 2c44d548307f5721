"""``copilot eval exactness --target-url``: an external model server's greedy answers with its
speculation on against the same server with it off, where the server exposes that switch.

We cannot vouch for an engine we do not run; what we can check from outside is that its own
switch does not change its greedy output. An OpsCopilot server has the switch (the request's
``speculation`` field: ``off`` or ``adaptive``); a server that silently ignores the field
(llama.cpp's, vLLM's: their speculation is a start-up setting) is asked twice instead, which
checks only that its greedy output is repeatable. The report says which was done.
"""

from __future__ import annotations

import logging
from typing import Any

import openai

from copilot.serving.remote_target import RemoteEngine
from decoding.config import Budget, GenerationConfig
from evals.harness import Case

log = logging.getLogger(__name__)

#: The request bodies compared: with the switch (OpsCopilot's ``speculation``), and without it.
SWITCHED = {"off": {"speculation": "off"}, "on": {"speculation": "adaptive"}}
REPEATED: dict[str, dict[str, Any]] = {"first": {}, "second": {}}


def has_speculation_switch(engine: RemoteEngine) -> bool:
    """Whether the server takes a per-request ``speculation`` field: it refuses an unknown
    value with a 400 that names the field (a server that ignores the field accepts it)."""
    try:
        engine.client.completions.create(model=engine.target.name, prompt="ping", max_tokens=1,
                                         extra_body={"speculation": "no-such-mode"})
    except openai.BadRequestError as exc:
        return "speculation" in str(exc)
    except openai.OpenAIError as exc:
        log.warning("probing the server's speculation switch failed: %s", exc)
    return False


def _answer(engine: RemoteEngine, case: Case, max_new_tokens: int, body: dict[str, Any]) -> tuple[str, str]:
    """The server's greedy text for ``case`` with ``body`` added, and its finish reason."""
    engine.extra_body = dict(body)
    result = None
    for event in engine.stream(case.prompt_ids, GenerationConfig(budget=Budget(max_new_tokens=max_new_tokens))):
        result = event.result or result
    assert result is not None
    return result.text, result.finish_reason


def first_difference(a: str, b: str) -> int | None:
    """Offset of the first character where ``a`` and ``b`` differ (``None`` when equal)."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def run_remote_exactness(engine: RemoteEngine, cases: list[Case], max_new_tokens: int) -> dict:
    """Every case's greedy answer from the server under each compared body.

    Returns:
        JSON-able dict: ``url``, ``model``, ``switch`` (whether the server has the speculation
        switch), ``compared`` (the two bodies' names), ``identical`` (cases whose two answers are
        the same text), ``cases`` (per case: the two texts' lengths, finish reasons, and the first
        differing character offset when they differ).
    """
    switch = has_speculation_switch(engine)
    bodies = SWITCHED if switch else REPEATED
    rows, identical = [], 0
    for case in cases:
        (a_name, a_body), (b_name, b_body) = bodies.items()
        a_text, a_finish = _answer(engine, case, max_new_tokens, a_body)
        b_text, b_finish = _answer(engine, case, max_new_tokens, b_body)
        diff = first_difference(a_text, b_text)
        identical += diff is None and a_finish == b_finish
        rows.append({"id": case.question.id, a_name: {"chars": len(a_text), "finish": a_finish},
                     b_name: {"chars": len(b_text), "finish": b_finish}, "identical": diff is None,
                     "first_difference": diff})
    engine.extra_body = {}
    return {"url": engine.target.url, "model": engine.target.name, "switch": switch, "compared": list(bodies),
            "identical": identical, "cases": rows}


def remote_exactness_markdown(result: dict) -> str:
    """The report of :func:`run_remote_exactness`."""
    n = len(result["cases"])
    a, b = result["compared"]
    how = (f"the server's `speculation` switch: greedy answers with it `{b}` against `{a}`" if result["switch"] else
           "no per-request speculation switch (the server ignores the field): each greedy answer asked twice, which "
           "checks only that it is repeatable, not that its speculation is exact")
    lines = ["# Exactness of an external model server", "", f"Server: {result['url']}, model `{result['model']}`.",
             f"Compared: {how}.", "", f"Identical: **{result['identical']}/{n}**.", "",
             f"| question | {a} (chars, finish) | {b} (chars, finish) | first difference |", "|---|---|---|---|"]
    for row in result["cases"]:
        lines.append(f"| {row['id']} | {row[a]['chars']}, {row[a]['finish']} | {row[b]['chars']}, {row[b]['finish']} "
                     f"| {'-' if row['first_difference'] is None else row['first_difference']} |")
    return "\n".join(lines) + "\n"
