"""Exactness eval: every decoding mode against the target backend's plain greedy.

On torch the reference is transformers ``generate(do_sample=False)``; on llama.cpp it is the
backend's own greedy, one token per forward (:func:`seam_greedy`), itself checked against
llama-cpp-python's ``Llama.generate(temp=0)`` (:func:`library_greedy`): the reference depends on
the backend that runs the target.

The contract checked (README.md, "The exactness contract"): a mode's ids equal plain
greedy's ids cut by the same stops at one commit boundary — EOS, ``max_new_tokens`` and,
when on, the loop stop (:class:`decoding.stopping.LoopDetector`): the reference is
transformers' plain greedy output run through :func:`decoding.stopping.apply_stops` with a
fresh :class:`~decoding.stopping.StopChecker` of the same settings, and the finish reason
must match too.

"Plain greedy" includes the generation settings every mode decodes with (the reference is
``generate()`` with the same effective settings): the checkpoint's own
``generation_config`` (e.g. Qwen2.5-Instruct's ``repetition_penalty`` 1.05) plus any
request fields passed as ``generation`` (:func:`run_exactness`), resolved once by
:func:`decoding.logits.effective_settings`. ``generate()`` gets the built-in ones as its
own kwargs (it builds its own processors from them) and OpenAI's ``logit_bias`` /
penalties as ``logits_processor``; the report and the log show the effective settings.

For each divergence it reports the question, the mode, the position and the target's
top-1/top-2 logit margin at that position in the reference, so a numerical near-tie
(tiny margin, e.g. bf16) is told apart from a bug (large margin). A divergence where no
token differs but the output ends elsewhere or for another reason is a ``"stop"``
divergence (no margin: always a bug).

Batched modes (``mode@bN``, :func:`run_exactness` ``batch_sizes``) decode every case through
one :class:`decoding.batch.Batch` with up to N running at once, one request joining per round
(so requests join and leave in the middle of others' answers), and hold each to its own
solo reference: a request's output equals plain greedy of that request alone.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from decoding import Budget, DraftingMode, GenerationConfig, Sampling, Speculation, SpeculativeEngine
from decoding.backends.llamacpp import LlamaCppModel
from decoding.backends.models import LoadedModel
from decoding.backends.target import Target
from decoding.logits import LogitsSettings, effective_settings
from decoding.request import GenerationResult
from decoding.stopping import StopChecker, apply_stops
from evals.harness import Case, plain_greedy_kwargs

log = logging.getLogger(__name__)


@dataclass
class Divergence:
    """First position where a mode's output departs from the reference.

    ``kind`` is ``"token"`` (a different id at ``position``; ``margin`` is the reference's
    top-1 minus top-2 logit there) or ``"stop"`` (the same ids, but the output ends at
    another position or with another finish reason; ``margin`` is None).
    """

    question_id: str
    question: str
    mode: str
    position: int
    reference_token: int | None
    got_token: int | None
    margin: float | None  # reference top-1 minus top-2 logit at that position
    kind: str = "token"
    reference_finish: str | None = None
    got_finish: str | None = None


@dataclass
class Reference:
    """Plain greedy for one prompt: ``generate()``'s ids (``raw``), what the stops keep
    (``token_ids``, ``finish_reason``) and how many raw ids the stops read before ending
    (``decided``: past the loop stop's cut, up to the token that completed the loop)."""

    raw: list[int]
    token_ids: list[int]
    finish_reason: str
    decided: int


def modes_for(engine: SpeculativeEngine) -> list[str]:
    """Our modes (:class:`DraftingMode` values): speculation off, each single-drafter mode the
    engine has a drafter for (n-gram only, draft model only when loaded), the policy."""
    names = {d.name for d in engine.core.drafters}
    order = (DraftingMode.OFF, DraftingMode.NGRAM, DraftingMode.DRAFT_MODEL, DraftingMode.AUTO)
    return [m.value for m in order if not m.single or m.value in names]


def budget_for(engine: SpeculativeEngine, prompt_ids: list[int], max_new_tokens: int) -> int:
    """The engine's budget: ``max_new_tokens`` clipped to the context window."""
    return min(max_new_tokens, engine.target.max_positions - len(prompt_ids))


def stop_checker(engine: SpeculativeEngine, budget: int, loop_span: int) -> StopChecker:
    """A fresh checker with the stop settings the eval decodes with (the engine's EOS ids,
    no stop strings, ``budget``, ``loop_span``)."""
    target = engine.target
    return StopChecker(target.tokenizer, frozenset(target.eos_token_ids()), (), budget, loop_span)


def settings_for(engine: SpeculativeEngine, generation: dict | None = None) -> LogitsSettings:
    """The effective logits settings every mode decodes with: the request fields in
    ``generation`` (:class:`~decoding.config.Sampling` names, e.g. ``{"repetition_penalty": 1.2}``)
    over the checkpoint's ``generation_config``.

    Raises:
        GenerationSettingError: a bad value, or a checkpoint setting the engine refuses.
    """
    target = engine.target
    config = GenerationConfig(sampling=Sampling(**(generation or {})))
    return effective_settings(config, target.generation_defaults, target.vocab_size)


@torch.inference_mode()
def reference_greedy(engine: SpeculativeEngine, prompt_ids: list[int], max_new_tokens: int,
                     settings: LogitsSettings | None = None) -> list[int]:
    """Plain greedy ids with the effective ``settings`` (default: the checkpoint's,
    :func:`settings_for`) and the engine's EOS, from the target's backend itself: transformers
    ``generate()`` for a torch target, one token per forward through the seam for any other
    (:func:`seam_greedy`; llama.cpp's is checked against its own ``Llama.generate`` by
    :func:`library_greedy`)."""
    settings = settings or settings_for(engine)
    target = engine.target
    if not isinstance(target, LoadedModel):
        return seam_greedy(target, prompt_ids, max_new_tokens, settings)
    x = torch.tensor([prompt_ids], device=target.device)
    kwargs = plain_greedy_kwargs(engine, x, max_new_tokens, **settings.generate_kwargs())
    out = target.model.generate(x, logits_processor=settings.custom_processors(len(prompt_ids)), **kwargs)
    return out[0, len(prompt_ids):].tolist()


@torch.inference_mode()
def seam_greedy(target: Target, prompt_ids: list[int], max_new_tokens: int, settings: LogitsSettings) -> list[int]:
    """The backend's plain greedy: prefill, then one token per forward, the argmax of the logits
    after ``settings``' processors, until EOS or ``max_new_tokens`` (EOS included)."""
    eos = set(target.eos_token_ids())
    processors = settings.processors(len(prompt_ids), tuple(eos), target.device)
    cache = target.new_cache(len(prompt_ids) + max_new_tokens)
    out: list[int] = []
    try:
        logits = target.prefill(prompt_ids, cache)
        while len(out) < max_new_tokens:
            if settings.active:
                ids = torch.tensor([prompt_ids + out], device=target.device)
                logits = processors(ids, logits[None].float())[0]
            out.append(int(logits.argmax()))
            if out[-1] in eos or len(out) == max_new_tokens:
                break
            logits = target.forward([([out[-1]], cache)])[0][-1]
    finally:
        target.release(cache)
    return out


def library_greedy(target: Target, prompt_ids: list[int], max_new_tokens: int) -> list[int] | None:
    """llama-cpp-python's own greedy, ``Llama.generate(temp=0)`` on the target's GGUF with its
    threads (EOS included, at most ``max_new_tokens``): the independent check of
    :func:`seam_greedy` on the llama.cpp backend. ``None`` for a torch target (its reference is
    the library's ``generate()`` already)."""
    if not isinstance(target, LlamaCppModel):
        return None
    from evals.llamacpp_anchor import anchor

    llm = anchor(target, None, len(prompt_ids) + max_new_tokens)
    llm.reset()
    eos, out = set(target.eos_token_ids()), []
    for token in llm.generate(prompt_ids, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
        out.append(int(token))
        if token in eos or len(out) >= max_new_tokens:
            break
    return out


def library_prompt_logits(target: LlamaCppModel, prompt_ids: list[int]) -> torch.Tensor:
    """The logits of ``prompt_ids``' last position as llama-cpp-python's own ``Llama.eval`` leaves
    them (its default batch, the last row's logits only, as ``Llama.generate`` asks), float32
    ``(vocab,)``: to hold :meth:`LlamaCppModel.prefill <decoding.backends.llamacpp.LlamaCppModel.prefill>`
    to, bit for bit."""
    import llama_cpp

    from evals.llamacpp_anchor import anchor

    llm = anchor(target, None, len(prompt_ids) + 1)
    llm.reset()
    llm.eval(prompt_ids)
    row = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return torch.from_numpy(np.ctypeslib.as_array(row, shape=(target.vocab_size,)).copy())


def reference(engine: SpeculativeEngine, prompt_ids: list[int], max_new_tokens: int, loop_span: int = 0,
              settings: LogitsSettings | None = None) -> Reference:
    """Plain greedy ``generate()`` (with the effective ``settings``) through
    :func:`apply_stops`: what every mode must emit."""
    budget = budget_for(engine, prompt_ids, max_new_tokens)
    raw = reference_greedy(engine, prompt_ids, budget, settings) if budget > 0 else []
    checker = stop_checker(engine, budget, loop_span)
    ids, reason = apply_stops(raw, checker)
    return Reference(raw, ids, reason or "length", checker.generated)


@torch.inference_mode()
def logit_margin(engine: SpeculativeEngine, prefix: list[int], settings: LogitsSettings | None = None,
                 prompt_length: int = 0) -> float:
    """Top-1 minus top-2 logit of the target after ``prefix`` (one prefill), after the logits
    processors of ``settings`` when given (``prompt_length``: the prompt's part of ``prefix``),
    since those are the scores greedy decoding compared."""
    target = engine.target
    cache = target.new_cache(len(prefix))
    try:
        logits = target.prefill(prefix, cache)[None].float()
    finally:
        target.release(cache)
    if settings is not None and settings.active:
        ids = torch.tensor([prefix], device=target.device)
        logits = settings.processors(prompt_length, target.eos_token_ids(), target.device)(ids, logits)
    top = torch.topk(logits[0], 2).values
    return float(top[0] - top[1])


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first difference between two id lists (None if equal)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def first_token_mismatch(a: list[int], b: list[int]) -> int | None:
    """Index of the first position where both lists have an id and the ids differ."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def _decode(engine: SpeculativeEngine, case: Case, config: GenerationConfig):
    """The result and every id the engine committed, in order, with nothing parked to reuse
    (a solo decode prefills its whole prompt). After a loop stop the result's ids are a prefix
    of the committed ones, which show where a cut-away token first differed."""
    engine.core.prefix_cache.clear()
    return _decode_as_is(engine, case, config)


def _decode_as_is(engine: SpeculativeEngine, case: Case, config: GenerationConfig):
    """As :func:`_decode`, reusing whatever the engine's prefix cache holds."""
    committed: list[int] = []
    result = None
    for ev in engine.stream(case.prompt_ids, config, case.context_ids):
        committed += ev.token_ids
        result = ev.result or result
    return result, committed


def _decode_batched(engine: SpeculativeEngine, cases: list[Case], config: GenerationConfig,
                    batch_size: int) -> list[tuple]:
    """Every case through one batch of at most ``batch_size``, one joining per round while
    there is room: per case, ``(result, committed ids, largest batch it shared)``."""
    batch, pending = engine.batch(), list(enumerate(cases))
    out: list[tuple] = [()] * len(cases)
    committed: list[list[int]] = [[] for _ in cases]
    index: dict[int, int] = {}

    def record(i: int, event) -> None:
        committed[i] += event.token_ids
        if event.result is not None:
            out[i] = (event.result, committed[i], event.result.stats.max_batch_size)

    while pending or batch.active:
        if pending and len(batch) < batch_size:
            i, case = pending.pop(0)
            state, events = batch.add(case.prompt_ids, config, case.context_ids)
            index[id(state)] = i
            for event in events:
                record(i, event)
        for state, event in batch.step():
            record(index[id(state)], event)
    return out


#: The prefix-reuse variants of every mode: a prompt sharing the first half of the case's prompt
#: was decoded just before (``@prefix``: its whole prefill chunks are reused), or the same prompt
#: was (``@again``: nothing is prefilled).
REUSE_VARIANTS = ("prefix", "again")


def _decode_reusing(engine: SpeculativeEngine, case: Case, config: GenerationConfig, variant: str):
    """Decode ``case`` after parking what ``variant`` names (:data:`REUSE_VARIANTS`); the
    result, the committed ids and the prompt positions reused."""
    engine.core.prefix_cache.clear()
    if variant == "prefix":
        half = case.prompt_ids[:max(1, len(case.prompt_ids) // 2)]
        engine.generate(half, GenerationConfig(budget=Budget(max_new_tokens=1)))
    else:
        _decode_as_is(engine, case, config)
    result, committed = _decode_as_is(engine, case, config)
    return result, committed, result.stats.prefix_reused_tokens


def compare(engine: SpeculativeEngine, case: Case, mode: str, ref: Reference, got: list[int], got_finish: str,
            committed: list[int], settings: LogitsSettings | None = None) -> Divergence | None:
    """None when ``got`` (and its finish reason) is the reference's; else the divergence.

    A token that differs from plain greedy's before the reference's stop decision is
    reported first (with its margin), even when a loop stop later cut it away; otherwise it
    is a stop divergence (the output should have ended, or ended too early).
    """
    if got == ref.token_ids and got_finish == ref.finish_reason:
        return None
    q = case.question
    pos = first_token_mismatch(ref.raw[:ref.decided], committed)
    if pos is not None:
        margin = round(logit_margin(engine, case.prompt_ids + ref.raw[:pos], settings, len(case.prompt_ids)), 6)
        return Divergence(q.id, q.question, mode, pos, ref.raw[pos], committed[pos], margin, "token",
                          ref.finish_reason, got_finish)
    pos = first_difference(ref.token_ids, got)
    pos = min(len(got), len(ref.token_ids)) if pos is None else pos
    return Divergence(q.id, q.question, mode, pos, ref.token_ids[pos] if pos < len(ref.token_ids) else None,
                      got[pos] if pos < len(got) else None, None, "stop", ref.finish_reason, got_finish)


def _outcome(result, div: Divergence | None) -> dict:
    """One mode's row entry: identical or where it diverged, length, finish reason, τ."""
    out = {"exact": div is None, "new_tokens": len(result.token_ids), "finish_reason": result.finish_reason,
           "tau": round(result.stats.tau, 3)}
    if div is not None:
        out["divergence_at"] = div.position
    return out


def _book(div: Divergence | None, divergences: list[Divergence]) -> None:
    """Keep and log a divergence (nothing for an identical answer)."""
    if div is None:
        return
    divergences.append(div)
    log.warning("divergence (%s): %s mode=%s pos=%d margin=%s", div.kind, div.question_id, div.mode, div.position,
                div.margin)


def run_exactness(engine: SpeculativeEngine, cases: list[Case], max_new_tokens: int,
                  modes: list[str] | None = None, loop_span: int = 0, generation: dict | None = None,
                  batch_sizes: tuple[int, ...] = (), prefix_reuse: bool = True) -> dict:
    """Decode every case in every mode and compare with the reference.

    Args:
        batch_sizes: also decode all cases in every mode through a batch of each size
            (modes ``"{mode}@b{size}"``; see :func:`_decode_batched`), each against its solo reference.
        prefix_reuse: also decode every case in every mode reusing a parked prompt's KV cache
            (modes ``"{mode}@prefix"`` and ``"{mode}@again"``, :data:`REUSE_VARIANTS`; each
            entry gives ``reused_tokens``), against the same reference. The solo modes reuse nothing.
        loop_span: the loop stop's span for every mode and the reference (0 = no loop stop).
        generation: extra :class:`~decoding.config.Sampling` fields for every mode (logits settings such
            as ``{"repetition_penalty": 1.2, "logit_bias": {...}}``); the reference is
            ``generate()`` with the same effective settings (these over the checkpoint's).

    Returns:
        JSON-able dict with top-level keys ``cases`` (per case: the reference's length, the
        ids greedy generates until the stops end it, its finish reason, and per mode the
        outcome), ``modes``, ``backend`` (the target's), ``library_greedy`` (on llama.cpp: how
        many references equal / differ from ``Llama.generate(temp=0)``), ``loop_span``,
        ``reference_finish`` ({finish reason: cases}),
        ``exact`` (per mode: number of identical answers), ``loop_stopped`` (per mode:
        answers ending with ``"repetition"``), ``divergences`` (list of :class:`Divergence`
        dicts), ``generation_settings`` (the effective settings, also logged).

    Raises:
        GenerationSettingError: a bad ``generation`` value, or a checkpoint setting the engine refuses.
    """
    modes = modes or modes_for(engine)
    generation = dict(generation or {})
    settings = settings_for(engine, generation)
    log.info("generation settings (the engine and the generate() reference): %s", settings.to_dict())
    tally = _Tally({m: 0 for m in modes}, {m: 0 for m in modes})
    reference_finish: Counter[str] = Counter()
    rows, references = [], {}
    library: Counter[str] = Counter()  # the backend's greedy against the library's own
    for case in cases:
        t0 = time.perf_counter()
        ref = references[case.question.id] = reference(engine, case.prompt_ids, max_new_tokens, loop_span, settings)
        reference_finish[ref.finish_reason] += 1
        row = {"id": case.question.id, "question": case.question.question, "prompt_tokens": len(case.prompt_ids),
               "reference_tokens": len(ref.token_ids), "reference_generated": ref.decided,
               "reference_finish": ref.finish_reason, "modes": {}}
        own = library_greedy(engine.target, case.prompt_ids, len(ref.raw)) if not settings.active else None
        if own is not None:
            row["library_identical"] = own == ref.raw
            library["identical" if own == ref.raw else "different"] += 1
        for mode in modes:
            config = GenerationConfig(sampling=Sampling(**generation),
                                      budget=Budget(max_new_tokens=max_new_tokens, loop_span=loop_span),
                                      speculation=Speculation(drafting=mode))
            result, committed = _decode(engine, case, config)
            div = compare(engine, case, mode, ref, result.token_ids, result.finish_reason, committed, settings)
            row["modes"][mode] = tally.add(mode, result, div)
            for variant in REUSE_VARIANTS if prefix_reuse else ():
                label = f"{mode}@{variant}"
                result, committed, reused = _decode_reusing(engine, case, config, variant)
                div = compare(engine, case, label, ref, result.token_ids, result.finish_reason, committed, settings)
                row["modes"][label] = {**tally.add(label, result, div), "reused_tokens": reused}
        rows.append(row)
        log.info("%s done in %.1f s", case.question.id, time.perf_counter() - t0)
    engine.core.prefix_cache.clear()
    for size in batch_sizes:
        for mode in modes:
            config = GenerationConfig(sampling=Sampling(**generation),
                                      budget=Budget(max_new_tokens=max_new_tokens, loop_span=loop_span),
                                      speculation=Speculation(drafting=mode))
            _run_batched(engine, cases, rows, references, config, size, settings, tally)
    return {"cases": rows, "modes": list(tally.exact), "loop_span": loop_span, "backend": engine.target.backend,
            "library_greedy": dict(library),
            "reference_finish": dict(reference_finish), "exact": tally.exact, "loop_stopped": tally.loop_stopped,
            "divergences": [asdict(d) for d in tally.divergences], "generation_settings": settings.to_dict()}


@dataclass
class _Tally:
    """Per mode: identical answers and loop stops; every divergence."""

    exact: dict[str, int] = field(default_factory=dict)
    loop_stopped: dict[str, int] = field(default_factory=dict)
    divergences: list[Divergence] = field(default_factory=list)

    def add(self, label: str, result: GenerationResult, div: Divergence | None) -> dict:
        """Book one answer of mode ``label``; returns its outcome for the row."""
        self.exact[label] = self.exact.get(label, 0) + (div is None)
        self.loop_stopped[label] = self.loop_stopped.get(label, 0) + (result.finish_reason == "repetition")
        _book(div, self.divergences)
        return _outcome(result, div)


def _run_batched(engine: SpeculativeEngine, cases: list[Case], rows: list[dict], references: dict[str, Reference],
                 config: GenerationConfig, size: int, settings: LogitsSettings, tally: _Tally) -> None:
    """Every case through batches of ``size`` (mode ``{drafting}@b{size}``), each against its solo reference."""
    label = f"{config.speculation.drafting.value}@b{size}"
    tally.exact.setdefault(label, 0)
    tally.loop_stopped.setdefault(label, 0)
    t0 = time.perf_counter()
    for case, row, (result, committed, shared) in zip(cases, rows, _decode_batched(engine, cases, config, size)):
        ref = references[case.question.id]
        div = compare(engine, case, label, ref, result.token_ids, result.finish_reason, committed, settings)
        row["modes"][label] = {**tally.add(label, result, div), "max_batch_size": shared}
    log.info("%s: %d cases in %.1f s", label, len(cases), time.perf_counter() - t0)


def failing_divergences(report: dict, allow_near_ties: float | None) -> list[dict]:
    """Divergences that fail the run: all of them, or those with margin > the allowance
    (stop divergences have no margin: they always fail)."""
    if allow_near_ties is None:
        return list(report["divergences"])
    return [d for d in report["divergences"] if d["margin"] is None or d["margin"] > allow_near_ties]
