r"""Are the service's prompts that end a few tokens past a prefill chunk boundary answered with
llama.cpp's own greedy text at its default batch? (issue 44, "identical to ``Llama.generate``")

    .venv/bin/python -m evals.short_tails --sets evals/data/site8 evals/data/site7 \
        --out evals/results/issue44/short-tails/short_tails.json

For every question of every set (``questions.jsonl`` over ``corpus/``, as ``copilot eval`` builds
them) it builds the service's prompt with the default target (the embedded 1.5B GGUF on llama.cpp)
and records its length. A prompt whose length is 1–7 tokens past a multiple of 64 is the one our
prefill could put in ggml's few-row kernels where ``Llama.generate`` (512-token batches) does not
(:func:`decoding.backends.llamacpp.chunk_ends`); for each such prompt, and for ``--controls`` others,
it checks that the last prompt position's logits are bitwise ``Llama.eval``'s and that our greedy
answer (``--tokens``) is ``Llama.generate(temp=0)``'s at its default batch. Not a benchmark.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def run(sets: list[Path], tokens: int, controls: int) -> dict:
    """The check (see the module docstring) of each set folder (``questions.jsonl`` and ``corpus/``);
    the report: counts, and a row per prompt (set, id, ``prompt_tokens``, ``short_tail``, the last two
    chunk ends, and where checked ``logits_bitwise`` and ``greedy_identical``).

    Raises:
        FileNotFoundError: a set without ``questions.jsonl``.
        SystemExit: the configured target does not run on llama.cpp.
    """
    import torch

    from decoding.backends.llamacpp import TILED_MIN_ROWS, LlamaCppModel
    from evals.exactness import library_greedy, library_prompt_logits, seam_greedy, settings_for
    from evals.harness import build_cases, build_setup
    from evals.questions import load_questions

    rows = []
    for folder in sets:
        questions = load_questions(folder / "questions.jsonl")
        setup = build_setup(folder / "corpus", None)
        try:
            engine = setup.engine
            target = engine.target
            if not isinstance(target, LlamaCppModel):
                raise SystemExit(f"the target runs on {target.backend}; this check is for llama.cpp")
            chunk, checked_controls = target.prefill_chunk, 0
            for case in build_cases(setup, questions, tokens):
                length = len(case.prompt_ids)
                short = 0 < length % chunk < TILED_MIN_ROWS
                row = {"set": folder.name, "id": case.question.id, "prompt_tokens": length, "short_tail": short,
                       "chunk_ends_tail": target.chunk_ends(length)[-2:]}
                if short or checked_controls < controls:
                    checked_controls += not short
                    cache = target.new_cache(length + 1)
                    try:
                        ours = target.prefill(case.prompt_ids, cache)
                    finally:
                        target.release(cache)
                    settings = settings_for(engine)
                    row.update(logits_bitwise=bool(torch.equal(ours, library_prompt_logits(target, case.prompt_ids))),
                               greedy_identical=seam_greedy(target, case.prompt_ids, tokens, settings)
                               == library_greedy(target, case.prompt_ids, tokens))
                    log.info("%s %s: %d tokens, %s", folder.name, case.question.id, length, row)
                rows.append(row)
        finally:
            setup.close()
    checked = [r for r in rows if "logits_bitwise" in r]
    return {"tokens": tokens, "prompts": len(rows), "short_tails": sum(r["short_tail"] for r in rows),
            "checked": len(checked), "logits_bitwise": sum(r["logits_bitwise"] for r in checked),
            "greedy_identical": sum(r["greedy_identical"] for r in checked), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", type=Path, required=True, help="question set folders")
    parser.add_argument("--tokens", type=int, default=64, help="greedy tokens compared")
    parser.add_argument("--controls", type=int, default=1, help="prompts without a short tail checked per set")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    for folder in args.sets:
        if not (folder / "questions.jsonl").is_file() or not (folder / "corpus").is_dir():
            parser.error(f"{folder}: a question set folder holds questions.jsonl and corpus/")
    if args.tokens < 1 or args.controls < 0:
        parser.error("--tokens must be 1 or more and --controls 0 or more")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    report = run(args.sets, args.tokens, args.controls)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}))


if __name__ == "__main__":
    main()
