"""``copilot eval reuse``: what exact prefix reuse (:mod:`decoding.kv.prefix_cache`) saves the
operator, through the service's own path (retrieval, prompt, engine), on two workloads:

- **asked again**: a question, then the same question (the second is timed);
- **follow-up**: a conversation's first question, then its follow-up with the first turn as
  history (the follow-up is timed).

Each case runs with reuse off, on, on, off (A B B A; a case the service answers without the
model is left out), and the medians are compared: time to first token (TTFT, ms, from the
engine's stats), the prompt positions reused, and whether the timed answer is the same text
either way (it must be: reuse is exact). A follow-up is also timed, before and after the others,
with its earlier turn as bare text and no reuse (``conversation_turns = 0``: the prompt before
:mod:`copilot.answer.conversation`), which is what the operator waited before. Retrieval and prompt
building come before the engine starts its clock; their median is reported beside TTFT, since
the operator waits for both (a follow-up searches its earlier questions again).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from copilot.answer.assembly import AnswerAssembler
from copilot.answer.prompting import ChatTurn
from copilot.answer.question import GenerationParams, QuestionRequest
from copilot.service import CopilotService
from evals.questions import Question


@dataclass(frozen=True)
class Timed:
    """One timed answer: TTFT (ms), retrieval and prompt building (ms), prompt tokens, prompt
    positions reused, its text."""

    ttft_ms: float
    retrieval_ms: float
    prompt_tokens: int
    reused_tokens: int
    text: str


def _answer(service: CopilotService, text: str, history: tuple[ChatTurn, ...], max_new_tokens: int) -> Timed:
    asked = QuestionRequest(text, history=history, generation=GenerationParams(max_new_tokens=max_new_tokens))
    assembler = AnswerAssembler(service.prepare(service.question(asked)))
    for event in service.stream(assembler.prepared):
        assembler.add(event)
    answer = assembler.answer()
    stats = answer.stats
    return Timed(float(stats.get("ttft_ms", 0.0)), float(stats.get("retrieval_ms", 0.0)),
                 int(stats.get("prompt_tokens", 0)),
                 int(stats.get("prefix_reused_tokens", 0)), answer.text)


def _run(service: CopilotService, q: Question, reuse: bool, entries: int, max_new_tokens: int) -> Timed:
    """The timed second turn of ``q`` (a follow-up when it has a first question, else asked again)."""
    cache = service.models.engine.core.prefix_cache
    cache.clear()
    cache.max_entries = entries if reuse else 0
    first = q.first or q.question
    before = _answer(service, first, (), max_new_tokens)
    history = (ChatTurn("user", first), ChatTurn("assistant", before.text)) if q.first else ()
    return _answer(service, q.question, history, max_new_tokens)


def run_reuse(service: CopilotService, questions: list[Question], followups: list[Question],
              max_new_tokens: int = 32) -> dict:
    """Both workloads, reuse off and on (A B B A per case); the engine's setting is restored.

    Returns:
        JSON-able dict: per workload (``asked_again``, ``follow_up``): ``cases``, medians of
        TTFT off and on (ms) and their ratio, reused prompt positions ÷ prompt tokens (on),
        ``identical`` (cases whose timed answer is the same text with and without reuse), and
        the per-case rows.
    """
    entries = service.models.engine.core.prefix_cache.max_entries or 2
    bare = CopilotService(service.settings.model_copy(update={"conversation_turns": 0}), service.store,
                          service.models.engine)
    out = {}
    try:
        for name, cases in (("asked_again", [Question(q.id, q.question, "", "") for q in questions]),
                            ("follow_up", followups)):
            rows = []
            for q in cases:
                before = [_run(bare, q, False, entries, max_new_tokens)] if q.first else []
                off1 = _run(service, q, False, entries, max_new_tokens)
                if not off1.ttft_ms:
                    continue  # answered "not found" without the model: nothing to time
                on1 = _run(service, q, True, entries, max_new_tokens)
                on2 = _run(service, q, True, entries, max_new_tokens)
                off2 = _run(service, q, False, entries, max_new_tokens)
                before += [_run(bare, q, False, entries, max_new_tokens)] if q.first else []
                rows.append({"id": q.id, "prompt_tokens": on1.prompt_tokens, "reused_tokens": on1.reused_tokens,
                             "bare_ttft_ms": statistics.median([b.ttft_ms for b in before]) if before else None,
                             "bare_prompt_tokens": before[0].prompt_tokens if before else None,
                             "ttft_off_ms": statistics.median([off1.ttft_ms, off2.ttft_ms]),
                             "ttft_on_ms": statistics.median([on1.ttft_ms, on2.ttft_ms]),
                             "retrieval_ms": statistics.median([r.retrieval_ms for r in (off1, on1, on2, off2)]),
                             "identical": len({off1.text, off2.text, on1.text, on2.text}) == 1})
            out[name] = _summary(rows)
    finally:
        service.models.engine.core.prefix_cache.clear()
        service.models.engine.core.prefix_cache.max_entries = entries
    return out


def _summary(rows: list[dict]) -> dict:
    if not rows:
        return {"cases": 0, "rows": []}
    off = statistics.median(r["ttft_off_ms"] for r in rows)
    on = statistics.median(r["ttft_on_ms"] for r in rows)
    return {"cases": len(rows), "ttft_off_ms": round(off, 1), "ttft_on_ms": round(on, 1),
            "ttft_ratio": round(on / off, 3) if off else None,
            "retrieval_ms": round(statistics.median(r["retrieval_ms"] for r in rows), 1),
            "bare_ttft_ms": (round(statistics.median(r["bare_ttft_ms"] for r in rows), 1)
                             if all(r["bare_ttft_ms"] is not None for r in rows) else None),
            "reused_share": round(sum(r["reused_tokens"] for r in rows) / sum(r["prompt_tokens"] for r in rows), 3),
            "identical": sum(r["identical"] for r in rows), "rows": rows}


def reuse_markdown(result: dict, hardware: dict | None = None) -> str:
    """The report of :func:`run_reuse`."""
    lines = ["# Prefix reuse: time to first token", ""]
    if hardware:
        lines += [f"Target `{hardware.get('target_model')}` on {hardware.get('backend')}, "
                  f"{hardware.get('torch_threads')} threads.", ""]
    lines += ["| workload | cases | median TTFT off (ms) | median TTFT on (ms) | on ÷ off | prompt reused | "
              "same answer | retrieval + prompt (ms) | before: earlier turns as bare text, no reuse (ms) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, s in result.items():
        if s["cases"]:
            lines.append(f"| {name.replace('_', ' ')} | {s['cases']} | {s['ttft_off_ms']} | {s['ttft_on_ms']} | "
                         f"{s['ttft_ratio']} | {s['reused_share']:.0%} | {s['identical']}/{s['cases']} | "
                         f"{s['retrieval_ms']} | {s['bare_ttft_ms'] or '–'} |")
    return "\n".join(lines) + "\n"
