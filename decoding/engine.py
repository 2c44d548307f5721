"""The speculative decoding loop (readability bar: gpt-fast's ``generate.py``).

Per request: prefill the target, take its first token, then repeat rounds of
draft → verify (one target pass over the last committed token plus the draft) →
crop the KV cache to the committed length → commit through the stop checker, until
EOS, a stop string, the budget or cancellation.

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

from decoding.calibration import calibrate
from decoding.config import GenerationConfig
from decoding.detokenize import IncrementalDetokenizer
from decoding.draft_model_drafter import DraftModelDrafter, check_compatible
from decoding.drafter import Draft
from decoding.kv_cache import PreallocatedCache, crop_cache
from decoding.models import LoadedModel
from decoding.ngram_drafter import AnswerHistory, NGramDrafter
from decoding.policy import DRAFT_MODEL, NGRAM, AcceptanceTable, CostModel, Decision, DrafterPolicy, PolicyConfig
from decoding.sampling import SamplingParams, sample
from decoding.stats import GenerationStats
from decoding.stopping import StopChecker
from decoding.verification import verify_greedy, verify_sampling

log = logging.getLogger(__name__)


# Drafters the policy may use per ``GenerationConfig.drafting`` mode.
ALLOWED_DRAFTERS = {"auto": frozenset({NGRAM, DRAFT_MODEL}), "ngram": frozenset({NGRAM}),
                    "draft_model": frozenset({DRAFT_MODEL}), "off": frozenset()}


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
    """One verification pass over ``tokens`` (last committed + draft): logits ``(len(tokens), vocab)``."""
    x = torch.tensor([tokens], device=next(model.parameters()).device)
    return model(input_ids=x, cache=cache, use_cache=True).logits[0]


def _delta(detok: IncrementalDetokenizer, stop: StopChecker) -> str:
    """Text that became final with the last commit: ids a loop cut may still remove and a
    possibly unfinished stop string are held back; a finished output goes out with the result."""
    if stop.finish_reason is not None:
        return ""
    return detok.push(stop.output[:stop.stable_length])


class SpeculativeEngine:
    """Exact speculative decoding over one target model.

    Args:
        target: the target model.
        draft: an optional draft model (same vocabulary; checked here).
        costs: measured costs for the policy; ``None`` calibrates now (~1 s on CPU).
        policy: policy knobs.
        max_ngram, min_ngram: n-gram drafter match lengths (tokens).
        max_speculative_tokens: the largest γ calibrated for.
        draft_min_confidence: the draft model stops below this top probability.
        answer_history: recent answers the n-gram drafter also drafts from (0 = none).

    The engine keeps, for all its requests, one :class:`AcceptanceTable` (acceptance
    measured on earlier answers sets the policy's expectations for the next one) and one
    :class:`AnswerHistory` (earlier answers are a drafting source). Seeded sampling uses
    neither, so that a seed reproduces its sample.

    Raises:
        VocabularyMismatchError: the draft's vocabulary differs from the target's.
    """

    def __init__(self, target: LoadedModel, draft: LoadedModel | None = None, *, costs: CostModel | None = None,
                 policy: PolicyConfig | None = None, max_ngram: int = 4, min_ngram: int = 1,
                 max_speculative_tokens: int = 16, draft_min_confidence: float = 0.2,
                 answer_history: int = 32) -> None:
        if draft is not None:
            check_compatible(target, draft)
        self.target = target
        self.draft = draft
        self.acceptance = AcceptanceTable(policy or PolicyConfig())
        self.history = AnswerHistory(max_ngram, min_ngram, answer_history)
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.draft_min_confidence = draft_min_confidence
        self.costs = costs or calibrate(target.model, draft.model if draft else None, max_speculative_tokens + 1)
        # Move everything loaded so far (models, tokenizers, libraries: ~0.5M objects) out of the
        # cyclic GC's reach: otherwise a full collection triggered by a request's n-gram index
        # rescans them all, a ~200 ms pause inside decoding. Garbage is collected first so that
        # none is frozen.
        gc.collect()
        gc.freeze()
        self._lock = threading.Lock()
        log.info("engine ready: verify ms %s, draft step ms %s", [round(c, 1) for c in self.costs.verify_ms],
                 self.costs.draft_step_ms)

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
            ValueError: ``drafting="draft_model"`` without a draft model.
        """
        prompt = [int(t) for t in prompt_ids]
        max_pos = self.target.max_positions
        if not prompt:
            raise PromptError("the prompt is empty: at least one token is needed")
        if len(prompt) >= max_pos:
            raise PromptError(f"the prompt has {len(prompt)} tokens; the model's context window is {max_pos}")
        if config.drafting == "draft_model" and self.draft is None:
            raise ValueError("drafting='draft_model' needs a draft model; none is loaded")
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
        t0 = time.perf_counter()
        if budget <= 0:
            stop.finish_reason = "length"
        else:
            model = self.target.model
            sampling = None if config.greedy else SamplingParams(
                config.temperature, config.top_k, config.top_p, config.seed, self.target.device)
            cache = PreallocatedCache(len(prompt) + min(budget, OUTPUT_RESERVE))
            logits = prefill(model, prompt, cache)
            stats.prefill_ms = (time.perf_counter() - t0) * 1000
            first = int(logits.argmax()) if sampling is None else sample(sampling.probs(logits), sampling.generator)
            committed = stop.accept([first])
            stats.ttft_ms = (time.perf_counter() - t0) * 1000
            yield StreamEvent(_delta(detok, stop), committed)
            t_decode = time.perf_counter()
            # A seeded sample must not depend on earlier requests: no answer history, and
            # drafting from the priors.
            seeded = sampling is not None and config.seed is not None
            ngram, dm = self._drafters(config, prompt, contexts, cache, sampling, None if seeded else self.history,
                                       stats) if stop.finish_reason is None else (None, None)
            for d in (ngram, dm):
                if d is not None:
                    d.observe(committed)
            table = AcceptanceTable(self.acceptance.config) if seeded else self.acceptance
            policy = DrafterPolicy(self.costs, table, ALLOWED_DRAFTERS[config.drafting])
            while stop.finish_reason is None:
                if cancel is not None and cancel():
                    stop.finish_reason = "cancelled"
                    break
                seq_len = len(prompt) + len(stop.output)
                gamma_max = min(config.num_speculative_tokens, stop.remaining - 1, self.target.max_positions - seq_len)
                t_draft, dm_ms = time.perf_counter(), stats.draft_model_ms
                decision, draft = self._draft(config, policy, ngram, dm, gamma_max, stats)
                stats.overhead_ms += (time.perf_counter() - t_draft) * 1000 - (stats.draft_model_ms - dm_ms)
                logits = target_pass(model, [stop.output[-1]] + draft.tokens, cache)
                if sampling is None:
                    block, n_accepted = verify_greedy(draft.tokens, logits)
                else:
                    block, n_accepted = verify_sampling(draft, sampling.probs(logits), sampling.generator)
                crop_cache(cache, seq_len + n_accepted)
                committed = stop.accept(block)
                t_obs = time.perf_counter()
                stats.record_round(decision.drafter, len(draft.tokens), n_accepted, len(committed))
                policy.update(decision.drafter, draft, n_accepted)
                for d in (ngram, dm):
                    if d is not None:
                        d.observe(committed)
                stats.overhead_ms += (time.perf_counter() - t_obs) * 1000
                yield StreamEvent(_delta(detok, stop), committed)
            if stop.finish_reason == "repetition":  # τ counts what the user gets, not the cut repeats
                stats.loop_cut_tokens = stop.generated - len(stop.output)
                stats.decode_tokens = max(len(stop.output) - 1, 0)
            t_history = time.perf_counter()
            self.history.add(prompt, stop.output)
            stats.overhead_ms += (time.perf_counter() - t_history) * 1000
            stats.decode_ms = (time.perf_counter() - t_decode) * 1000
        stats.total_ms = (time.perf_counter() - t0) * 1000
        stats.new_tokens = len(stop.output)
        stats.finish_reason = stop.finish_reason
        text = stop.final_text()
        result = GenerationResult(list(stop.output), text, stop.finish_reason or "length", stats)
        yield StreamEvent(detok.finish(text), [], result)

    def _drafters(self, config: GenerationConfig, prompt: list[int], contexts: list[list[int]], cache: PreallocatedCache,
                  sampling: SamplingParams | None, history: AnswerHistory | None, stats: GenerationStats,
                  ) -> tuple[NGramDrafter | None, DraftModelDrafter | None]:
        """Set up this request's drafters (indexing is overhead; the draft model's prefill is its cost)."""
        ngram = dm = None
        if config.drafting in ("auto", "ngram"):
            t = time.perf_counter()
            ngram = NGramDrafter(self.max_ngram, self.min_ngram, history=history)
            ngram.begin(prompt, contexts)
            stats.overhead_ms += (time.perf_counter() - t) * 1000
        if config.drafting in ("auto", "draft_model") and self.draft is not None:
            t = time.perf_counter()
            dm = DraftModelDrafter(self.draft, self.target, self.draft_min_confidence)
            dm.begin(prompt, contexts, cache, sampling)
            stats.draft_model_ms += (time.perf_counter() - t) * 1000
        return ngram, dm

    def _draft(self, config: GenerationConfig, policy: DrafterPolicy, ngram: NGramDrafter | None,
               dm: DraftModelDrafter | None, gamma_max: int, stats: GenerationStats) -> tuple[Decision, Draft]:
        """Choose the drafter and γ for this round (the policy, restricted to the request's
        ``drafting`` mode) and get the proposal; ``gamma_max`` may be 0."""
        if gamma_max <= 0 or config.drafting == "off":
            return Decision(None, 0, "plain"), Draft([])
        if config.fixed_gamma and config.drafting == NGRAM:
            return Decision(NGRAM, gamma_max, "fixed γ"), ngram.propose(None, gamma_max)
        if config.fixed_gamma:
            return Decision(DRAFT_MODEL, gamma_max, "fixed γ"), self._timed_dm(dm, gamma_max, stats)
        ngram_draft = ngram.propose(None, gamma_max) if ngram is not None else None
        decision = policy.choose(ngram_draft, dm is not None, gamma_max)
        if decision.drafter != policy.current:
            # at_token: tokens emitted before this round (the prefill's token + decode tokens).
            stats.switches.append({"at_token": 1 + stats.decode_tokens, "from": policy.current or "plain",
                                   "to": decision.drafter or "plain", "reason": decision.reason})
            policy.current = decision.drafter
        if decision.drafter == NGRAM:
            return decision, ngram_draft.truncated(decision.gamma)
        if decision.drafter == DRAFT_MODEL:
            return decision, self._timed_dm(dm, decision.gamma, stats)
        return decision, Draft([])

    @staticmethod
    def _timed_dm(dm: DraftModelDrafter, gamma: int, stats: GenerationStats) -> Draft:
        t = time.perf_counter()
        draft = dm.propose(None, gamma)
        stats.draft_model_ms += (time.perf_counter() - t) * 1000
        return draft
