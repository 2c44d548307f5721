"""Exactness eval: every decoding mode against plain greedy ``generate(do_sample=False)``.

For each divergence it reports the question, the mode, the position and the target's
top-1/top-2 logit margin at that position in the reference, so a numerical near-tie
(tiny margin, e.g. bf16) is told apart from a bug (large margin).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

import torch

from decoding import GenerationConfig, SpeculativeEngine
from evals.harness import Case, plain_greedy_kwargs

log = logging.getLogger(__name__)


@dataclass
class Divergence:
    """First position where a mode's ids differ from the reference."""

    question_id: str
    question: str
    mode: str
    position: int
    reference_token: int | None
    got_token: int | None
    margin: float | None  # reference top-1 minus top-2 logit at that position


def modes_for(engine: SpeculativeEngine) -> list[str]:
    """Our modes: speculation off, n-gram only, draft model only (when loaded), the policy."""
    return ["off", "ngram"] + (["draft_model"] if engine.draft is not None else []) + ["auto"]


@torch.inference_mode()
def reference_greedy(engine: SpeculativeEngine, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """Plain greedy ids from transformers ``generate`` (no logits processors; the engine's EOS)."""
    x = torch.tensor([prompt_ids], device=engine.target.device)
    out = engine.target.model.generate(x, **plain_greedy_kwargs(engine, x, max_new_tokens))
    return out[0, len(prompt_ids):].tolist()


@torch.inference_mode()
def logit_margin(engine: SpeculativeEngine, prefix: list[int]) -> float:
    """Top-1 minus top-2 logit of the target after ``prefix`` (one full forward)."""
    target = engine.target
    logits = target.model(input_ids=torch.tensor([prefix], device=target.device)).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first difference between two id lists (None if equal)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run_exactness(engine: SpeculativeEngine, cases: list[Case], max_new_tokens: int,
                  modes: list[str] | None = None) -> dict:
    """Decode every case in every mode and compare with the reference.

    Returns:
        JSON-able dict with top-level keys ``cases``, ``modes``, ``exact`` (per mode: number
        of identical answers), ``divergences`` (list of :class:`Divergence` dicts).
    """
    modes = modes or modes_for(engine)
    exact = {m: 0 for m in modes}
    divergences: list[Divergence] = []
    rows = []
    for case in cases:
        t0 = time.perf_counter()
        ref = reference_greedy(engine, case.prompt_ids, max_new_tokens)
        row = {"id": case.question.id, "question": case.question.question, "prompt_tokens": len(case.prompt_ids),
               "reference_tokens": len(ref), "modes": {}}
        for mode in modes:
            result = engine.generate(case.prompt_ids, GenerationConfig(max_new_tokens=max_new_tokens, drafting=mode),
                                     case.context_ids)
            pos = first_difference(ref, result.token_ids)
            row["modes"][mode] = {"exact": pos is None, "new_tokens": len(result.token_ids),
                                  "tau": round(result.stats.tau, 3)}
            if pos is None:
                exact[mode] += 1
                continue
            ref_tok = ref[pos] if pos < len(ref) else None
            got_tok = result.token_ids[pos] if pos < len(result.token_ids) else None
            margin = logit_margin(engine, case.prompt_ids + ref[:pos])
            divergences.append(Divergence(case.question.id, case.question.question, mode, pos, ref_tok, got_tok,
                                          round(margin, 6)))
            log.warning("divergence: %s mode=%s pos=%d margin=%.4g", case.question.id, mode, pos, margin)
        rows.append(row)
        log.info("%s done in %.1f s", case.question.id, time.perf_counter() - t0)
    return {"cases": rows, "modes": modes, "exact": exact, "divergences": [asdict(d) for d in divergences]}


def failing_divergences(report: dict, allow_near_ties: float | None) -> list[dict]:
    """Divergences that fail the run: all of them, or those with margin > the allowance."""
    if allow_near_ties is None:
        return list(report["divergences"])
    return [d for d in report["divergences"] if d["margin"] is None or d["margin"] > allow_near_ties]
