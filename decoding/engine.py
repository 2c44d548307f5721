"""The speculative decoding engine (readability bar: gpt-fast's ``generate.py``).

Per request: prefill the target, take its first token, then repeat rounds of
plan (the policy over the drafters' offers) → draft (each planned drafter proposes,
continuing the one before) → verify (one target pass over the last committed token
plus the draft) → crop the KV cache to the committed length → commit through the stop
checker, until EOS, a stop string, the budget or cancellation. A request's state between
rounds is a :class:`~decoding.request.RequestState`; several requests share each target
pass in a :class:`~decoding.batch.Batch` (continuous batching), and a lone request is a
batch of one.

:class:`SpeculativeEngine` is the façade; what lives as long as the process (the target,
the drafters, the shared tables, the costs and the lock) is its
:class:`~decoding.core.EngineCore`, built once from an :class:`~decoding.core.EngineConfig`.
The request's :class:`~decoding.drafters.base.DraftingMode` selects among the drafters by
name; the request code knows the draft-model drafter by type (to run a batch's draft-model
segments together and to price its prefill).
"""

from __future__ import annotations

import logging
from typing import Callable, Iterator, Sequence

from decoding.backends.memory import return_freed_memory
from decoding.backends.models import LoadedModel
from decoding.backends.target import Target
from decoding.batch import Batch
from decoding.config import DEFAULT_CONFIG, GenerationConfig
from decoding.core import DEFAULT_ENGINE_CONFIG, EngineConfig, EngineCore
from decoding.drafters.base import Drafter
from decoding.drafters.draft_model import check_compatible
from decoding.logits import LogitsSettings
from decoding.planning.batch_policy import BatchSpeculation
from decoding.planning.calibration import measure_draft_feed_ms
from decoding.planning.policy import CostModel
from decoding.request import GenerationResult, StreamEvent

__all__ = ["GenerationResult", "SpeculativeEngine", "StreamEvent"]

log = logging.getLogger(__name__)


class SpeculativeEngine:
    """Exact speculative decoding over one target model.

    Args:
        target: the target model.
        draft: an optional draft model (same vocabulary; checked here).
        config: the engine's knobs (:class:`~decoding.core.EngineConfig`).
        drafters: the drafters to drive, each with a distinct ``name``; ``None`` = an
            n-gram drafter over the answer history, plus a draft-model drafter when ``draft``
            is given (priced at the calibrated draft step).
        costs: measured costs for the policy; ``None`` calibrates now (~1 s on CPU).

    Attributes:
        core: what the engine keeps for the process's lifetime (:class:`~decoding.core.EngineCore`).

    Thread-safe: rounds take the core's lock.

    Raises:
        VocabularyMismatchError: the draft's vocabulary differs from the target's.
        ValueError: two drafters share a name.
    """

    def __init__(self, target: Target, draft: LoadedModel | None = None,
                 config: EngineConfig = DEFAULT_ENGINE_CONFIG, *, drafters: Sequence[Drafter] | None = None,
                 costs: CostModel | None = None) -> None:
        self.core = EngineCore(target, draft, config, drafters=drafters, costs=costs)

    @property
    def target(self) -> Target:
        """The target model (the core's)."""
        return self.core.target

    def attach_draft(self, draft: LoadedModel, step_ms: float, min_confidence: float | None = None,
                     agreement: float | None = None, feed_ms: Sequence[float] | None = None) -> None:
        """Add (or replace) the draft model after start-up — a draft built in the background
        while the engine served with its other drafters. Takes effect from the next request.

        Args:
            draft: a draft with the target's vocabulary.
            step_ms: its measured cost of one step (ms), the draft-model offers' price.
            min_confidence: the draft model stops below this top probability (default: the
                engine's ``draft_min_confidence``).
            agreement: its measured top-1 agreement with the target in [0, 1]; the policy
                starts the draft model's states from it (else from the generic prior,
                under which a draft that is not much cheaper than a target pass is never tried).
            feed_ms: its forward cost over 1..n tokens (ms); ``None`` measures it now (~2 s,
                :func:`~decoding.planning.calibration.measure_draft_feed_ms`).
        Raises:
            VocabularyMismatchError: the draft's vocabulary differs (both are named).
        """
        core = self.core
        if feed_ms is None:
            check_compatible(core.target, draft)  # before the measurement (~2 s)
            feed_ms = measure_draft_feed_ms(draft, len(core.costs.verify_ms))
        core.attach_draft(draft, CostModel(core.costs.verify_ms, step_ms, tuple(feed_ms)), min_confidence, agreement)
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

        The core's lock is held for each round, never across a ``yield``: streams from one
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
            PromptError, ValueError, GenerationSettingError: as
                :meth:`EngineCore.check_request <decoding.core.EngineCore.check_request>`, when
                the generator is first advanced.
        """
        batch = Batch(self.core)
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
        return Batch(self.core, speculation)

    def resolve(self, config: GenerationConfig) -> LogitsSettings:
        """``config``'s effective logits settings (:meth:`EngineCore.resolve
        <decoding.core.EngineCore.resolve>`), to hand to :meth:`stream` or
        :meth:`Batch.add <decoding.batch.Batch.add>`.

        Raises:
            GenerationSettingError: a token id outside the vocabulary, or a checkpoint setting
                the engine cannot apply exactly.
        """
        return self.core.resolve(config)
