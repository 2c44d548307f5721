"""The speculative decoding engine (readability bar: gpt-fast's ``generate.py``).

Per request: prefill the target, take its first token, then repeat rounds of
plan (the policy over the drafters' offers) → draft (each planned drafter proposes,
continuing the one before) → verify (one target pass over the last committed token
plus the draft) → crop the KV cache to the committed length → commit through the stop
checker, until EOS, a stop string, the budget or cancellation. A request's state between
rounds is a :class:`~decoding.request.RequestState`; several requests share each target
pass in a :class:`~decoding.batch.Batch` (continuous batching), and a lone request is a
batch of one.

The engine drives a list of :class:`~decoding.drafter.Drafter` objects (copied per request)
and never asks which one it is talking to; the request's
:class:`~decoding.drafter.DraftingMode` selects among them by name.
"""

from __future__ import annotations

import gc
import logging
import threading
from typing import Callable, Iterator, Sequence

import torch

from decoding.batch import Batch
from decoding.batch_policy import BatchSpeculation
from decoding.calibration import calibrate, calibration_prompt, measure_agreement, measure_draft_feed_ms
from decoding.config import DEFAULT_CONFIG, GenerationConfig
from decoding.draft_model_drafter import DraftModelDrafter, check_compatible
from decoding.drafter import Drafter
from decoding.logits import LogitsSettings, effective_settings
from decoding.memory import return_freed_memory
from decoding.models import LoadedModel
from decoding.ngram_drafter import STATE_PRIORS, AnswerHistory, NGramDrafter
from decoding.online_costs import OnlineCosts
from decoding.policy import AcceptanceTable, CostModel, PolicyConfig
from decoding.prefix_cache import PrefixCache
from decoding.request import GenerationResult, StreamEvent
from decoding.target import Target

__all__ = ["GenerationResult", "PromptError", "SpeculativeEngine", "StreamEvent"]

log = logging.getLogger(__name__)


class PromptError(ValueError):
    """The prompt is empty or does not fit the model's context window."""


def _measure_draft_agreement(target: Target, draft: LoadedModel, context_tokens: int = 600,
                             answer_tokens: int = 24) -> float:
    """The draft's agreement with the target on a built-in ops RAG prompt (fits the context window)."""
    room = max(1, min(context_tokens, target.max_positions, draft.max_positions) - answer_tokens - 1)
    ids = calibration_prompt(target.tokenizer, room)[-room:]
    return measure_agreement(target, draft.model, ids, answer_tokens)


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
        batch_speculation: how batches of ≥ 2 requests choose γ (default: adaptive).
        learn_costs: learn the target's (and draft's) forward costs from the passes run
            (:attr:`pass_costs`); ``False`` keeps ``costs`` for the engine's lifetime. ``None``
            (default): learn when the engine calibrated itself (``costs`` not given), keep
            given costs fixed (reproducible plans in tests).
        prefix_cache_entries: finished requests' KV caches kept for exact prefix reuse
            (:class:`~decoding.prefix_cache.PrefixCache`; 0 = off).

    ``costs`` is the start-up calibration; the policy prices target passes with
    :attr:`pass_costs`, learned online from every pass the engine runs.

    The engine keeps, for all its requests, one :class:`AcceptanceTable` (acceptance
    measured on earlier answers sets the policy's expectations for the next one) and one
    :class:`AnswerHistory` (earlier answers are a drafting source, partitioned by
    ``GenerationConfig.history_partition`` so that an answer is drafted from only for
    requests of its own access scope). Seeded sampling uses neither, so that a seed
    reproduces its sample. Thread-safe: rounds take the engine's lock.

    Raises:
        VocabularyMismatchError: the draft's vocabulary differs from the target's.
        ValueError: two drafters share a name.
    """

    def __init__(self, target: Target, draft: LoadedModel | None = None, *,
                 drafters: Sequence[Drafter] | None = None, costs: CostModel | None = None,
                 policy: PolicyConfig | None = None, max_ngram: int = 4, min_ngram: int = 1,
                 max_speculative_tokens: int = 16, draft_min_confidence: float = 0.2,
                 answer_history: int = 32, draft_agreement: float | None = None,
                 batch_speculation: BatchSpeculation | None = None, learn_costs: bool | None = None,
                 prefix_cache_entries: int = 2) -> None:
        if draft is not None:
            check_compatible(target, draft)
        self.target = target
        self.draft = draft
        self.acceptance = AcceptanceTable(policy or PolicyConfig())
        self.history = AnswerHistory(max_ngram, min_ngram, answer_history)
        self.prefix_cache = PrefixCache(target, prefix_cache_entries)
        self.typical_answer_tokens = 64.0  # moving average of answer lengths (tokens): prices a draft prefill
        self.costs = costs or calibrate(target, draft, max_speculative_tokens + 1)
        self.pass_costs = OnlineCosts(self.costs.verify_ms)  # what real passes cost, learned as they run
        self.learn_costs = costs is None if learn_costs is None else learn_costs
        self.threads = torch.get_num_threads()  # every round runs on these intra-op threads (see Batch)
        self.batch_speculation = batch_speculation or BatchSpeculation()
        if drafters is None:
            drafters = [NGramDrafter(max_ngram, min_ngram, history=self.history)]
            for state, (first, rest) in STATE_PRIORS.items():
                self.acceptance.set_prior(state, first, rest)
            if draft is not None:
                drafter = DraftModelDrafter(draft, target, draft_min_confidence, step_ms=self.costs.draft_step_ms,
                                            feed_ms=self.costs.draft_feed_ms, costs=self._draft_costs(self.costs))
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
            feed_ms = measure_draft_feed_ms(draft, len(self.costs.verify_ms))
        costs = CostModel(self.costs.verify_ms, step_ms, tuple(feed_ms))
        drafter = DraftModelDrafter(draft, self.target, min_confidence, step_ms=step_ms, feed_ms=feed_ms,
                                    costs=self._draft_costs(costs))
        with self._lock:
            self.draft = draft
            self.costs = costs
            self.drafters = [d for d in self.drafters if d.name != drafter.name] + [drafter]
            if agreement is not None:
                self.acceptance.set_prior(drafter.name, agreement, agreement)
        return_freed_memory()  # the build's and calibration's transient buffers
        log.info("draft model attached: %s, step %.1f ms", draft.name, step_ms)

    # -- public API -----------------------------------------------------------------------
    def generate(self, prompt_ids: Sequence[int], config: GenerationConfig = DEFAULT_CONFIG,
                 contexts: Sequence[Sequence[int]] = (), cancel: Callable[[], bool] | None = None) -> GenerationResult:
        """Generate to completion; see :meth:`stream` for the arguments."""
        result = None
        for event in self.stream(prompt_ids, config, contexts, cancel):
            result = event.result or result
        assert result is not None
        return result

    def stream(self, prompt_ids: Sequence[int], config: GenerationConfig = DEFAULT_CONFIG,
               contexts: Sequence[Sequence[int]] = (), cancel: Callable[[], bool] | None = None,
               settings: LogitsSettings | None = None) -> Iterator[StreamEvent]:
        """Generate, yielding a :class:`StreamEvent` per committed block (a batch of one).

        The engine's lock is held for each round, never across a ``yield``: streams from one
        engine may be interleaved in one thread or consumed from several threads (their
        rounds then take turns; :meth:`batch` makes them share passes instead).

        Args:
            prompt_ids: prompt token ids (non-empty, shorter than the context window).
            config: budget, sampling, stop conditions, drafting mode.
            contexts: token sequences that seed the n-gram drafter (retrieved passages).
            cancel: polled between rounds; returning True ends with ``"cancelled"``.
            settings: ``config``'s effective logits settings, as :meth:`resolve` gave them
                (default: resolved here).

        Raises:
            PromptError, ValueError, GenerationSettingError: as :meth:`check_request`, when
                the generator is first advanced.
        """
        batch = Batch(self)
        _, events = batch.add(prompt_ids, config, contexts, cancel, settings)
        yield from events
        while batch.active:
            for _, event in batch.step():
                yield event

    def batch(self, speculation: BatchSpeculation | None = None) -> Batch:
        """A :class:`~decoding.batch.Batch`: requests that join and leave between rounds and
        share every target pass (continuous batching), each still exact.

        Args:
            speculation: how a batch of ≥ 2 chooses γ; ``None`` = the engine's
                ``batch_speculation`` (adaptive).
        """
        return Batch(self, speculation)

    def resolve(self, config: GenerationConfig) -> LogitsSettings:
        """``config``'s effective logits settings on this target (the checkpoint's
        ``generation_config`` under the request's; :func:`decoding.logits.effective_settings`):
        a caller that checks a request early resolves it once and hands the result to
        :meth:`stream` or :meth:`Batch.add <decoding.batch.Batch.add>`.

        Raises:
            GenerationSettingError: a token id outside the vocabulary, or a checkpoint setting
                the engine cannot apply exactly.
        """
        target = self.target
        return effective_settings(config, target.generation_defaults, target.vocab_size)

    def check_request(self, prompt_ids: Sequence[int], config: GenerationConfig,
                      contexts: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
        """Validate a request; return its prompt and contexts as lists of ints.

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
        vocab = self.target.vocab_size
        if min(prompt) < 0 or max(prompt) >= vocab:
            raise PromptError(f"prompt token ids outside the vocabulary [0, {vocab}): got {min(prompt)}..{max(prompt)}")
        lists = [[int(t) for t in c] for c in contexts]
        bad = [t for c in lists for t in c if not 0 <= t < vocab]
        if bad:
            raise PromptError(f"context token ids outside the vocabulary [0, {vocab}): got {bad[:5]}")
        return prompt, lists

    # -- what requests share ----------------------------------------------------------------
    def _draft_costs(self, costs: CostModel) -> OnlineCosts | None:
        """The draft model's forward costs learned online (prior: its calibration; until it
        runs, scaled by how the target's passes compare with theirs); ``None`` when costs are
        not learned or the draft step was not measured."""
        if not self.learn_costs or costs.draft_step_ms is None:
            return None
        return OnlineCosts(costs.draft_feed_ms or (costs.draft_step_ms,), reference=self.pass_costs)

    def cost_model(self, context_tokens: int) -> CostModel:
        """The policy's costs for a request at ``context_tokens``: target passes from the
        online estimates (:class:`~decoding.online_costs.OnlineCosts`), the draft model's
        from its calibration."""
        return self.pass_costs.cost_model(context_tokens, len(self.costs.verify_ms), self.costs.draft_step_ms,
                                          self.costs.draft_feed_ms)

    def remember(self, prompt: list[int], output: list[int], partition: str = "") -> None:
        """Book a finished answer: a drafting source for later requests of the same history
        ``partition`` (access scope) and the typical answer length (a moving average, tokens)
        that prices a draft model's prefill."""
        self.history.add(prompt, output, partition)
        self.typical_answer_tokens = 0.8 * self.typical_answer_tokens + 0.2 * len(output)
