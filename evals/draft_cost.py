"""What a derived draft step costs against the target's, and how often it agrees.

For contexts of 300 / 700 / 1,200 tokens (the RAG working context is ~1,000–1,400) it
prints, per draft variant: the target's and the draft's one-token step (ms, medians of
interleaved A/B/A/B runs in one process, so the *ratio* survives a shared, noisy
machine), the split of each step into matmul kernels / attention / other aten ops /
Python and dispatch (torch.profiler self times), and the teacher-forced top-1 agreement
with the fp32 target on real RAG prompts (the copilot's own retrieval + prompt path over
the sample corpus; the target's greedy answer is the teacher).

    .venv/bin/python -m evals.draft_cost --contexts 300 700 1200 --variants int4 int4-h16k int8 dense32

Prompts are built once and cached as token ids (``--prompts``, JSON) so reruns skip the
store and the embedder. Background for the variants: :mod:`decoding.drafters.lean`.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from decoding.drafters.lean.model import LeanVariant

if TYPE_CHECKING:
    from decoding.backends.models import LoadedModel

log = logging.getLogger(__name__)

#: name -> how the draft is packed and run (each keeps the fp32 target's KV layout and dtype, so it
#: drafts over the target's own KV cache, as in the engine).
VARIANTS: dict[str, LeanVariant] = {
    "int4": LeanVariant(quant="int4"),                              # int4 g32 decoder, int8 head, bf16 matmuls
    "int4-h16k": LeanVariant(quant="int4", head_vocab=16384),       # + LM head trimmed to the first 16k ids
    "int4-h24k": LeanVariant(quant="int4", head_vocab=24576),
    "int4-1t": LeanVariant(quant="int4", threads=1),                # int4 steps on one thread
    "int8": LeanVariant(quant="int8"),                              # int8 per-channel decoder
    "dense32": LeanVariant(quant="dense", head="dense", act_dtype=torch.float32),  # lean forward, fp32 weights
}

MATMUL_OPS = ("aten::_weight_int4pack_mm_for_cpu", "aten::_weight_int8pack_mm", "aten::mm", "aten::addmm",
              "aten::bmm", "aten::baddbmm")
ATTENTION_OPS = ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math",
                 "aten::_softmax")


# ----------------------------------------------------------------------------------------
# Prompts
# ----------------------------------------------------------------------------------------
def build_rag_prompts(n: int, corpus: Path, questions: Path | None = None) -> list[list[int]]:
    """Real RAG prompts (token ids) for the first ``n`` eval questions: the corpus ingested
    into a temporary store, the service's retrieval + prompt builder (loads the embedder
    and the target)."""
    from evals.harness import build_cases, build_setup
    from evals.questions import load_questions

    setup = build_setup(corpus, None)
    try:
        qs = load_questions(questions) if questions else load_questions()
        return [c.prompt_ids for c in build_cases(setup, qs[:n], 64)]
    finally:
        setup.close()


def load_prompts(path: Path, n: int, corpus: Path, target: str) -> list[list[int]]:
    """Cached prompt ids of ``target``'s tokenizer from ``path``; built with
    :func:`build_rag_prompts` (the configured target's prompts) and saved when missing or
    cached for another target."""
    if path.exists():
        cached = json.loads(path.read_text())
        if isinstance(cached, dict) and cached.get("target") == target and len(cached["prompts"]) >= n:
            return cached["prompts"][:n]
    prompts = build_rag_prompts(n, corpus)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"target": target, "prompts": prompts}))
    return prompts


# ----------------------------------------------------------------------------------------
# Measurements
# ----------------------------------------------------------------------------------------
def step_logits(model: torch.nn.Module, token: int, cache) -> torch.Tensor:
    """One-token forward of ``model`` (the target or a lean draft) after ``cache``: logits ``(vocab,)``."""
    return model(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1]


@torch.inference_mode()
def interleaved_step_ms(target: torch.nn.Module, drafts: dict, context_ids: list[int], repeats: int = 20,
                        ) -> dict[str, list[float]]:
    """One-token step times (ms) after ``context_ids``: the target's (transformers, with a
    :class:`~decoding.kv.cache.PreallocatedCache`, as the engine runs it) and each lean
    draft's (over the target's K/V, as the engine drafts), run A/B/C/A/B/C ``repeats``
    times with the cache cropped back after every step."""
    from decoding.kv.cache import PreallocatedCache, crop_cache

    c = len(context_ids)
    cache = PreallocatedCache(c + 16)
    target(input_ids=torch.tensor([context_ids]), cache=cache, use_cache=True, logits_to_keep=1)
    models = {"target": target, **drafts}
    times: dict[str, list[float]] = {k: [] for k in models}
    for r in range(repeats + 2):
        for k, model in models.items():
            t0 = time.perf_counter()
            step_logits(model, context_ids[-1], cache)
            dt = time.perf_counter() - t0
            crop_cache(cache, c)
            if r >= 2:
                times[k].append(dt * 1e3)
    return times


@torch.inference_mode()
def profile_split(step: Callable[[], None], steps: int = 8) -> dict[str, float]:
    """Per-step ms split of ``step()``: matmul kernels, attention, other aten ops (self
    times, torch.profiler), and the rest of the wall time (Python, dispatch, profiler)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - t0) * 1e3 / steps
    split = {"matmul": 0.0, "attention": 0.0, "other_ops": 0.0}
    for ev in prof.key_averages():
        ms = ev.self_cpu_time_total / 1e3 / steps
        key = "matmul" if ev.key in MATMUL_OPS else "attention" if ev.key in ATTENTION_OPS else "other_ops"
        split[key] += ms
    split["python_dispatch"] = max(0.0, wall - sum(split.values()))
    split["wall"] = wall
    return split


@torch.inference_mode()
def teacher_forced_agreement(target: torch.nn.Module, drafts: dict, prompt_ids: list[int],
                             answer_tokens: int = 48) -> tuple[dict[str, float], list[int]]:
    """Top-1 agreement of each draft with the target on the target's own greedy answer.

    The target prefills ``prompt_ids[:-1]`` and decodes ``answer_tokens`` greedily from the
    prompt's last token; at every position each draft, attending over the target's verified
    K/V (the draft's real use), is fed the same token, its step cropped away before the
    target's, and its argmax is compared with the target's next token.

    Returns:
        ``({variant: agreement in [0, 1]}, answer token ids)``.
    """
    from decoding.kv.cache import PreallocatedCache, crop_cache

    n = len(prompt_ids)
    cache = PreallocatedCache(n + answer_tokens + 8)
    target(input_ids=torch.tensor([prompt_ids[:-1]]), cache=cache, use_cache=True, logits_to_keep=1)
    answer: list[int] = []
    fed = prompt_ids[-1]
    hits = {k: 0 for k in drafts}
    for _ in range(answer_tokens):
        c = cache.get_seq_length()
        guesses = {}
        for k, d in drafts.items():
            guesses[k] = int(step_logits(d, fed, cache).argmax())
            crop_cache(cache, c)
        nxt = int(step_logits(target, fed, cache).argmax())
        for k, guess in guesses.items():
            hits[k] += int(guess == nxt)
        answer.append(nxt)
        fed = nxt
    return {k: v / answer_tokens for k, v in hits.items()}, answer


# ----------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------
def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", type=int, nargs="+", default=[300, 700, 1200])
    ap.add_argument("--variants", nargs="+", default=["int4", "int4-h16k", "int8", "dense32"])
    ap.add_argument("--repeats", type=int, default=20, help="interleaved timed steps per variant and context")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=Path, default=Path(".opscopilot/draft_cost_prompts.json"))
    ap.add_argument("--corpus", type=Path, default=Path("evals/data/corpus"))
    ap.add_argument("--agreement-prompts", type=int, default=6)
    ap.add_argument("--answer-tokens", type=int, default=48)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--profile-rounds", type=int, default=5, help="interleaved profiled rounds (4 steps each)")
    ap.add_argument("--out", type=Path)
    return ap.parse_args(argv)


def _context_row(target: LoadedModel, drafts: dict, ids: list[int], args: argparse.Namespace) -> dict:
    """Step times (and, unless ``--no-profile``, the per-category split) at ``len(ids)`` tokens."""
    c = len(ids)
    times = interleaved_step_ms(target.model, drafts, ids, args.repeats)
    med = {k: statistics.median(v) for k, v in times.items()}
    paired = {k: statistics.median(a / b for a, b in zip(times["target"], times[k], strict=True)) for k in drafts}
    row: dict = {"target_ms": med["target"], "drafts": {k: {"ms": med[k], "ratio": med["target"] / med[k],
                                                             "paired_ratio": paired[k]} for k in drafts}}
    print(f"  context {c}: target {med['target']:.1f} ms | " + " | ".join(
        f"{k} {med[k]:.1f} ms ({med['target'] / med[k]:.2f}x, paired {paired[k]:.2f}x)" for k in drafts), flush=True)
    if not args.no_profile:
        row["split"] = _profile(target, drafts, ids, args.profile_rounds)
        for k, split in row["split"].items():
            print(f"    {k:>12}: " + ", ".join(f"{n} {v:.1f}" for n, v in split.items()), flush=True)
    return row


def _profile(target: LoadedModel, drafts: dict, ids: list[int], profile_rounds: int) -> dict:
    """Median ms per operator category of one step, target and each draft, interleaved."""
    from decoding.kv.cache import PreallocatedCache, crop_cache

    c = len(ids)
    cache = PreallocatedCache(c + 4)
    with torch.inference_mode():
        target.model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True, logits_to_keep=1)
    nxt = torch.tensor([[ids[-1]]])

    def target_step() -> None:
        target.model(input_ids=nxt, cache=cache, use_cache=True)
        crop_cache(cache, c)

    steps = {"target": target_step}
    for k, d in drafts.items():
        steps[k] = lambda d=d, t=ids[-1]: (step_logits(d, t, cache), crop_cache(cache, c))
    rounds: dict[str, list[dict[str, float]]] = {k: [] for k in steps}
    for _ in range(profile_rounds):  # interleaved too: medians per category
        for k, fn in steps.items():
            rounds[k].append(profile_split(fn, steps=4))
    return {k: {n: statistics.median(r[n] for r in rs) for n in rs[0]} for k, rs in rounds.items()}


def main(argv: list[str] | None = None) -> dict:
    """Run the measurements; print a table and return the numbers (also written as JSON with ``--out``)."""
    args = _parse(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)

    from copilot.config import Settings
    from decoding.backends.models import load_model
    from decoding.drafters.lean import LeanDraftModel

    settings = Settings()  # the configured target (the CPU default: Qwen2.5-Coder-0.5B), as build_rag_prompts
    prompts = load_prompts(args.prompts, max(args.agreement_prompts, 1), args.corpus, settings.target_model)
    target = load_model(settings.target_model, device="cpu", dtype="float32", cache_dir=settings.model_cache_dir)
    drafts = {}
    for name in args.variants:
        t0 = time.perf_counter()
        drafts[name] = LeanDraftModel(target.model, VARIANTS[name])
        print(f"built {name}: {drafts[name].weight_bytes / 1e6:.0f} MB of weights per step, "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    longest = max(prompts, key=len)
    results: dict = {"threads": args.threads, "repeats": args.repeats, "contexts": {}, "agreement": {}}
    print(f"\nstep ms (median of {args.repeats} interleaved, {args.threads} threads); ratio = target / draft")
    for c in args.contexts:
        ids = (longest * (c // len(longest) + 1))[:c]  # real prompt text, tiled if shorter than c
        results["contexts"][c] = _context_row(target, drafts, ids, args)
    agree: dict[str, list[float]] = {k: [] for k in drafts}
    lengths = []
    for p in prompts[: args.agreement_prompts]:
        a, _ = teacher_forced_agreement(target.model, drafts, p, args.answer_tokens)
        lengths.append(len(p))
        for k, v in a.items():
            agree[k].append(v)
    results["agreement"] = {k: statistics.mean(v) for k, v in agree.items() if v}
    results["agreement_prompt_tokens"] = lengths
    if lengths:
        print(f"\nteacher-forced top-1 agreement with the fp32 target ({len(lengths)} RAG prompts of "
              f"{min(lengths)}-{max(lengths)} tokens, {args.answer_tokens} answer tokens each):")
        for k, v in agree.items():
            print(f"  {k}: {statistics.mean(v):.3f}  (per prompt: {', '.join(f'{x:.2f}' for x in v)})")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
