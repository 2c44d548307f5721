r"""Is a prompt's prefill bitwise the same in 64-token chunks and in larger runs? (issue 44 item 1)

    .venv/bin/python -m evals.prefill_invariance --out evals/results/issue44/prefill_invariance.json

Loads the default target (the embedded Qwen2.5-Coder 1.5B GGUF on llama.cpp, 2 threads) once per
prefill chunk size (64, 128, 256, 512 tokens: every run starts at position 0, so its boundaries are
multiples of 64) and prefills the same prompts (the long-record set's text, cut to each ``--tokens``
length; 580 = 9 x 64 + 4 ends 4 tokens past a chunk boundary, where ggml would switch kernels if they ran
alone). The reference is a call per chunk of :func:`~decoding.backends.llamacpp.chunk_ends` (how a batch
prefills a newcomer); with 64 the prompt is also prefilled in one call (the service's lone request: the
chunks in runs of up to ``--runs`` tokens each, llama.cpp's micro-batch), with the larger sizes in one call
of that size's chunks.
Each run then takes 8 greedy one-token steps, which read the whole KV cache. Reported per run: prefill
tokens/s, and whether the logits of the last prompt position and of the 8 steps are bitwise the
reference's (the first that differs, and the largest difference). A benchmark: run it alone.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

from decoding.backends.cpu import cpu_report
from evals.report import write_json

log = logging.getLogger(__name__)
CORPUS = Path(__file__).parent / "data" / "longrec" / "corpus"
STEPS = 8


def run(lengths: list[int], chunks: list[int], threads: int, runs: list[int]) -> dict:
    """The measurement (see the module docstring); the report."""
    from copilot.config import Settings
    from decoding.backends.embedded import QWEN_CODER_15B
    from decoding.backends.llamacpp import LlamaCppModel, LlamaCppOptions, embedded_gguf, gguf_tokenizer

    cache_dir = Settings(_env_file=None).model_cache_dir
    gguf = embedded_gguf(QWEN_CODER_15B, cache_dir)
    tokenizer = gguf_tokenizer(gguf, cache_dir)
    text = "\n".join(p.read_text(errors="ignore") for p in sorted(CORPUS.rglob("*")) if p.is_file())
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    reference: dict[int, np.ndarray] = {}
    rows = []
    for chunk, run_tokens in [(chunks[0], r) for r in runs] + [(c, c) for c in chunks[1:]]:
        model = LlamaCppModel(gguf, tokenizer, QWEN_CODER_15B.name,
                              LlamaCppOptions(n_threads=threads, window=max(lengths) + STEPS + 1, n_seq_max=1,
                                              prefill_chunk=chunk, prefill_run=max(chunk, run_tokens)))
        reference_pass = chunk == chunks[0] and run_tokens == runs[0]
        ways = ["by chunk", "one call"] if reference_pass else ["one call"]
        for n in lengths:
            for way in ways:
                cache = model.new_cache(n + STEPS + 1)
                started = time.perf_counter()
                if way == "by chunk":  # the reference: a call per chunk, as a batch prefills a newcomer
                    ends = model.chunk_ends(n)
                    for start, end in zip([0, *ends], ends):
                        last = model.prefill(ids[start:end], cache)
                else:  # one call: whole chunks in runs of up to prefill_run, as a lone request
                    last = model.prefill(ids[:n], cache)
                seconds = time.perf_counter() - started
                out = [last.numpy().copy()]
                for _ in range(STEPS):
                    out.append(model.forward([([int(np.argmax(out[-1]))], cache)])[0][-1].numpy().copy())
                model.release(cache)
                got = np.stack(out)
                base = reference.setdefault(n, got)
                differs = [i for i in range(len(got)) if not np.array_equal(got[i], base[i])]
                rows.append({"chunk": chunk, "run": run_tokens if way == "one call" else chunk, "way": way,
                             "prompt_tokens": n, "prefill_tokens_per_s": round(n / seconds, 1),
                             "bitwise_equal": not differs, "first_differing_position": differs[0] if differs else None,
                             "max_abs_diff": float(np.abs(got - base).max())})
                log.info("chunk %d %s (runs of %d), %d tokens: %.1f tokens/s, bitwise %s", chunk, way, run_tokens, n,
                         n / seconds, not differs)
        del model
    cpu = cpu_report()
    return {"cpu": cpu.model, "cpu_flags": list(cpu.advertised), "llama_cpp_uses": list(cpu.llama_cpp),
            "threads": threads, "model": QWEN_CODER_15B.name,
            "steps_after_prefill": STEPS,
            "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="300,580,1000", help="prompt lengths, comma-separated")
    ap.add_argument("--chunks", default="64,128,256,512", help="prefill chunk sizes; the first is the reference")
    ap.add_argument("--runs", default="512", help="with the first chunk size: the largest prefill runs (llama.cpp's "
                    "micro-batch) tried in one call, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, help="write the report here (JSON)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    report = run([int(n) for n in args.tokens.split(",")], [int(c) for c in args.chunks.split(",")], args.threads,
                 [int(r) for r in args.runs.split(",")])
    print(json.dumps(report, indent=2))
    if args.out:
        write_json(report, args.out)


if __name__ == "__main__":
    main()
