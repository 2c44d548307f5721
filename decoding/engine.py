"""The speculative decoding loop (readability bar: gpt-fast's ``generate.py``).

Per request: prefill the target, take its first token, then repeat rounds of
plan (the policy over the drafters' offers) → draft (each planned drafter proposes,
continuing the one before) → verify (one target pass over the last committed token
plus the draft) → crop the KV cache to the committed length → commit through the stop
checker, until EOS, a stop string, the budget or cancellation.

The engine drives a list of :class:`~decoding.drafter.Drafter` objects and never asks
which one it is talking to; the request's :class:`~decoding.drafter.DraftingMode`
selects among them by name.

KV-cache invariant between rounds: the target cache holds every committed token but
the last one, which is the first input of the next pass.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch

from decoding.calibration import calibrate, measure_agreement, measure_draft_feed_ms
from decoding.config import GenerationConfig
from decoding.detokenize import IncrementalDetokenizer
from decoding.draft_model_drafter import DraftModelDrafter, check_compatible
from decoding.drafter import Draft, Drafter, DraftingMode, DraftRequest, Offer, join_drafts
from decoding.few_token_linear import few_token_passes
from decoding.kv_cache import PreallocatedCache, crop_cache
from decoding.memory import return_freed_memory
from decoding.logits import effective_settings
from decoding.models import LoadedModel
from decoding.ngram_drafter import AnswerHistory, NGramDrafter
from decoding.policy import (PLAIN, AcceptanceTable, CostModel, Decision, DrafterPolicy, PolicyConfig,
                             draft_prefill_pays)
from decoding.sampling import TokenSelector
from decoding.stats import GenerationStats
from decoding.stopping import StopChecker
from decoding.verification import verify_greedy

log = logging.getLogger(__name__)


# Output positions the KV cache reserves up front (tokens); longer answers regrow it.
OUTPUT_RESERVE = 512


class PromptError(ValueError):
    """The prompt is empty or does not fit the model's context window."""


@dataclass
class GenerationResult:
    """A finished generation.

    Attributes:
        token_ids: generated ids (EOS included when it ended the output; stop-string
            tokens included, as plain greedy with stop strings would emit them).
        text: decoded text, special tokens skipped, cut before a stop string.
        finish_reason: ``"eos" | "stop" | "length" | "repetition" | "cancelled"``
            (``"repetition"``: the loop stop cut the output before its repeats).
        stats: timings and speculation statistics.
    """

    token_ids: list[int]
    text: str
    finish_reason: str
    stats: GenerationStats


@dataclass
class StreamEvent:
    """One streamed step: a text delta (possibly empty) and the committed ids; the last
    event carries ``result``. Deltas are final (held back while a loop stop could still
    cut them); ids are as committed, so after a loop stop the result's ids are a prefix
    of the streamed ones."""

    delta: str
    token_ids: list[int] = field(default_factory=list)
    result: GenerationResult | None = None


def prefill(model: torch.nn.Module, prompt_ids: list[int], cache: PreallocatedCache) -> torch.Tensor:
    """Run the prompt through the model into ``cache``; return the last position's logits ``(vocab,)``.

    Only the last position goes through the LM head (``logits_to_keep=1``): for a
    1,000-token prompt and a 49k vocabulary the full head would cost more than the layers.
    """
    x = torch.tensor([prompt_ids], device=next(model.parameters()).device)
    return model(input_ids=x, cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1]


def target_pass(model: torch.nn.Module, tokens: list[int], cache: PreallocatedCache) -> torch.Tensor:
    """One verification pass over ``tokens`` (last committed + draft): logits ``(len(tokens), vocab)``.

    Runs under :func:`~decoding.few_token_linear.few_token_passes`, so a few-token pass
    costs about one decode step on CPU.
    """
    x = torch.tensor([tokens], device=next(model.parameters()).device)
    with few_token_passes():
        return model(input_ids=x, cache=cache, use_cache=True).logits[0]


def _delta(detok: IncrementalDetokenizer, stop: StopChecker) -> str:
    """Text that became final with the last commit: ids a loop cut may still remove and a
    possibly unfinished stop string are held back; a finished output goes out with the result."""
    if stop.finish_reason is not None:
        return ""
    return detok.push(stop.output[:stop.stable_length])


def candidate_chains(drafters: Sequence[Drafter], gamma_max: int) -> list[list[Offer]]:
    """The plans the policy weighs this round: every free offer (``step_ms`` 0, a lookup:
    the n-gram drafter's match) alone, and each one that runs out before ``gamma_max``
    followed by each other drafter's offer to extend it (a copied span the draft model
    continues); a costly drafter's offer alone (the draft model) only when no free offer
    has anything (a generated span). So the n-gram drafter drafts where a match exists, the
    draft model where none does, and the policy picks γ (or plain decoding) by their
    measured acceptance."""
    offers = [d.offer(gamma_max) for d in drafters]
    free = any(o.max_tokens > 0 and o.step_ms == 0 for o in offers)
    chains = [[o] for o in offers if o.max_tokens > 0 and (o.step_ms == 0 or not free)]
    for d, o in zip(drafters, offers):
        if 0 < o.max_tokens < gamma_max and o.step_ms == 0:
            span = d.propose(o.max_tokens).tokens
            chains += [[o, e.offer(gamma_max - len(span), span)] for e in drafters if e is not d]
    return chains


def draft_segments(decision: Decision, drafters: dict[str, Drafter], stats: GenerationStats) -> list[Draft]:
    """Each planned drafter proposes in turn, continuing the tokens before it; a segment
    that stops short ends the round's draft. Proposal time goes to the drafter's stats,
    and to ``stats.drafting_ms`` when the cost model prices it (a step cost)."""
    drafts: list[Draft] = []
    after: list[int] = []
    for segment in decision.segments:
        t = time.perf_counter()
        draft = drafters[segment.offer.drafter].propose(segment.tokens, after)
        ms = (time.perf_counter() - t) * 1000
        stats.drafter(segment.offer.drafter).ms += ms
        stats.drafting_ms += ms if segment.offer.step_ms != 0 else 0.0  # priced (or unmeasured) model steps
        drafts.append(draft)
        after += draft.tokens
        if len(draft.tokens) < segment.tokens:
            break
    return drafts


def _measure_draft_agreement(target: LoadedModel, draft: LoadedModel, context_tokens: int = 600,
                             answer_tokens: int = 24) -> float:
    """The draft's agreement with the target on a built-in ops RAG prompt (fits the context window)."""
    from decoding.lean_draft import calibration_prompt

    room = max(1, min(context_tokens, target.max_positions, draft.max_positions) - answer_tokens - 1)
    ids = calibration_prompt(target.tokenizer, room)[-room:]
    return measure_agreement(target.model, draft.model, ids, answer_tokens)


class SpeculativeEngine:
    """Exact speculative decoding over one target model.

    Args:
        target: the target model.
        draft: an optional draft model (same vocabulary; checked here).
        drafters: the drafters to drive, each with a distinct ``name``; ``None`` = an
            n-gram drafter over the engine's answer history, plus a draft-model drafter
            when ``draft`` is given (priced at the calibrated draft step).
        costs: measured costs for the policy; ``None`` calibrates now (~1 s on CPU).
        policy: policy knobs.
        max_ngram, min_ngram: n-gram drafter match lengths (tokens).
        max_speculative_tokens: the largest γ calibrated for.
        draft_min_confidence: the draft model stops below this top probability.
        answer_history: recent answers the n-gram drafter also drafts from (0 = none).
        draft_agreement: the draft model's top-1 agreement with the target in [0, 1], the
            policy's prior for it; ``None`` measures it now on a built-in RAG prompt
            (:func:`~decoding.calibration.measure_agreement`, 24 target steps).

    The engine keeps, for all its requests, one :class:`AcceptanceTable` (acceptance
    measured on earlier answers sets the policy's expectations for the next one) and one
    :class:`AnswerHistory` (earlier answers are a drafting source). Seeded sampling uses
    neither, so that a seed reproduces its sample.

    Raises:
        VocabularyMismatchError: the draft's vocabulary differs from the target's.
        ValueError: two drafters share a name.
    """

    def __init__(self, target: LoadedModel, draft: LoadedModel | None = None, *,
                 drafters: Sequence[Drafter] | None = None, costs: CostModel | None = None,
                 policy: PolicyConfig | None = None, max_ngram: int = 4, min_ngram: int = 1,
                 max_speculative_tokens: int = 16, draft_min_confidence: float = 0.2,
                 answer_history: int = 32, draft_agreement: float | None = None) -> None:
        if draft is not None:
            check_compatible(target, draft)
        self.target = target
        self.draft = draft
        self.acceptance = AcceptanceTable(policy or PolicyConfig())
        self.history = AnswerHistory(max_ngram, min_ngram, answer_history)
        self._typical_answer_tokens = 64.0  # moving average of answer lengths (tokens): prices a draft prefill
        self.costs = costs or calibrate(target.model, draft.model if draft else None, max_speculative_tokens + 1)
        if drafters is None:
            drafters = [NGramDrafter(max_ngram, min_ngram, history=self.history)]
            if draft is not None:
                drafter = DraftModelDrafter(draft, target, draft_min_confidence, step_ms=self.costs.draft_step_ms,
                                            feed_ms=self.costs.draft_feed_ms)
                drafters.append(drafter)
                if draft_agreement is None:
                    draft_agreement = _measure_draft_agreement(target, draft)
                self.acceptance.set_prior(drafter.name, draft_agreement, draft_agreement)
                log.info("draft model %s: top-1 agreement %.2f with the target (the policy's prior)", draft.name,
                         draft_agreement)
        self.drafters: list[Drafter] = list(drafters)
        names = [d.name for d in self.drafters]
        if len(set(names)) != len(names):
            raise ValueError(f"drafter names must be distinct, got {names}")
        # Move everything loaded so far (models, tokenizers, libraries: ~0.5M objects) out of the
        # cyclic GC's reach: otherwise a full collection triggered by a request's n-gram index
        # rescans them all, a ~200 ms pause inside decoding. Garbage is collected first so that
        # none is frozen.
        gc.collect()
        gc.freeze()
        self._lock = threading.Lock()
        log.info("engine ready: verify ms %s, draft step ms %s", [round(c, 1) for c in self.costs.verify_ms],
                 self.costs.draft_step_ms)

    def attach_draft(self, draft: LoadedModel, step_ms: float, min_confidence: float = 0.2,
                     agreement: float | None = None, feed_ms: Sequence[float] | None = None) -> None:
        """Add (or replace) the draft model after start-up — a draft built in the background
        while the engine served with its other drafters. Takes effect from the next request.

        Args:
            draft: a draft with the target's vocabulary.
            step_ms: its measured cost of one step (ms), the draft-model offers' price.
            agreement: its measured top-1 agreement with the target in [0, 1]; the policy
                starts the draft model's states from it (else from the generic prior,
                under which a draft that is not much cheaper than a target pass is never tried).
            feed_ms: its forward cost over 1..n tokens (ms); ``None`` measures it now (~2 s,
                :func:`~decoding.calibration.measure_draft_feed_ms`).
        Raises:
            VocabularyMismatchError: the draft's vocabulary differs (both are named).
        """
        check_compatible(self.target, draft)
        if feed_ms is None:
            feed_ms = measure_draft_feed_ms(draft.model, len(self.costs.verify_ms))
        drafter = DraftModelDrafter(draft, self.target, min_confidence, step_ms=step_ms, feed_ms=feed_ms)
        with self._lock:
            self.draft = draft
            self.costs = CostModel(self.costs.verify_ms, step_ms, tuple(feed_ms))
            self.drafters = [d for d in self.drafters if d.name != drafter.name] + [drafter]
            if agreement is not None:
                self.acceptance.set_prior(drafter.name, agreement, agreement)
        return_freed_memory()  # the build's and calibration's transient buffers
        log.info("draft model attached: %s, step %.1f ms", draft.name, step_ms)

    # -- public API -----------------------------------------------------------------------
    def generate(self, prompt_ids: Sequence[int], config: GenerationConfig = GenerationConfig(),
                 contexts: Sequence[Sequence[int]] = (), cancel: Callable[[], bool] | None = None) -> GenerationResult:
        """Generate to completion; see :meth:`stream` for the arguments."""
        result = None
        for event in self.stream(prompt_ids, config, contexts, cancel):
            result = event.result or result
        assert result is not None
        return result

    def stream(self, prompt_ids: Sequence[int], config: GenerationConfig = GenerationConfig(),
               contexts: Sequence[Sequence[int]] = (), cancel: Callable[[], bool] | None = None) -> Iterator[StreamEvent]:
        """Generate, yielding a :class:`StreamEvent` per committed block.

        Args:
            prompt_ids: prompt token ids (non-empty, shorter than the context window).
            config: budget, sampling, stop conditions, drafting mode.
            contexts: token sequences that seed the n-gram drafter (retrieved passages).
            cancel: polled between rounds; returning True ends with ``"cancelled"``.

        Raises:
            PromptError: empty prompt, prompt or context ids outside the vocabulary, or
                the prompt alone fills the context window.
            ValueError: a ``drafting`` mode naming a drafter the engine lacks (e.g.
                ``"draft_model"`` without a draft model).
            GenerationSettingError: a token id of ``logit_bias`` / ``bad_words_ids`` /
                ``suppress_tokens`` outside the vocabulary, or a checkpoint generation setting
                the engine cannot apply exactly (:func:`decoding.logits.effective_settings`).
        """
        prompt = [int(t) for t in prompt_ids]
        max_pos = self.target.max_positions
        if not prompt:
            raise PromptError("the prompt is empty: at least one token is needed")
        if len(prompt) >= max_pos:
            raise PromptError(f"the prompt has {len(prompt)} tokens; the model's context window is {max_pos}")
        mode = config.drafting
        if mode.single and not any(mode.selects(d.name) for d in self.drafters):
            raise ValueError(f"drafting={mode.value!r} needs a {mode.value.replace('_', ' ')} drafter; this engine "
                             f"has {[d.name for d in self.drafters] or 'none'} (none is loaded)")
        vocab = self.target.model.config.vocab_size
        if min(prompt) < 0 or max(prompt) >= vocab:
            raise PromptError(f"prompt token ids outside the vocabulary [0, {vocab}): got {min(prompt)}..{max(prompt)}")
        contexts = [[int(t) for t in c] for c in contexts]
        bad = [t for c in contexts for t in c if not 0 <= t < vocab]
        if bad:
            raise PromptError(f"context token ids outside the vocabulary [0, {vocab}): got {bad[:5]}")
        with self._lock, torch.inference_mode():
            yield from self._run(prompt, config, contexts, cancel)

    # -- the loop -------------------------------------------------------------------------
    def _run(self, prompt: list[int], config: GenerationConfig, contexts: list[list[int]],
             cancel: Callable[[], bool] | None) -> Iterator[StreamEvent]:
        tok = self.target.tokenizer
        eos = self.target.eos_token_ids() if config.eos_token_ids is None else config.eos_token_ids
        budget = min(config.max_new_tokens, self.target.max_positions - len(prompt))
        stop = StopChecker(tok, frozenset(eos), tuple(config.stop_strings), budget, config.loop_span)
        detok = IncrementalDetokenizer(tok, holdback=max((len(s) for s in config.stop_strings), default=1) - 1)
        stats = GenerationStats(prompt_tokens=len(prompt))
        settings = effective_settings(config, self.target.generation_defaults, self.target.model.config.vocab_size)
        stats.generation_settings = settings.to_dict()
        t0 = time.perf_counter()
        if budget <= 0:
            stop.finish_reason = "length"
        else:
            model = self.target.model
            # Logits processors, then greedy argmax or a Gumbel-max sample seeded by (seed, position).
            sampling = TokenSelector(settings.processors(len(prompt), eos, self.target.device), config.temperature,
                                     config.top_k, config.top_p, config.seed, len(prompt), self.target.device)
            cache = PreallocatedCache(len(prompt) + min(budget, OUTPUT_RESERVE))
            logits = prefill(model, prompt, cache)
            stats.prefill_ms = (time.perf_counter() - t0) * 1000
            first = sampling.choose(prompt, logits)
            committed = stop.accept([first])
            stats.record_first()
            stats.ttft_ms = (time.perf_counter() - t0) * 1000
            yield StreamEvent(_delta(detok, stop), committed)
            t_decode = time.perf_counter()
            # A seeded sample must not depend on earlier requests: no answer history, and
            # drafting from the priors.
            seeded = not config.greedy and config.seed is not None
            t_begin = time.perf_counter()
            drafters = [d for d in self.drafters if config.drafting.selects(d.name)] \
                if stop.finish_reason is None else []
            prefill_draft = self._prefill_draft(config, drafters, len(prompt), budget, stats)
            request = DraftRequest(prompt, contexts, cache, sampling, reproducible=seeded,
                                   output_reserve=min(budget, OUTPUT_RESERVE) + config.num_speculative_tokens,
                                   prefill_draft=prefill_draft)
            t_prefill_draft = time.perf_counter()
            for d in drafters:
                d.begin(request)
                d.observe(committed)
            prefill_draft_ms = (time.perf_counter() - t_prefill_draft) * 1000 if prefill_draft else 0.0
            stats.drafting_ms += prefill_draft_ms  # a draft model's forward, not overhead
            by_name = {d.name: d for d in drafters}
            table = AcceptanceTable(self.acceptance.config) if seeded else self.acceptance
            policy = DrafterPolicy(self.costs, table)
            stats.overhead_ms += (time.perf_counter() - t_begin) * 1000 - prefill_draft_ms
            while stop.finish_reason is None:
                if cancel is not None and cancel():
                    stop.finish_reason = "cancelled"
                    break
                seq_len = len(prompt) + len(stop.output)
                gamma_max = min(config.num_speculative_tokens, stop.remaining - 1, self.target.max_positions - seq_len)
                t_draft, drafting_ms = time.perf_counter(), stats.drafting_ms
                decision = self._plan(config, policy, drafters, gamma_max, stats)
                segments = draft_segments(decision, by_name, stats)
                draft = join_drafts(segments)
                stats.overhead_ms += (time.perf_counter() - t_draft) * 1000 - (stats.drafting_ms - drafting_ms)
                logits = target_pass(model, [stop.output[-1]] + draft.tokens, cache)
                scores = sampling.scores(prompt + stop.output, draft.tokens, logits)
                block, n_accepted = verify_greedy(draft.tokens, scores)
                crop_cache(cache, seq_len + n_accepted)
                committed = stop.accept(block)
                t_obs = time.perf_counter()
                proposed = [(s.offer.drafter, len(d.tokens), d.origin) for s, d in zip(decision.segments, segments)]
                stats.record_round(proposed, n_accepted, len(committed))
                policy.update(decision, [n for _, n, _ in proposed], n_accepted)
                for d in drafters:
                    d.observe(committed)
                stats.overhead_ms += (time.perf_counter() - t_obs) * 1000
                yield StreamEvent(_delta(detok, stop), committed)
            if stop.finish_reason == "repetition":  # τ counts what the user gets, not the cut repeats
                stats.loop_cut_tokens = stop.generated - len(stop.output)
                stats.decode_tokens = max(len(stop.output) - 1, 0)
                stats.truncate(len(stop.output))
            t_history = time.perf_counter()
            self.history.add(prompt, stop.output)
            self._typical_answer_tokens = 0.8 * self._typical_answer_tokens + 0.2 * len(stop.output)
            stats.overhead_ms += (time.perf_counter() - t_history) * 1000
            stats.decode_ms = (time.perf_counter() - t_decode) * 1000
        stats.total_ms = (time.perf_counter() - t0) * 1000
        stats.new_tokens = len(stop.output)
        stats.finish_reason = stop.finish_reason
        text = stop.final_text()
        result = GenerationResult(list(stop.output), text, stop.finish_reason or "length", stats)
        yield StreamEvent(detok.finish(text), [], result)

    def _prefill_draft(self, config: GenerationConfig, drafters: Sequence[Drafter], prompt_tokens: int,
                       budget: int, stats: GenerationStats) -> bool:
        """Whether a draft model with its own KV cache prefills the prompt for this request:
        always when the request asks for the draft model alone; with ``auto`` when
        :func:`~decoding.policy.draft_prefill_pays` over a typical answer (the recent answers'
        mean length, half of it on generated spans). The decision and its numbers are in
        ``stats.draft_prefill``."""
        draft = next((d for d in drafters if isinstance(d, DraftModelDrafter)), None)
        if draft is None or not draft.needs_prefill:
            return False
        if config.drafting is DraftingMode.DRAFT_MODEL:
            stats.draft_prefill = "yes: the draft model alone was asked for"
            return True
        alpha = self.acceptance.priors.get(draft.name, (0.0, 0.0))[1]
        expected = min(budget, self._typical_answer_tokens) / 2
        pays, reason = draft_prefill_pays(self.costs, prompt_tokens, expected, alpha, config.num_speculative_tokens)
        stats.draft_prefill = f"{'yes' if pays else 'no'}: {reason}"
        return pays

    @staticmethod
    def _plan(config: GenerationConfig, policy: DrafterPolicy, drafters: list[Drafter], gamma_max: int,
              stats: GenerationStats) -> Decision:
        """This round's plan: plain without room or drafters; with ``fixed_gamma`` the one
        selected drafter drafts ``gamma_max``; else the policy's choice over
        :func:`candidate_chains`, a change of plan recorded with its reason."""
        if gamma_max <= 0 or not drafters:
            return PLAIN
        if config.fixed_gamma:
            return policy.fixed(drafters[0].offer(gamma_max), gamma_max)
        decision = policy.choose(candidate_chains(drafters, gamma_max), gamma_max)
        if decision.drafter != policy.current:
            # at_token: tokens emitted before this round (the prefill's token + decode tokens).
            stats.switches.append({"at_token": 1 + stats.decode_tokens, "from": policy.current or "plain",
                                   "to": decision.drafter or "plain", "reason": decision.reason})
            policy.current = decision.drafter
        return decision
