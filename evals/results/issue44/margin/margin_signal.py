"""Does the target's top-2 logit margin at the last committed position tell which n-gram proposals
greedy decoding accepts at their first token? (issue 44, the policy share: a per-proposal signal)

    HF_HUB_OFFLINE=1 .venv/bin/python evals/results/issue44/margin/margin_signal.py \
        evals/data/site6 evals/data/site2 > evals/results/issue44/margin/margin_signal.md

For each question of each set it decodes the default target's greedy answer (64 tokens) one token
per pass, keeping each position's top-1 minus top-2 logit, and replays the n-gram drafter at every
decode position (``evals.oracle.replay``, with the answer history as the engine keeps it). A
proposal's first token is accepted when it is the next greedy token. The margin a policy could read
for free is the one of the logits that chose the last committed token (``m_last``); the one of the
position being verified (``m_next``) is shown for contrast, though no policy knows it before the pass.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from decoding.drafters.ngram import NGramDrafter
from evals.harness import build_cases, build_setup
from evals.oracle import replay
from evals.questions import load_questions

TOKENS = 64


def proposals(folder: Path) -> list[dict]:
    """Every decode position where the n-gram drafter proposes, with the margins around it."""
    setup = build_setup(folder / "corpus", None)
    engine, rows = setup.engine, []
    target = engine.target
    eos = set(target.eos_token_ids())
    try:
        for case in build_cases(setup, load_questions(folder / "questions.jsonl"), TOKENS):
            cache = target.new_cache(len(case.prompt_ids) + TOKENS + 1)
            logits, answer, margins = target.prefill(case.prompt_ids, cache).float(), [], []
            try:
                while len(answer) < TOKENS and (not answer or answer[-1] not in eos):
                    top = torch.topk(logits, 2)
                    margins.append(float(top.values[0] - top.values[1]))
                    answer.append(int(top.indices[0]))
                    logits = target.forward([([answer[-1]], cache)])[0][-1].float()
            finally:
                target.release(cache)
            drafter = next(d for d in engine.core.drafters if isinstance(d, NGramDrafter))
            for i, p in enumerate(replay(drafter, case.prompt_ids, case.context_ids, answer, 7), start=1):
                if p.proposed:
                    rows.append({"state": p.state, "first_accepted": p.accepted > 0, "m_last": margins[i - 1],
                                 "m_next": margins[i]})
            engine.core.remember(case.prompt_ids, answer)
    finally:
        setup.close()
    return rows


def rate(rows: list[dict]) -> str:
    return f"{sum(r['first_accepted'] for r in rows) / len(rows):.2f}" if rows else "-"


def main() -> None:
    rows = [r for folder in sys.argv[1:] for r in proposals(Path(folder))]
    print(f"# First-token acceptance by the target's margin ({', '.join(sys.argv[1:])})\n")
    print(f"{len(rows)} proposals; first-token acceptance {rate(rows)}.\n")
    print("| margin | quintile 1 | 2 | 3 | 4 | 5 |\n|---|---|---|---|---|---|")
    for key in ("m_last", "m_next"):
        ordered = sorted(rows, key=lambda r: r[key])
        fifths = [ordered[len(ordered) * k // 5:len(ordered) * (k + 1) // 5] for k in range(5)]
        print(f"| {key} | " + " | ".join(f"{rate(f)} (from {f[0][key]:.1f})" for f in fifths) + " |")
    print("\n| state | proposals | lower-m_last half | upper-m_last half |\n|---|---|---|---|")
    by_state: dict[str, list[dict]] = {}
    for r in rows:
        by_state.setdefault(r["state"], []).append(r)
    for state, rs in sorted(by_state.items(), key=lambda kv: -len(kv[1]))[:8]:
        rs = sorted(rs, key=lambda r: r["m_last"])
        print(f"| {state} | {len(rs)} | {rate(rs[:len(rs) // 2])} | {rate(rs[len(rs) // 2:])} |")


if __name__ == "__main__":
    main()
