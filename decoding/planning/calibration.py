"""Measuring forward-pass costs on the actual hardware, once at load time, and a built-in
RAG prompt to measure them on."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from decoding.backends.target import Target
from decoding.kv.cache import PreallocatedCache
from decoding.planning.policy import CostModel

_CALIBRATION_PASSAGE = (
    "[{n}] ELOG operations #{n}: dc-pool-0{m} went read-only after a disk failure in RAID set {m}. "
    "The shifter ran `pool disable -rdonly dc-pool-0{m}` in the dCache admin shell, opened GGUS "
    "ticket {t} and drained the transfers with `fts-set-priority --site T1_{m}`. After the rebuild "
    "finished, the domain was restarted with `systemctl restart dcache@dc-pool-0{m}Domain.service` "
    "and the pool was enabled again; checksums of the 312 files written during the incident were "
    "verified against the catalogue and two were re-transferred.\n"
)


def calibration_prompt(tokenizer: PreTrainedTokenizerBase, context_tokens: int) -> list[int]:
    """A built-in ops-log RAG prompt of about ``context_tokens`` tokens (at most 200
    passages; the chat template when the tokenizer has one), for measuring without the
    copilot's store."""
    passages, n = [], 0
    while True:
        n += 1
        passages.append(_CALIBRATION_PASSAGE.format(n=n, m=n % 9 + 1, t=170000 + 37 * n))
        text = ("Answer from the passages and cite them as [n].\n\n" + "".join(passages) +
                "\nQuestion: how was the read-only pool brought back, step by step?")
        ids = _chat_ids(tokenizer, text)
        if len(ids) >= context_tokens or n > 200:
            return ids


def _chat_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """``text`` as one user turn through the chat template, else plain-encoded."""
    try:
        out = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
    except Exception:  # noqa: BLE001 - no chat template: plain text
        return [int(i) for i in tokenizer.encode(text)]
    ids: Any = out["input_ids"] if isinstance(out, Mapping) else out  # transformers 5: a BatchEncoding
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(i) for i in ids]


@torch.inference_mode()
def measure_forward_ms(model: Target, n_tokens: list[int], context_tokens: int = 256,
                       repeats: int = 3) -> list[float]:
    """Wall time (ms) of one forward over n new tokens after a cached context.

    Args:
        model: a target or draft model (any backend of :class:`~decoding.backends.target.Target`).
        n_tokens: the numbers of new tokens to time (e.g. 1..γ+1).
        context_tokens: tokens already in the KV cache (a typical prompt length).
        repeats: timed runs per size (after one warm-up run).

    Returns:
        The fastest run per entry of ``n_tokens``, in milliseconds (the minimum is the
        least disturbed by other load on the machine).
    """
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(0, model.vocab_size, (context_tokens,), generator=gen).tolist()
    cache = model.new_cache(context_tokens + max(n_tokens))
    try:
        model.prefill(context, cache)
        out = []
        for n in n_tokens:
            ids = torch.randint(0, model.vocab_size, (n,), generator=gen).tolist()
            times = []
            for i in range(repeats + 1):
                t0 = time.perf_counter()
                model.forward([(ids, cache)])  # synchronizes: logits are read back
                if i:
                    times.append((time.perf_counter() - t0) * 1000)
                model.rollback(cache, context_tokens)
            out.append(min(times))
    finally:
        model.release(cache)
    return out


def measured_sizes(max_tokens: int) -> list[int]:
    """Pass sizes timed at load: every size up to 6 (where CPU GEMM kernels change), then
    a sparser grid up to ``max_tokens``; the sizes in between are interpolated."""
    grid = set(range(1, min(max_tokens, 6) + 1)) | {n for n in (8, 12) if n < max_tokens} | {max_tokens}
    return sorted(grid)


def _interpolated(sizes: list[int], times: list[float], max_tokens: int) -> list[float]:
    """Costs for 1..max_tokens tokens from the timed ``sizes``; timing noise must not mislead
    the policy: a pass over n tokens costs at least the pass over n - 1 and at most n
    single-token passes."""
    costs = [float(t) for t in np.interp(range(1, max_tokens + 1), sizes, times)]
    for i in range(1, len(costs)):
        costs[i] = min(max(costs[i], costs[i - 1]), (i + 1) * costs[0])
    return costs


def measure_draft_feed_ms(draft: Target, max_tokens: int, context_tokens: int = 1024,
                          repeats: int = 3) -> tuple[float, ...]:
    """A draft model's forward over 1..``max_tokens`` new tokens after ``context_tokens`` of
    cached context (ms; index n - 1 = n tokens): its step (n = 1) and what feeding the
    tokens it lacks costs before drafting. About 2 s for the lean int4 draft on 2 CPU threads."""
    context_tokens = max(1, min(context_tokens, draft.max_positions - max_tokens))
    sizes = sorted({1, 2, 4, 8, max_tokens} & set(range(1, max_tokens + 1)))
    return tuple(_interpolated(sizes, measure_forward_ms(draft, sizes, context_tokens, repeats), max_tokens))


def calibrate(target: Target, draft: Target | None, max_tokens: int,
              context_tokens: int = 1024, repeats: int = 3) -> CostModel:
    """Build the policy's :class:`CostModel`: target cost for 1..max_tokens tokens (ms) after
    ``context_tokens`` of cached context (a typical RAG prompt; capped by the context
    window), and the draft model's forward costs over 1..max_tokens tokens (ms). Both run
    the passes the engine runs (:meth:`Target.forward <decoding.backends.target.Target.forward>`).

    About 6 s for SmolLM2-135M on 2 CPU threads with ``max_tokens=17``.
    """
    context_tokens = max(1, min(context_tokens, target.max_positions - max_tokens))
    sizes = measured_sizes(max_tokens)
    times = measure_forward_ms(target, sizes, context_tokens, repeats)
    verify = _interpolated(sizes, times, max_tokens)
    if draft is None:
        return CostModel(tuple(verify))
    feed = measure_draft_feed_ms(draft, max_tokens, context_tokens, repeats)
    return CostModel(tuple(verify), feed[0], feed)


@torch.inference_mode()
def measure_agreement(target: Target, draft: PreTrainedModel, prompt_ids: Sequence[int],
                      answer_tokens: int = 24) -> float:
    """Teacher-forced top-1 agreement of ``draft`` with ``target`` on the target's greedy answer
    to ``prompt_ids``: the share of the ``answer_tokens`` positions where both argmaxes agree,
    in [0, 1]. The policy starts the draft model's acceptance from it
    (:meth:`~decoding.planning.policy.AcceptanceTable.set_prior`); under the generic prior a draft only
    2× cheaper than the target is never tried, so it would never be measured either.

    Args:
        target: the target (any backend); draft: a transformers causal LM with its vocabulary.
        prompt_ids: a prompt (≥ 1 token), e.g. :func:`calibration_prompt`.
        answer_tokens: positions compared.
    """
    ids = [int(t) for t in prompt_ids]
    cache = target.new_cache(len(ids) + answer_tokens)
    try:
        answer = [int(target.prefill(ids, cache).argmax())]
        while len(answer) < answer_tokens:  # the target's greedy answer
            answer.append(int(target.forward([([answer[-1]], cache)])[0][-1].argmax()))
    finally:
        target.release(cache)
    device = next(draft.parameters()).device
    full = torch.tensor([ids + answer[:-1]], device=device)
    logits = draft(input_ids=full, cache=PreallocatedCache(full.shape[1]), use_cache=True,
                   logits_to_keep=len(answer)).logits[0]
    return float((logits.argmax(-1).cpu() == torch.tensor(answer)).float().mean())
