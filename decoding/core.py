"""What the engine keeps for as long as the process: :class:`EngineCore`, built once from one
:class:`EngineConfig` (as vLLM builds its speculative decoder from ``SpeculativeConfig``).

The core holds the target behind its seam (:class:`~decoding.backends.target.Target`), the
draft model and the drafters, and what every request shares: the acceptance table, the answer
history, the prefix cache, the calibrated and the online pass costs, the intra-op thread count
and the lock that rounds take. A :class:`~decoding.batch.Batch` and a
:class:`~decoding.request.RequestState` receive the core; :mod:`decoding.engine` is the façade
over it.
"""

from __future__ import annotations

import gc
import logging
import threading
from dataclasses import dataclass, field
from typing import Sequence

import torch

from decoding.backends.models import LoadedModel
from decoding.backends.target import Target
from decoding.config import GenerationConfig, check_num_speculative_tokens
from decoding.drafters.base import Drafter
from decoding.drafters.draft_model import DraftModelDrafter, check_compatible
from decoding.drafters.ngram import STATE_PRIORS, AnswerHistory, NGramDrafter, line_break_ids
from decoding.kv.prefix_cache import PrefixCache
from decoding.logits import LogitsSettings, effective_settings
from decoding.planning.batch_policy import BatchSpeculation
from decoding.planning.calibration import calibrate, calibration_prompt, measure_agreement
from decoding.planning.online_costs import OnlineCosts
from decoding.planning.policy import AcceptanceTable, CostModel, PolicyConfig

log = logging.getLogger(__name__)


class PromptError(ValueError):
    """The prompt is empty or does not fit the model's context window."""


@dataclass(frozen=True)
class EngineConfig:
    """The engine's knobs, fixed for its lifetime.

    Attributes:
        max_ngram, min_ngram: n-gram drafter match lengths (tokens).
        num_speculative_tokens: the largest γ the pass costs are calibrated for (a request's own
            ``Speculation.num_speculative_tokens`` may exceed it: the costs then extrapolate);
            checked as every γ ceiling is (:func:`~decoding.config.check_num_speculative_tokens`).
        draft_min_confidence: the draft model stops below this top probability.
        answer_history: recent answers the n-gram drafter also drafts from (0 = none).
        draft_agreement: the draft model's top-1 agreement with the target in [0, 1], the
            policy's prior for it; ``None`` measures it at start-up on a built-in RAG prompt
            (:func:`~decoding.planning.calibration.measure_agreement`, 24 target steps).
        batch_speculation: how batches of ≥ 2 requests choose γ (default: adaptive).
        learn_costs: learn the target's (and draft's) forward costs from the passes run
            (:attr:`EngineCore.pass_costs`); ``False`` keeps the start-up costs. ``None``: learn
            when the engine calibrated itself (no ``costs`` given), keep given costs fixed
            (reproducible plans in tests).
        prefix_cache_entries: finished requests' KV caches kept for exact prefix reuse
            (:class:`~decoding.kv.prefix_cache.PrefixCache`; 0 = off).
        line_bounded_drafts: n-gram proposals stay on one line of their source (end before a
            line-break token: :class:`~decoding.drafters.ngram.NGramDrafter`).
        policy: the cost-aware policy's knobs.
    """

    max_ngram: int = 4
    min_ngram: int = 1
    num_speculative_tokens: int = 16
    draft_min_confidence: float = 0.2
    answer_history: int = 32
    draft_agreement: float | None = None
    batch_speculation: BatchSpeculation = field(default_factory=BatchSpeculation)
    learn_costs: bool | None = None
    prefix_cache_entries: int = 2
    line_bounded_drafts: bool = True
    policy: PolicyConfig = field(default_factory=PolicyConfig)

    def __post_init__(self) -> None:
        """Raises TypeError / ValueError: ``num_speculative_tokens`` is no γ ceiling."""
        check_num_speculative_tokens(self.num_speculative_tokens)


#: The engine's defaults.
DEFAULT_ENGINE_CONFIG = EngineConfig()


def measure_draft_agreement(target: Target, draft: LoadedModel, context_tokens: int = 600,
                            answer_tokens: int = 24) -> float:
    """The draft's agreement with the target on a built-in ops RAG prompt (fits the context window)."""
    room = max(1, min(context_tokens, target.max_positions, draft.max_positions) - answer_tokens - 1)
    ids = calibration_prompt(target.tokenizer, room)[-room:]
    return measure_agreement(target, draft.model, ids, answer_tokens)


class EngineCore:
    """What the engine keeps for as long as the process (see the module docstring).

    Args:
        target: the target model.
        draft: an optional draft model (same vocabulary; checked here).
        config: the engine's knobs.
        drafters: the drafters to drive, each with a distinct ``name``; ``None`` = an n-gram
            drafter over the answer history, plus a draft-model drafter when ``draft`` is given
            (priced at the calibrated draft step).
        costs: measured costs for the policy; ``None`` calibrates now (~1 s on CPU).

    Attributes:
        acceptance: acceptance measured on earlier answers, which sets the policy's
            expectations for the next one.
        history: earlier answers as a drafting source, partitioned by
            ``Speculation.history_partition`` (an answer is drafted from only for requests
            of its own access scope). Seeded sampling uses neither, so that a seed reproduces
            its sample.
        costs: the start-up calibration; the policy prices target passes with
            :attr:`pass_costs`, learned online from every pass run.
        typical_answer_tokens: a moving average of answer lengths (tokens), which prices a
            draft model's prefill.
        threads: the intra-op threads every round runs on.
        lock: taken by every round (one at a time per core).

    Raises:
        VocabularyMismatchError: the draft's vocabulary differs from the target's.
        ValueError: two drafters share a name.
    """

    def __init__(self, target: Target, draft: LoadedModel | None = None,
                 config: EngineConfig = DEFAULT_ENGINE_CONFIG, *, drafters: Sequence[Drafter] | None = None,
                 costs: CostModel | None = None) -> None:
        if draft is not None:
            check_compatible(target, draft)
        self.config = config
        self.target = target
        self.draft = draft
        self.acceptance = AcceptanceTable(config.policy)
        self.history = AnswerHistory(config.max_ngram, config.min_ngram, config.answer_history)
        self.prefix_cache = PrefixCache(target, config.prefix_cache_entries)
        self.typical_answer_tokens = 64.0
        self.costs = costs or calibrate(target, draft, config.num_speculative_tokens + 1)
        self.pass_costs = OnlineCosts(self.costs.verify_ms)  # what real passes cost, learned as they run
        self.learn_costs = costs is None if config.learn_costs is None else config.learn_costs
        self.threads = torch.get_num_threads()  # every round runs on these intra-op threads (see Batch)
        self.lock = threading.Lock()
        self.drafters: list[Drafter] = list(drafters) if drafters is not None else self._default_drafters()
        names = [d.name for d in self.drafters]
        if len(set(names)) != len(names):
            raise ValueError(f"drafter names must be distinct, got {names}")
        # Move everything loaded so far (models, tokenizers, libraries: ~0.5M objects) out of the
        # cyclic GC's reach: otherwise a full collection triggered by a request's n-gram index
        # rescans them all, a ~200 ms pause inside decoding. Garbage is collected first so that
        # none is frozen.
        gc.collect()
        gc.freeze()
        log.info("engine ready: verify ms %s, draft step ms %s", [round(c, 1) for c in self.costs.verify_ms],
                 self.costs.draft_step_ms)

    def _default_drafters(self) -> list[Drafter]:
        """An n-gram drafter over the answer history (its states start from their priors), and a
        draft-model drafter when there is a draft (its prior: its measured agreement)."""
        config, draft = self.config, self.draft
        line_breaks = line_break_ids(self.target.tokenizer) if config.line_bounded_drafts else frozenset()
        drafters: list[Drafter] = [NGramDrafter(config.max_ngram, config.min_ngram, history=self.history,
                                                line_breaks=line_breaks)]
        for state, (first, rest) in STATE_PRIORS.items():
            self.acceptance.set_prior(state, first, rest)
        if draft is not None:
            drafter = DraftModelDrafter(draft, self.target, config.draft_min_confidence,
                                        step_ms=self.costs.draft_step_ms, feed_ms=self.costs.draft_feed_ms,
                                        costs=self._draft_costs(self.costs))
            drafters.append(drafter)
            agreement = config.draft_agreement
            if agreement is None:
                agreement = measure_draft_agreement(self.target, draft)
            self.acceptance.set_prior(drafter.name, agreement, agreement)
            log.info("draft model %s: top-1 agreement %.2f with the target (the policy's prior)", draft.name,
                     agreement)
        return drafters

    def attach_draft(self, draft: LoadedModel, costs: CostModel, min_confidence: float | None = None,
                     agreement: float | None = None) -> None:
        """Add (or replace) the draft model and its drafter, priced by ``costs`` (the target's
        calibration with the draft's measured step and feed costs); ``agreement`` starts the
        draft model's states (else the generic prior). Takes effect from the next request.

        Raises:
            VocabularyMismatchError: the draft's vocabulary differs (both are named).
        """
        check_compatible(self.target, draft)
        confidence = self.config.draft_min_confidence if min_confidence is None else min_confidence
        drafter = DraftModelDrafter(draft, self.target, confidence, step_ms=costs.draft_step_ms,
                                    feed_ms=costs.draft_feed_ms, costs=self._draft_costs(costs))
        with self.lock:
            self.draft = draft
            self.costs = costs
            self.drafters = [d for d in self.drafters if d.name != drafter.name] + [drafter]
            if agreement is not None:
                self.acceptance.set_prior(drafter.name, agreement, agreement)

    def _draft_costs(self, costs: CostModel) -> OnlineCosts | None:
        """The draft model's forward costs learned online (prior: its calibration; until it
        runs, scaled by how the target's passes compare with theirs); ``None`` when costs are
        not learned or the draft step was not measured."""
        if not self.learn_costs or costs.draft_step_ms is None:
            return None
        return OnlineCosts(costs.draft_feed_ms or (costs.draft_step_ms,), reference=self.pass_costs)

    def resolve(self, config: GenerationConfig) -> LogitsSettings:
        """``config``'s effective logits settings on this target (the checkpoint's
        ``generation_config`` under the request's; :func:`decoding.logits.effective_settings`):
        a caller that checks a request early resolves it once and hands the result on.

        Raises:
            GenerationSettingError: a token id outside the vocabulary, or a checkpoint setting
                the engine cannot apply exactly.
        """
        return effective_settings(config, self.target.generation_defaults, self.target.vocab_size)

    def check_request(self, prompt_ids: Sequence[int], config: GenerationConfig,
                      contexts: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
        """Validate a request; return its prompt and contexts as lists of ints. The one check of
        the context window (the target's ``max_positions``).

        Raises:
            PromptError: empty prompt, prompt or context ids outside the vocabulary, or
                the prompt alone fills the context window.
            ValueError: a ``drafting`` mode naming a drafter the engine lacks (e.g.
                ``"draft_model"`` without a draft model).
        """
        prompt = [int(t) for t in prompt_ids]
        max_pos = self.target.max_positions
        if not prompt:
            raise PromptError("the prompt is empty: at least one token is needed")
        if len(prompt) >= max_pos:
            raise PromptError(f"the prompt has {len(prompt)} tokens; the model's context window is {max_pos}")
        mode = config.speculation.drafting
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

    def cost_model(self, context_tokens: int) -> CostModel:
        """The policy's costs for a request at ``context_tokens``: target passes from the
        online estimates (:class:`~decoding.planning.online_costs.OnlineCosts`), the draft model's
        from its calibration."""
        return self.pass_costs.cost_model(context_tokens, len(self.costs.verify_ms), self.costs.draft_step_ms,
                                          self.costs.draft_feed_ms)

    def remember(self, prompt: list[int], output: list[int], partition: str = "") -> None:
        """Book a finished answer: a drafting source for later requests of the same history
        ``partition`` (access scope) and the typical answer length (a moving average, tokens)
        that prices a draft model's prefill."""
        self.history.add(prompt, output, partition)
        self.typical_answer_tokens = 0.8 * self.typical_answer_tokens + 0.2 * len(output)
