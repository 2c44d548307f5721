r"""Row-wise flash attention (f16 and q8_0 KV caches) against llama.cpp's default attention, interleaved (a
benchmark; issue 44 item 5).

    .venv/bin/python -m evals.flash_attn_ab --out evals/results/issue44/memory/flash_attn_ab.json

Loads the default target (the embedded Qwen2.5-Coder 1.5B GGUF on llama.cpp) once per setting of
:data:`SETTINGS`: without flash attention (f16 KV cache), and with it (the build's row-wise kernel,
``scripts/patches/llama-cpp-flash-attn-rows.patch``) over an f16 and over a q8_0 KV cache, one KV sequence
each, and for each prompt length (the long-record set's text, cut) alternates between them ``--repeats``
times: the prompt's prefill (tokens/s) and ``STEPS`` greedy one-token steps after it (ms a token). With
flash attention it also checks the contract the kernel exists for: verification passes of 2, 4 and 7 rows
from the prompt give bitwise the logits of the one-token steps. Reported per length and setting: the
medians, their ratios to the default attention's, whether it gives the default's greedy steps, and the
bitwise check. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

import numpy as np

from decoding.backends.cpu import cpu_report
from evals.report import write_json

log = logging.getLogger(__name__)
CORPUS = Path(__file__).parent / "data" / "longrec" / "corpus"
STEPS = 8
PASS_ROWS = (2, 4, 7)
#: name: (flash attention, KV cache type); the first is the baseline of the ratios.
SETTINGS = {"default": (False, "f16"), "flash": (True, "f16"), "flash_q8_0": (True, "q8_0")}


def measure(model, ids: list[int]) -> dict:
    """One prefill of ``ids`` and ``STEPS`` greedy steps: tokens/s, ms a step, the tokens, every logit row."""
    cache = model.new_cache(len(ids) + STEPS + 1)
    try:
        started = time.perf_counter()
        rows = [model.prefill(ids, cache).numpy().copy()]
        prefill_s = time.perf_counter() - started
        tokens: list[int] = []
        started = time.perf_counter()
        for _ in range(STEPS):
            tokens.append(int(np.argmax(rows[-1])))
            rows.append(model.forward([(tokens[-1:], cache)])[0][-1].numpy().copy())
        step_ms = (time.perf_counter() - started) * 1000 / STEPS
    finally:
        model.release(cache)
    return {"tokens_per_s": len(ids) / prefill_s, "step_ms": step_ms, "tokens": tokens, "rows": rows}


def passes_are_bitwise(model, ids: list[int], tokens: list[int], rows: list[np.ndarray]) -> bool:
    """Whether verification passes of :data:`PASS_ROWS` rows after ``ids`` give ``rows[1:k + 1]`` bit for bit."""
    cache = model.new_cache(len(ids) + STEPS + 1)
    try:
        model.prefill(ids, cache)
        for k in PASS_ROWS:
            model.rollback(cache, len(ids))
            got = model.forward([(tokens[:k], cache)])[0].numpy()
            if not all(np.array_equal(got[i], rows[i + 1]) for i in range(k)):
                return False
    finally:
        model.release(cache)
    return True


def run(lengths: list[int], repeats: int, threads: int) -> dict:
    """The measurement (see the module docstring); the report."""
    from copilot.config import Settings
    from decoding.backends.embedded import QWEN_CODER_15B
    from decoding.backends.llamacpp import LlamaCppModel, LlamaCppOptions, embedded_gguf, gguf_tokenizer

    cache_dir = Settings(_env_file=None).model_cache_dir
    gguf = embedded_gguf(QWEN_CODER_15B, cache_dir)
    tokenizer = gguf_tokenizer(gguf, cache_dir)
    text = "\n".join(p.read_text(errors="ignore") for p in sorted(CORPUS.rglob("*")) if p.is_file())
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    window = max(lengths) + STEPS + 1
    models = {name: LlamaCppModel(gguf, tokenizer, QWEN_CODER_15B.name,
                                  LlamaCppOptions(n_threads=threads, window=window, n_seq_max=1, flash_attn=flash,
                                                  kv_cache_type=kv))
              for name, (flash, kv) in SETTINGS.items()}
    runs: dict[tuple[str, int], list[dict]] = {(name, n): [] for name in models for n in lengths}
    for repeat in range(repeats):
        for n in lengths:
            for name in (list(models) if repeat % 2 == 0 else list(models)[::-1]):  # alternate which goes first
                runs[(name, n)].append(measure(models[name], ids[:n]))
    out = []
    base = next(iter(SETTINGS))
    for n in lengths:
        row: dict = {"prompt_tokens": n}
        for name, got in ((name, runs[(name, n)]) for name in models):
            row[f"{name}_prefill_tokens_per_s"] = round(statistics.median(r["tokens_per_s"] for r in got), 1)
            row[f"{name}_step_ms"] = round(statistics.median(r["step_ms"] for r in got), 2)
        for name in models:
            if name != base:
                row[f"{name}_prefill_ratio"] = round(row[f"{name}_prefill_tokens_per_s"]
                                                     / row[f"{base}_prefill_tokens_per_s"], 3)
                row[f"{name}_step_ratio"] = round(row[f"{name}_step_ms"] / row[f"{base}_step_ms"], 3)
                row[f"{name}_same_greedy_steps"] = runs[(name, n)][0]["tokens"] == runs[(base, n)][0]["tokens"]
                row[f"{name}_passes_bitwise_the_steps"] = passes_are_bitwise(
                    models[name], ids[:n], runs[(name, n)][0]["tokens"], runs[(name, n)][0]["rows"])
        log.info("%s", row)
        out.append(row)
    for model in models.values():
        model.close()
    cpu = cpu_report()
    return {"cpu": cpu.model, "llama_cpp_uses": list(cpu.llama_cpp), "threads": threads,
            "model": QWEN_CODER_15B.name, "repeats": repeats, "steps": STEPS, "lengths": out}


def main() -> None:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="500,1000,1600", help="prompt lengths, comma-separated")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each setting per length, alternated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, help="write the report here (JSON)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    report = run([int(n) for n in args.tokens.split(",")], args.repeats, args.threads)
    print(json.dumps(report, indent=2))
    if args.out:
        write_json(report, args.out)


if __name__ == "__main__":
    main()
