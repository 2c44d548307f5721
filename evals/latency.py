"""Latency eval: our decoding modes against plain greedy and transformers' anchors.

Every question runs every mode once per repeat, interleaved (A B C … then the next
question, the order rotated per repeat), after one warm-up pass per mode; we report
medians. Speedups are per question, against transformers greedy on the same prompt:
decode phase (time after the first token, per generated token) and end to end.

Every mode runs with the loop stop users get (``loop_span``; 0 = off): ours through
``Budget.loop_span``, the transformers anchors through :class:`LoopStop`, the same
:class:`decoding.stopping.LoopDetector` as a ``StoppingCriteria``. Per-token numbers (speedups,
tokens/s, τ) count the tokens the user gets, i.e. the output cut before the repeats.

Anchors: transformers greedy, prompt lookup decoding (``prompt_lookup_num_tokens`` 3/5/10)
and assisted generation (``hf_assisted``: ``generate(assistant_model=<our draft model>)``,
Leviathan et al. 2023 as transformers implements it; it cannot use a compiled draft, which is
part of the comparison). The draft-model modes run only when a draft model is configured;
otherwise the report lists them under ``skipped`` with the reason.

Kernel-matched anchors (opt-in, ``--modes``): ``hf_pld_5_fk`` / ``hf_pld_10_fk`` run
transformers' prompt lookup with our few-token verification linears
(:mod:`decoding.backends.few_token_linear`) switched on, so the report separates what the cheaper
verification kernel buys from what the drafting policy buys. The goals' "best prompt
lookup" is transformers' own (``hf_pld_3/5/10``).

Per mode the report also shows who produced the tokens the user gets (``token_share``): for
our modes each drafter's accepted tokens and the target's own (first token, corrections,
bonus tokens), from the engine's stats; for the anchors the target's share is one token per
forward pass (prefill included) and the rest is the drafter's (prompt lookup, assistant).
"""

from __future__ import annotations

import contextlib
import logging
import resource
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from decoding import Budget, DraftingMode, GenerationConfig, Speculation, SpeculativeEngine
from decoding.backends.few_token_linear import few_token_passes
from decoding.backends.models import LoadedModel
from decoding.drafters.ngram import NGramDrafter
from decoding.stopping import LoopDetector, apply_stops
from evals.exactness import budget_for, stop_checker
from evals.harness import Case, plain_greedy_kwargs
from evals.llamacpp_anchor import LLAMACPP_MODES, generate_timed
from evals.oracle import bound, replay, schedule_ms, state_acceptance
from evals.stock_anchor import STOCK_MODE, StockAnchorUnavailable, stock_site

log = logging.getLogger(__name__)

HF_MODES = ("hf_greedy", "hf_pld_3", "hf_pld_5", "hf_pld_10", "hf_assisted")
KERNEL_MATCHED_MODES = ("hf_pld_5_fk", "hf_pld_10_fk")  # opt-in: see the module docstring
OUR_MODES = ("ours_off", "ours_ngram", "ours_draft_model", "ours_auto")
DRAFT_MODEL_MODES = ("hf_assisted", "ours_draft_model")  # need a draft model
NO_DRAFT_REASON = "no draft model is configured (set COPILOT_DRAFT_MODEL or pass --draft-model)"
# Who proposed the anchors' accepted tokens (the rest, one per forward pass, are the target's).
HF_DRAFTERS = {"hf_pld_3": "prompt_lookup", "hf_pld_5": "prompt_lookup", "hf_pld_10": "prompt_lookup",
               "hf_pld_5_fk": "prompt_lookup", "hf_pld_10_fk": "prompt_lookup", "hf_assisted": "assistant",
               "llamacpp_pld_2": "prompt_lookup", "llamacpp_pld_10": "prompt_lookup"}


@dataclass
class Run:
    """One timed generation.

    Attributes:
        tokens: the ids the user gets: generated ids cut by the stops (EOS, budget, loop stop).
        total_ms: wall time including prefill.
        ttft_ms: time to the first generated token.
        itl_ms: per-token inter-token latencies (a block of k tokens counts k × dt/k).
        passes: target forward passes in the decode phase (prefill excluded).
        proposed / accepted: drafted tokens (ours only).
        accepted_by_position / block_sizes: from our stats (plots).
        gammas: γ drafted per decode-phase pass (ours only; 0 = a plain step).
        finish_reason: ``"eos" | "length" | "repetition"`` (for the anchors: from the stops
            applied to their ids).
        generated: ids generated up to the stop decision, including those a loop stop cut
            away (not the anchors' ids past the token that completed the loop).
        produced: ``tokens`` per producer (a drafter's name or ``"target"``; see the module
            docstring for the anchors).
    """

    tokens: list[int]
    total_ms: float
    ttft_ms: float
    itl_ms: list[float]
    passes: int
    proposed: int = 0
    accepted: int = 0
    accepted_by_position: list[list[int]] = field(default_factory=list)
    block_sizes: list[int] = field(default_factory=list)
    gammas: list[int] = field(default_factory=list)
    overhead_ms: float = 0.0
    finish_reason: str | None = None
    generated: int = 0
    produced: dict[str, int] = field(default_factory=dict)

    @property
    def decode_ms_per_token(self) -> float:
        return (self.total_ms - self.ttft_ms) / max(len(self.tokens) - 1, 1)


class _TimingStreamer(BaseStreamer):
    """Records when ``generate`` hands over new tokens (the first put is the prompt)."""

    def __init__(self) -> None:
        self.times: list[tuple[float, int]] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.times.append((time.perf_counter(), int(value.numel())))

    def end(self) -> None:
        pass


class LoopStop(StoppingCriteria):
    """The loop stop for transformers ``generate``: feeds the ids generated after the
    prompt, one by one, to a :class:`LoopDetector`, and stops generation once it fires.

    With prompt lookup or assisted generation, criteria run once per verified block, so
    the output may run a few tokens past the token that completed the loop: callers cut it
    with :func:`decoding.stopping.apply_stops` (as :func:`run_hf` does).
    """

    def __init__(self, prompt_length: int, span: int) -> None:
        self.prompt_length = prompt_length
        self.detector = LoopDetector(span)
        self.output: list[int] = []
        self.fired = False

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        if not self.fired:
            for t in input_ids[0, self.prompt_length + len(self.output):].tolist():
                self.output.append(t)
                if self.detector.push(self.output):
                    self.fired = True
                    break
        return torch.full((input_ids.shape[0],), self.fired, dtype=torch.bool, device=input_ids.device)


class _PassCounter:
    """Counts forward calls of a model (a forward hook)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.count = 0
        self._handle = model.register_forward_hook(self._hook)

    def _hook(self, *args) -> None:
        self.count += 1

    def remove(self) -> None:
        self._handle.remove()


def _itl(start: float, events: list[tuple[float, int]]) -> list[float]:
    out, prev = [], None
    for t, n in events:
        if prev is not None and n > 0:
            out += [(t - prev) * 1000 / n] * n
        prev = t
    return out


@torch.inference_mode()
def run_hf(engine: SpeculativeEngine, mode: str, case: Case, max_new_tokens: int, loop_span: int = 0) -> Run:
    """transformers ``generate``: greedy, prompt lookup (N = 3/5/10; ``_fk``: with our
    few-token verification linears) or assisted, with the loop stop (:class:`LoopStop`) when
    ``loop_span`` > 0."""
    target = engine.target
    x = torch.tensor([case.prompt_ids], device=target.device)
    kernels = mode.endswith("_fk")
    base = mode.removesuffix("_fk")
    lookup = dict(prompt_lookup_num_tokens=int(base.rsplit("_", 1)[1])) if base.startswith("hf_pld_") else {}
    budget = budget_for(engine, case.prompt_ids, max_new_tokens)
    kwargs = plain_greedy_kwargs(engine, x, budget, **lookup)
    if mode == "hf_assisted":
        kwargs["assistant_model"] = engine.core.draft.model
    if loop_span > 0:
        kwargs["stopping_criteria"] = StoppingCriteriaList([LoopStop(len(case.prompt_ids), loop_span)])
    streamer = _TimingStreamer()
    counter = _PassCounter(target.model)
    try:
        t0 = time.perf_counter()
        with few_token_passes() if kernels else contextlib.nullcontext():
            out = target.model.generate(x, streamer=streamer, **kwargs)
        total = (time.perf_counter() - t0) * 1000
    finally:
        counter.remove()
    generated = out[0, len(case.prompt_ids):].tolist()
    # A verified block (prompt lookup, assisted) may run past the token that completed a loop,
    # and the loop stop cuts back to before the repeats: the user gets ``tokens``, the same
    # stops applied to the ids (as in the exactness reference), and per-token speeds count
    # only those. The passes and the time spent on the cut-away ids still count.
    stops = stop_checker(engine, budget, loop_span)
    tokens, finish = apply_stops(generated, stops)
    ttft = (streamer.times[0][0] - t0) * 1000 if streamer.times else total
    itl = _itl(t0, streamer.times)[:max(len(tokens) - 1, 0)]
    passes = max(counter.count - 1, 0)
    return Run(tokens, total, ttft, itl, passes, finish_reason=finish, generated=stops.generated,
               produced=anchor_produced(mode, len(tokens), passes))


def run_llamacpp(engine: SpeculativeEngine, mode: str, case: Case, max_new_tokens: int, loop_span: int = 0) -> Run:
    """llama.cpp's own generation (:mod:`evals.llamacpp_anchor`) on the target's GGUF: greedy or
    its prompt lookup, the same stops applied to its ids as to the other anchors'."""
    budget = budget_for(engine, case.prompt_ids, max_new_tokens)
    generated, times, passes, t0 = generate_timed(engine.target, mode, case.prompt_ids, budget)
    total = ((times[-1] if times else time.perf_counter()) - t0) * 1000
    stops = stop_checker(engine, budget, loop_span)
    tokens, finish = apply_stops(generated, stops)
    events = [(t, 1) for t in times]
    ttft = (times[0] - t0) * 1000 if times else total
    return Run(tokens, total, ttft, _itl(t0, events)[:max(len(tokens) - 1, 0)], passes, finish_reason=finish,
               generated=stops.generated, produced=anchor_produced(mode, len(tokens), passes))


def anchor_produced(mode: str, n_tokens: int, passes: int) -> dict[str, int]:
    """Who produced an anchor's ``n_tokens``: one token per target forward (the prefill's
    included, ``passes`` excluding it) is the target's, the rest its drafter's (none for greedy)."""
    target = min(n_tokens, passes + 1)
    drafter = HF_DRAFTERS.get(mode)
    return {k: v for k, v in (("target", target), (drafter, n_tokens - target)) if k and v}


def run_ours(engine: SpeculativeEngine, mode: str, case: Case, max_new_tokens: int, loop_span: int = 0) -> Run:
    """Our engine with drafting ``off``/``ngram``/``draft_model``/``auto`` (``ours_<DraftingMode>``)
    and ``loop_span``, with no parked prompt to reuse."""
    drafting = DraftingMode(mode.removeprefix("ours_"))
    config = GenerationConfig(budget=Budget(max_new_tokens=max_new_tokens, loop_span=loop_span),
                              speculation=Speculation(drafting=drafting))
    engine.core.prefix_cache.clear()  # every mode prefills its whole prompt, as the anchors do
    events: list[tuple[float, int]] = []
    t0 = time.perf_counter()
    result = None
    for ev in engine.stream(case.prompt_ids, config, case.context_ids):
        if ev.token_ids:
            events.append((time.perf_counter(), len(ev.token_ids)))
        result = ev.result or result
    total = (time.perf_counter() - t0) * 1000
    s = result.stats
    proposed = sum(d.proposed for d in s.drafters.values())
    accepted = sum(d.accepted for d in s.drafters.values())
    # After a loop stop the result's ids are a prefix of the committed ones: ITL covers the kept ids.
    tokens = result.token_ids
    return Run(tokens, total, s.ttft_ms, _itl(t0, events)[:max(len(tokens) - 1, 0)], s.target_passes, proposed,
               accepted, s.accepted_by_position, s.block_sizes, s.gammas, s.overhead_ms, result.finish_reason,
               len(tokens) + s.loop_cut_tokens, s.produced)


def latency_modes(engine: SpeculativeEngine) -> list[str]:
    """The default modes for this engine.

    Assisted generation and the draft-model modes need a draft model. Without one,
    ``ours_ngram`` is the very configuration ``ours_auto`` runs (the policy with the n-gram
    drafter only), so it is timed once, as ``ours_auto`` (see :func:`mode_aliases`).
    ``ours_off`` (our loop without drafting: its overhead vs ``hf_greedy``) is opt-in.
    A target on llama.cpp is timed against llama.cpp's own greedy and prompt lookup
    (:data:`~evals.llamacpp_anchor.LLAMACPP_MODES`), with ``ours_off`` (the backend's plain
    decode step in our loop) beside ``ours_auto``.
    """
    if not isinstance(engine.target, LoadedModel):
        return [*(m for m in LLAMACPP_MODES if m not in skipped_modes(engine)), "ours_off", "ours_auto"]
    if engine.core.draft is None:
        return [m for m in HF_MODES if m != "hf_assisted"] + ["ours_auto"]
    hf = [m for m in HF_MODES if m not in skipped_modes(engine)]
    return hf + ["ours_ngram", "ours_draft_model", "ours_auto"]


#: Why ``hf_assisted`` cannot time a draft that is not a transformers model.
LEAN_DRAFT_REASON = ("the draft model runs on a lean forward outside transformers (derived:int4), which "
                     "assisted generation cannot take as its assistant")


def skipped_modes(engine: SpeculativeEngine) -> dict[str, str]:
    """``{mode: why it is not timed}``: the draft-model modes when no draft model is configured;
    ``hf_assisted`` when the draft is not a transformers model; on llama.cpp, the stock build's
    anchor when none is installed (:func:`evals.stock_anchor.stock_site`)."""
    if not isinstance(engine.target, LoadedModel):
        try:
            stock_site()
        except StockAnchorUnavailable as e:
            return {STOCK_MODE: str(e)}
        return {}
    if engine.core.draft is None:
        return {m: NO_DRAFT_REASON for m in DRAFT_MODEL_MODES}
    if not isinstance(engine.core.draft.model, PreTrainedModel):
        return {"hf_assisted": LEAN_DRAFT_REASON}
    return {}


def mode_aliases(engine: SpeculativeEngine, modes: list[str]) -> dict[str, str]:
    """``{mode not timed: the timed mode with the same configuration}``."""
    if engine.core.draft is None and "ours_auto" in modes and "ours_ngram" not in modes:
        return {"ours_ngram": "ours_auto"}
    return {}


def base_mode(engine: SpeculativeEngine) -> str:
    """The mode every speedup is measured against: the target backend's own plain greedy
    (``hf_greedy`` on torch, ``llamacpp_greedy`` on llama.cpp)."""
    return "hf_greedy" if isinstance(engine.target, LoadedModel) else "llamacpp_greedy"


def _run(engine: SpeculativeEngine, mode: str, case: Case, max_new_tokens: int, loop_span: int) -> Run:
    if mode.startswith("hf_"):
        return run_hf(engine, mode, case, max_new_tokens, loop_span)
    if mode.startswith("llamacpp_"):
        return run_llamacpp(engine, mode, case, max_new_tokens, loop_span)
    return run_ours(engine, mode, case, max_new_tokens, loop_span)


def copied_fraction(tokens: list[int], case: Case, n: int = 4) -> float:
    """Fraction of answer tokens inside an n-gram that also occurs in the prompt or passages."""
    if len(tokens) < n:
        return 0.0
    grams = set()
    for src in [case.prompt_ids, *case.context_ids]:
        grams.update(tuple(src[i:i + n]) for i in range(len(src) - n + 1))
    covered = [False] * len(tokens)
    for i in range(len(tokens) - n + 1):
        if tuple(tokens[i:i + n]) in grams:
            for j in range(i, i + n):
                covered[j] = True
    return sum(covered) / len(tokens)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def run_latency(engine: SpeculativeEngine, cases: list[Case], max_new_tokens: int, repeats: int = 1,
                modes: list[str] | None = None, loop_span: int = 0) -> dict:
    """Interleaved timing of every mode on every case, each with the loop stop ``loop_span``
    (0 = off).

    Returns:
        JSON-able dict; top-level keys ``speedup`` ({mode: {"median", "min"}}, decode
        phase), ``speedup_e2e``, ``tau``, ``alpha``, ``tokens_per_s``, ``ttft_ms``, ``ttft_ratio``
        (:func:`ttft_ratios`, over the baseline),
        ``itl_ms``, ``exact_vs_greedy`` (runs whose ids equal hf_greedy's, both cut by the
        stops), ``loop_stopped`` (runs ending with ``"repetition"``), ``loop_cut_tokens``
        (ids generated then cut away), ``runs`` (per mode: questions × repeats),
        ``overhead_pct``, ``memory``, ``per_question``, ``acceptance_by_position``,
        ``block_sizes``, ``aliases``, ``policy_states`` (the acceptance per drafting state
        the engine measured), ``loop_span``, ``token_share`` (per mode: share of the tokens
        users get that each producer made, see the module docstring), ``skipped`` (modes not
        timed, with the reason).

    Raises:
        ValueError: an unknown mode name, or a draft-model mode without a draft model.
    """
    modes = list(modes or latency_modes(engine))
    base = base_mode(engine)
    if base not in modes:
        modes = [base] + modes
    torch_target = isinstance(engine.target, LoadedModel)
    known = (*HF_MODES, *KERNEL_MATCHED_MODES, *OUR_MODES) if torch_target else (*LLAMACPP_MODES, *OUR_MODES)
    unknown = [m for m in modes if m not in known]
    if unknown:
        raise ValueError(f"unknown latency modes {unknown} for a {engine.target.backend} target; known: "
                         f"{', '.join(known)}")
    if engine.core.draft is None and any(m in DRAFT_MODEL_MODES for m in modes):
        raise ValueError(f"modes {[m for m in modes if m in DRAFT_MODEL_MODES]} need a draft model; none is loaded")
    if "hf_assisted" in modes and "hf_assisted" in skipped_modes(engine):
        raise ValueError(f"hf_assisted: {LEAN_DRAFT_REASON}")
    skipped = {m: why for m, why in skipped_modes(engine).items() if m not in modes}
    for mode in list(modes):  # warm-up: one short pass each; a stock build that cannot run here is skipped
        try:
            _run(engine, mode, cases[0], min(8, max_new_tokens), loop_span)
        except StockAnchorUnavailable as e:
            log.warning("%s skipped: %s", mode, e)
            modes.remove(mode)
            skipped[mode] = str(e)
    runs: dict[str, dict[str, list[Run]]] = {m: {} for m in modes}
    for qi, case in enumerate(cases):
        for rep in range(repeats):
            shift = (qi + rep) % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                runs[mode].setdefault(case.question.id, []).append(
                    _run(engine, mode, case, max_new_tokens, loop_span))
        log.info("%s timed (%d/%d)", case.question.id, qi + 1, len(cases))
    out = summarize(runs, cases, base)
    if "ours_auto" in modes:
        out["oracle"] = oracle_summary(engine, cases, runs, out["per_question"], base)
    out["baseline"] = base
    out["aliases"] = mode_aliases(engine, modes)
    out["skipped"] = skipped
    out["policy_states"] = engine.core.acceptance.snapshot()
    out["loop_span"] = loop_span
    return out


def oracle_summary(engine: SpeculativeEngine, cases: list[Case], runs: dict[str, dict[str, list[Run]]],
                   per_question: list[dict], baseline: str) -> dict:
    """``ours_auto`` against its own bound (:mod:`evals.oracle`): per question, the speedup of the
    hindsight schedule over one-token steps (the n-gram drafter's proposals on the greedy answer,
    the engine's measured pass costs at the prompt's length) and ``ours_auto``'s measured decode
    speedup as a share of it. The measured speedup is over ``ours_off`` (our loop's one-token steps,
    what the bound prices) when it was timed, else over ``baseline``.

    Beside it, ``policy_share``: the schedule ``ours_auto`` ran (its γ per pass, the median run's)
    priced like the bound (:func:`~evals.oracle.schedule_ms`), as a share of the bound. It has no
    timing noise and says what the policy's choices cost; the measured share adds what the pass
    costs' model misses (and the noise of timing a short answer). And ``states``: the drafter's
    acceptance per state at every decode position of every question
    (:func:`~evals.oracle.state_acceptance`), what the policy's priors are read from."""
    num_speculative_tokens = len(engine.core.costs.verify_ms) - 1  # the γ ceiling its costs are calibrated for
    plain = "ours_off" if "ours_off" in runs else baseline
    drafter = next(d for d in engine.core.drafters if isinstance(d, NGramDrafter))
    rows, positions = [], []
    for case, row in zip(cases, per_question):
        greedy = runs[baseline][case.question.id][0].tokens
        costs = engine.core.cost_model(len(case.prompt_ids))
        replayed = replay(drafter, case.prompt_ids, case.context_ids, greedy, num_speculative_tokens)
        positions += replayed
        b = bound([p.accepted for p in replayed], greedy, costs)
        ours = row["modes"]["ours_auto"]["speedup"] / row["modes"][plain]["speedup"]
        ran = sorted(runs["ours_auto"][case.question.id], key=lambda r: r.decode_ms_per_token)
        policy_ms = schedule_ms(ran[len(ran) // 2].gammas, costs)
        policy = b.plain_ms / policy_ms if policy_ms else 1.0
        rows.append({"id": case.question.id, "tokens": b.tokens, "oracle_speedup": round(b.speedup, 3),
                     "oracle_drafted": b.drafted, "ours_auto_speedup": round(ours, 3),
                     "share": round(ours / b.speedup, 3), "policy_share": round(policy / b.speedup, 3)})
    med = statistics.median
    return {"over": plain, "gamma_max": num_speculative_tokens, "per_question": rows,
            "oracle_speedup_median": round(med(r["oracle_speedup"] for r in rows), 3),
            "ours_auto_share_median": round(med(r["share"] for r in rows), 3),
            "ours_auto_share_min": round(min(r["share"] for r in rows), 3),
            "policy_share_median": round(med(r["policy_share"] for r in rows), 3),
            "policy_share_min": round(min(r["policy_share"] for r in rows), 3),
            "states": state_acceptance(positions)}


def summarize(runs: dict[str, dict[str, list[Run]]], cases: list[Case], baseline: str = "hf_greedy") -> dict:
    """Medians and ratios per mode from the raw runs (see :func:`run_latency`), against ``baseline``."""
    base = runs[baseline]
    out: dict = {k: {} for k in ("speedup", "speedup_e2e", "tau", "alpha", "tokens_per_s", "ttft_ms", "itl_ms",
                                 "exact_vs_greedy", "loop_stopped", "loop_cut_tokens", "runs", "overhead_pct",
                                 "acceptance_by_position", "block_sizes", "token_share")}
    per_question = [_question_row(runs, case, baseline) for case in cases]
    for mode, by_q in runs.items():
        for key, value in _mode_summary(mode, by_q, base, per_question).items():
            out[key][mode] = value
    out["ttft_ratio"] = ttft_ratios(per_question, baseline)
    out["memory"] = _memory()
    out["per_question"] = per_question
    out["modes"] = list(runs)
    return out


def _question_row(runs: dict[str, dict[str, list[Run]]], case: Case, baseline: str) -> dict:
    """One question: per mode its median speedups over ``baseline`` (run i against run i)."""
    med = statistics.median
    qid = case.question.id
    base = runs[baseline][qid]
    row = {"id": qid, "copied_fraction": round(copied_fraction(base[0].tokens, case), 3), "modes": {}}
    for mode, by_q in runs.items():
        rs = by_q[qid]
        row["modes"][mode] = {
            "speedup": round(med(base[i % len(base)].decode_ms_per_token / r.decode_ms_per_token
                                 for i, r in enumerate(rs)), 3),
            "speedup_e2e": round(med(base[i % len(base)].total_ms / r.total_ms for i, r in enumerate(rs)), 3),
            "ttft_ms": round(med(r.ttft_ms for r in rs), 1),
            "tokens": len(rs[0].tokens),
            "finish_reason": rs[0].finish_reason,
        }
    return row


def ttft_ratios(per_question: list[dict], anchor: str) -> dict:
    """Each mode's TTFT ÷ ``anchor``'s on the same prompt: per question the ratio of the two modes'
    median TTFT, then the median and the worst (largest) over questions.

    Paired per question because prompts of 500–1,700 tokens spread TTFT over 3× while two prefills
    of one prompt differ by a few per cent: the ratio of the medians over all runs (the table's
    ``TTFT ms`` column) can pick two different questions' runs and read a gap neither prompt has.

    Returns:
        ``{"over": anchor, "modes": {mode: {"median", "max"}}}``; ``modes`` is empty where no
        question has a TTFT for the anchor.
    """
    ratios: dict[str, list[float]] = {}
    for row in per_question:
        ref = row["modes"].get(anchor, {}).get("ttft_ms")
        for mode, q in row["modes"].items():
            if ref:
                ratios.setdefault(mode, []).append(q["ttft_ms"] / ref)
    return {"over": anchor, "modes": {m: {"median": round(statistics.median(r), 3), "max": round(max(r), 3)}
                                       for m, r in ratios.items()}}


def _mode_summary(mode: str, by_q: dict[str, list[Run]], base: dict[str, list[Run]],
                  per_question: list[dict]) -> dict:
    """One mode's figures (the keys of :func:`summarize`'s output)."""
    med = statistics.median
    all_runs = [r for rs in by_q.values() for r in rs]
    sp = [row["modes"][mode]["speedup"] for row in per_question]
    sp_e2e = [row["modes"][mode]["speedup_e2e"] for row in per_question]
    decode_tokens = sum(max(len(r.tokens) - 1, 0) for r in all_runs)
    passes = sum(r.passes for r in all_runs)
    proposed = sum(r.proposed for r in all_runs)
    itl = [x for r in all_runs for x in r.itl_ms]
    produced: Counter[str] = Counter()
    for r in all_runs:
        produced.update(r.produced)
    total = sum(produced.values())
    decode_ms = sum(r.total_ms - r.ttft_ms for r in all_runs)
    ours = mode.startswith("ours_")
    return {
        "speedup": {"median": round(med(sp), 3), "min": round(min(sp), 3)},
        "speedup_e2e": {"median": round(med(sp_e2e), 3), "min": round(min(sp_e2e), 3)},
        "tau": round(decode_tokens / passes, 3) if passes else None,
        "alpha": round(sum(r.accepted for r in all_runs) / proposed, 3) if proposed else None,
        "tokens_per_s": round(med(len(r.tokens) / (r.total_ms / 1000) for r in all_runs), 2),
        "ttft_ms": round(med(r.ttft_ms for r in all_runs), 1),
        "itl_ms": {"p50": _round(_pct(itl, 0.5)), "p95": _round(_pct(itl, 0.95))},
        "exact_vs_greedy": sum(r.tokens == base[q][0].tokens for q, rs in by_q.items() for r in rs),
        "loop_stopped": sum(r.finish_reason == "repetition" for r in all_runs),
        "loop_cut_tokens": sum(r.generated - len(r.tokens) for r in all_runs),
        "runs": len(all_runs),
        "token_share": {who: round(n / total, 3) for who, n in sorted(produced.items())} if total else {},
        "overhead_pct": round(100 * sum(r.overhead_ms for r in all_runs) / decode_ms, 2) if ours and decode_ms
        else None,
        **({"acceptance_by_position": _acceptance_by_position(all_runs),
            "block_sizes": [b for r in all_runs for b in r.block_sizes]} if ours else {}),
    }


def _acceptance_by_position(runs: list[Run]) -> list[float | None]:
    """α at each draft position over ``runs``."""
    acc: list[list[int]] = []
    for r in runs:
        for i, (p, a) in enumerate(r.accepted_by_position):
            if i >= len(acc):
                acc.append([0, 0])
            acc[i][0] += p
            acc[i][1] += a
    return [round(a / p, 3) if p else None for p, a in acc]


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _memory() -> dict:
    """Peak process RSS (MiB; whole run, all modes share one process) and CUDA peak if any."""
    mem = {"peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if torch.cuda.is_available():
        mem["cuda_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return mem
