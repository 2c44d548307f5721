"""Continuous batching: requests that join and leave between rounds share each target pass.

A :class:`Batch` holds running requests of one engine (:class:`~decoding.request.RequestState`).
:meth:`Batch.add` admits one: into an idle batch its prefill runs at once, in the target's largest
runs; while others decode it is prefilled one chunk per round (chunked prefill on the target's fixed
boundaries, :meth:`~decoding.backends.target.Target.chunk_ends`), so the admitted streams keep
getting tokens while a newcomer prefills, and what is left of it once they end goes in at once.
:meth:`Batch.step` runs one round for all: plan → propose → verify → commit. Each request plans
(:mod:`decoding.planning.round`; alone: its own policy; in a batch: γ per request from the batch's
cost, :mod:`decoding.planning.batch_policy`) and drafts, one
target pass verifies every request's draft (:meth:`Target.forward <decoding.backends.target.Target.forward>`: each
request attends to its own KV cache), and each commits through its own stop checker. A
finished or cancelled request leaves at the round boundary; the others never notice
(iteration-level scheduling, Yu et al., OSDI 2022 "Orca").

Exactness: a request's logits come from its own KV cache and positions; only the
linears' summation order differs from its solo pass (evals/results/README.md, "The exactness
contract"). The seeded sample of a request is drawn with noise seeded by (seed, position), so
it does not depend on who shares the batch. ``evals/exactness.py --batched`` checks both.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from decoding.config import DEFAULT_CONFIG, GenerationConfig
from decoding.core import EngineCore
from decoding.drafters.draft_model import DraftModelDrafter
from decoding.logits import LogitsSettings
from decoding.planning.batch_policy import BatchSpeculation
from decoding.planning.policy import Decision
from decoding.planning.round import plan_round
from decoding.request import RequestState, StreamEvent, check_cancel, round_request
from decoding.stats import Stopwatch


class Batch:
    """Running requests of one engine that share each target pass.

    Args:
        core: the engine's core (its target, drafters, shared tables and lock).
        speculation: how a batch of ≥ 2 chooses γ; ``None`` = the core's ``batch_speculation``.

    Not thread-safe on its own: one thread drives a batch (each call takes the core's
    lock, so other batches and streams of the same engine take turns with it).
    """

    def __init__(self, core: EngineCore, speculation: BatchSpeculation | None = None) -> None:
        self.core = core
        self.speculation = speculation or core.config.batch_speculation
        self.active: list[RequestState] = []

    def __len__(self) -> int:
        return len(self.active)

    def add(self, prompt_ids: Sequence[int], config: GenerationConfig = DEFAULT_CONFIG,
            contexts: Sequence[Sequence[int]] = (), cancel: Callable[[], bool] | None = None,
            settings: LogitsSettings | None = None) -> tuple[RequestState, list[StreamEvent]]:
        """Admit a request: check it; into an idle batch prefill it (passes of its own) and take
        its first token; while others decode, leave its prefill to :meth:`step`, a chunk a round.

        ``settings`` are ``config``'s effective logits settings when the caller resolved them
        already (:meth:`~decoding.core.EngineCore.resolve`); else they are resolved here.

        Returns:
            Its state and its first events: none while its prefill waits for the rounds, else
            the first token's, plus the final one when the request ended already (a budget of
            one, EOS first).
        Raises:
            PromptError, ValueError, GenerationSettingError: as
                :meth:`~decoding.core.EngineCore.check_request`; nothing is admitted.
        """
        prompt, lists = self.core.check_request(prompt_ids, config, contexts)
        state = RequestState(self.core, prompt, config, lists, cancel, settings)
        with self.core.lock, torch.inference_mode():
            self._use_engine_threads()
            if any(not s.prefilling for s in self.active):
                state.begin()
                events = [] if state.prefilling else [state.prefill_chunk() or StreamEvent("")]
            else:  # its whole prefill now, in the target's largest runs
                state.begin()
                events = [state.prefill_chunk(rest=True) or StreamEvent("")]
            if state.done:
                events.append(state.finish())
            else:
                self.active.append(state)
        return state, events

    def step(self) -> list[tuple[RequestState, StreamEvent]]:
        """One round: the next prefill chunk of the oldest request still prefilling (its first
        token when that was its last chunk), then a decode round for every running request;
        finished and cancelled requests leave.

        Returns:
            ``(request, event)`` pairs: a first token's, then each running request's committed
            block in request order, then the final event of each request that ended this round.
        """
        if not self.active:
            return []
        events: list[tuple[RequestState, StreamEvent]] = []
        with self.core.lock, torch.inference_mode():
            self._use_engine_threads()
            for state in self.active:
                check_cancel(state)
            running = [s for s in self.active if not s.done and not s.prefilling]
            newcomer = next((s for s in self.active if s.prefilling), None)
            if newcomer is not None:  # a chunk a round while others decode; else the rest at once
                first = newcomer.prefill_chunk(rest=not running)
                if first is not None:
                    events.append((newcomer, first))
            if running:
                plans = self._plan(running)
                self._propose(running, plans)
                logits = self._verify(running)
                events += [(s, s.commit(rows, len(running))) for s, rows in zip(running, logits, strict=True)]
            events += [(s, s.finish()) for s in self.active if s.done]
            self.active = [s for s in self.active if not s.done]
        return events

    def _use_engine_threads(self) -> None:
        """Run on the engine's intra-op threads. A lean draft switches to one thread for its own
        steps (``decoding.drafters.lean``); measured in the server, the target's passes on the
        scheduler thread then ran on one core (prefill 2.1 → 4.5 s for the 0.5B model) once such a
        draft was attached, so every round sets them again (a few µs)."""
        torch.set_num_threads(self.core.threads)

    # -- one round ----------------------------------------------------------------------------
    def _plan(self, running: list[RequestState]) -> list[Decision]:
        """Each request's plan (:func:`~decoding.planning.round.plan_round`), target passes priced by
        the core's online pass costs."""
        core = self.core
        return plan_round([round_request(s) for s in running], self.speculation, core.pass_costs.cost_model,
                          len(core.costs.verify_ms))

    @staticmethod
    def _propose(running: list[RequestState], plans: list[Decision]) -> None:
        """Every request drafts its plan; the draft-model segments of a batch run together, their
        forwards shared (:meth:`~decoding.drafters.draft_model.DraftModelDrafter.propose_together`)."""
        together = len(running) > 1
        proposed = [(s, s.propose(d, defer_draft_model=together)) for s, d in zip(running, plans, strict=True)]
        deferred = [(s, segment) for s, segment in proposed if segment is not None]
        if not deferred:
            return
        clock = Stopwatch()
        drafts = DraftModelDrafter.propose_together([segment for _, segment in deferred])
        share = clock.ms / len(deferred)
        for (state, _), draft in zip(deferred, drafts, strict=True):
            state.add_model_draft(draft, share)

    def _verify(self, running: list[RequestState]) -> list[torch.Tensor]:
        """One target pass over every request's last token and draft, timed into the core's
        online pass costs; per request, logits ``(len(pass_tokens), vocab)``."""
        core, target = self.core, self.core.target
        rows = sum(len(s.pass_tokens) for s in running)
        context = sum(s.context_tokens for s in running)
        clock = Stopwatch()
        logits = target.forward([(s.pass_tokens, s.cache) for s in running])
        if core.learn_costs and (len(running) == 1 or target.packed):
            core.pass_costs.observe(rows, context, clock.ms)
        return logits
