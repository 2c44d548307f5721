"""One request's decoding state between rounds: what the engine and a batch step.

A request lives through :meth:`~RequestState.begin` (take a KV cache), then
:meth:`~RequestState.prefill_chunk` until it returns its first event (prefill the target, take
its first token, start its own drafters: all at once into an idle batch, a chunk per round
while others decode), then rounds of a plan (:mod:`decoding.planning.round`, over
:func:`round_request`) →
:meth:`~RequestState.propose` (the planned drafters propose) → a target pass over
:attr:`~RequestState.pass_tokens` (alone or packed with other requests' rows) →
:meth:`~RequestState.commit` (verify, crop its KV cache, commit through its stop checker),
and ends with :meth:`~RequestState.finish`. Everything a request owns — KV cache, drafters,
stop checker, token selector (seed), detokenizer, statistics — is here, so requests sharing
passes never see each other's state; what the engine's core shares across requests
(acceptance table, answer history, pass costs) is reached through it.

KV-cache invariant between rounds: the target cache holds every committed token but the
last one, which is the first input of the next pass.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from decoding.backends.target import KVCache
from decoding.config import GenerationConfig
from decoding.core import EngineCore
from decoding.detokenize import IncrementalDetokenizer
from decoding.drafters.base import Draft, Drafter, DraftingMode, DraftRequest, join_drafts
from decoding.drafters.draft_model import DraftModelDrafter
from decoding.logits import LogitsSettings, effective_settings
from decoding.planning.policy import PLAIN, AcceptanceTable, Decision, DrafterPolicy, Segment, draft_prefill_pays
from decoding.planning.round import RoundRequest, gamma_ceiling
from decoding.planning.shadow import ShadowBook
from decoding.sampling import TokenSelector
from decoding.stats import GenerationStats, RequestClock
from decoding.stopping import StopChecker
from decoding.verification import verify_greedy

#: Output positions a request's KV cache allocates up front (tokens): a memory setting, not a
#: budget; an answer allowed more (``max_new_tokens``) grows its cache as it goes.
KV_OUTPUT_PREALLOC = 512


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


def draft_segments(segments: Sequence[Segment], drafters: dict[str, Drafter], stats: GenerationStats) -> list[Draft]:
    """Each planned drafter proposes in turn, continuing the tokens before it; a segment
    that stops short ends the round's draft. Proposal time goes to the drafter's stats,
    and to ``stats.drafting_ms`` when the cost model prices it (a step cost)."""
    drafts: list[Draft] = []
    after: list[int] = []
    for segment in segments:
        name = segment.offer.drafter
        with stats.drafting(name, priced=segment.offer.step_ms != 0):  # priced (or unmeasured) model steps
            draft = drafters[name].propose(segment.tokens, after)
        drafts.append(draft)
        after += draft.tokens
        if len(draft.tokens) < segment.tokens:
            break
    return drafts


class RequestState:
    """One request between rounds (see the module docstring).

    Args:
        core: the engine's core, whose target, drafters (copied per request), acceptance table,
            answer history and pass costs this request uses.
        prompt: prompt ids, already checked (:meth:`~decoding.core.EngineCore.check_request`).
        config: budget, sampling, stop conditions, drafting mode.
        contexts: token sequences that seed the n-gram drafter (retrieved passages).
        cancel: polled between rounds; returning True ends the request with ``"cancelled"``.
        settings: ``config``'s effective logits settings (``None``: resolved here).
    """

    def __init__(self, core: EngineCore, prompt: list[int], config: GenerationConfig,
                 contexts: list[list[int]], cancel: Callable[[], bool] | None = None,
                 settings: LogitsSettings | None = None) -> None:
        self.core, self.prompt, self.config, self.contexts, self.cancel = core, prompt, config, contexts, cancel
        target = core.target
        eos = target.eos_token_ids() if config.budget.eos_token_ids is None else config.budget.eos_token_ids
        self._eos = eos
        self.budget = min(config.budget.max_new_tokens, target.max_positions - len(prompt))
        self.stop = StopChecker(target.tokenizer, frozenset(eos), tuple(config.budget.stop_strings), self.budget,
                                config.budget.loop_span)
        self.detok = IncrementalDetokenizer(target.tokenizer, tuple(config.budget.stop_strings))
        self.stats = GenerationStats(prompt_tokens=len(prompt), backend=target.backend)
        self.settings = settings if settings is not None else effective_settings(
            config, target.generation_defaults, target.vocab_size)
        self.stats.generation_settings = self.settings.to_dict()
        # A seeded sample must not depend on earlier requests: no answer history, priors only.
        self.seeded = not config.sampling.greedy and config.sampling.seed is not None
        self._cache: KVCache | None = None  # from begin() until finish()
        self._prefilled = 0  # prompt tokens in the target cache
        self._prompt_logits: torch.Tensor | None = None  # the prompt's last logits, once prefilled (parked with it)
        self._sampling: TokenSelector | None = None
        self.drafters: list[Drafter] = []
        self._policy: DrafterPolicy | None = None
        self.shadows = ShadowBook(core.acceptance)  # declined free proposals (replaced with the policy's table)
        self.decision: Decision = PLAIN
        self.draft = Draft([])
        self._segments: list[Draft] = []
        self.clock = RequestClock(self.stats)

    # -- life cycle ---------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """The request needs no more rounds (finished, cut or cancelled)."""
        return self.stop.finish_reason is not None

    @property
    def cache(self) -> KVCache:
        """Its target KV cache (from :meth:`begin` until :meth:`finish`)."""
        if self._cache is None:
            raise RuntimeError("the request has no KV cache: not started, or finished")
        return self._cache

    @property
    def _selector(self) -> TokenSelector:
        """Its token selector (from :meth:`begin` on)."""
        if self._sampling is None:
            raise RuntimeError("the request has not started")
        return self._sampling

    @property
    def policy(self) -> DrafterPolicy:
        """Its drafting policy (once it has a first token)."""
        if self._policy is None:
            raise RuntimeError("the request has not started")
        return self._policy

    @property
    def context_tokens(self) -> int:
        """Positions in its target KV cache (what a pass attends over)."""
        return len(self.prompt) + max(len(self.stop.output) - 1, 0)

    @property
    def prefilling(self) -> bool:
        """Begun, and part of the prompt is still to be prefilled (no first token yet)."""
        return self._cache is not None and not self.done and self._prefilled < len(self.prompt)

    def begin(self) -> None:
        """Start the clock and take a KV cache (nothing prefilled yet); a request without
        budget ends here (``"length"``)."""
        self.clock.start()
        if self.budget <= 0:
            self.stop.finish_reason = "length"
            return
        target, sampling = self.core.target, self.config.sampling
        self._sampling = TokenSelector(
            self.settings.processors(len(self.prompt), self._eos, target.device), sampling.temperature,
            sampling.top_k, sampling.top_p, sampling.seed, len(self.prompt), target.device)
        reuse = self.core.prefix_cache.take(self.prompt, len(self.prompt) + min(self.budget, KV_OUTPUT_PREALLOC),
                                              self.config.speculation.history_partition)
        self._cache, self._prefilled, self._prompt_logits = reuse.cache, reuse.tokens, reuse.logits
        self.stats.prefix_reused_tokens = reuse.tokens

    def prefill_chunk(self, rest: bool = False) -> StreamEvent | None:
        """Prefill the prompt's next chunk, up to the next of the target's
        :meth:`~decoding.backends.target.Target.chunk_ends` (the same boundaries however the
        prefill is spread over rounds), or with ``rest`` all of it that is left (the target keeps
        those boundaries inside the call); after the last chunk choose the first token and start
        the drafters. Returns the first token's event then, ``None`` before (and an empty
        event for a request that ended in :meth:`begin`)."""
        if self._cache is None:
            return StreamEvent("")
        target, stats = self.core.target, self.stats
        if self._prompt_logits is None:  # else the whole prompt was reused (core.prefix_cache)
            ends = target.chunk_ends(len(self.prompt))
            end = ends[-1] if rest else next(e for e in ends if e > self._prefilled)
            logits = target.prefill(self.prompt[self._prefilled:end], self._cache)
            self._prefilled = end
            if end < len(self.prompt):
                return None
            self._prompt_logits = logits
        self.clock.prefilled()
        committed = self.stop.accept([self._selector.choose(self.prompt, self._prompt_logits.clone())])
        stats.record_first()
        self.clock.first_token()
        event = StreamEvent(self._delta(), committed)
        with stats.overhead():
            self._start_drafters(committed)
        return event

    def _start_drafters(self, committed: list[int]) -> None:
        """The request's copies of the drafters its mode selects, begun after the prefill, and
        its policy. A draft model that prefills the prompt here runs a priced forward: booked as
        drafting, not overhead."""
        if not self.done:
            drafting = self.config.speculation.drafting
            self.drafters = [copy.copy(d) for d in self.core.drafters if drafting.selects(d.name)]
        prefill_draft = self._prefill_draft()
        speculation = self.config.speculation
        request = DraftRequest(self.prompt, self.contexts, self.cache, self._selector, reproducible=self.seeded,
                               output_reserve=min(self.budget, KV_OUTPUT_PREALLOC) + speculation.num_speculative_tokens,
                               prefill_draft=prefill_draft, history_partition=speculation.history_partition)
        with self.stats.drafting(priced=prefill_draft):
            for d in self.drafters:
                d.begin(request)
                d.observe(committed)
        table = AcceptanceTable(self.core.acceptance.config) if self.seeded else self.core.acceptance
        self._policy = DrafterPolicy(self.core.cost_model(self.context_tokens), table)
        self.shadows = ShadowBook(table)

    def propose(self, decision: Decision, defer_draft_model: bool = False,
                ) -> tuple[DraftModelDrafter, int, list[int]] | None:
        """The planned drafters propose (a change of plan is recorded with its reason).

        Args:
            defer_draft_model: leave a trailing draft-model segment to the caller, who runs it
                together with other requests'
                (:meth:`~decoding.drafters.draft_model.DraftModelDrafter.propose_together`) and hands
                the result to :meth:`add_model_draft`.
        Returns:
            The deferred segment as ``(drafter, max_tokens, after)``, or ``None`` (the draft is complete).
        """
        with self.stats.overhead():  # the proposals' own time is booked as drafting inside
            self._record_switch(decision)
            self.decision = decision
            by_name = {d.name: d for d in self.drafters}
            segments = list(decision.segments)
            last = by_name[segments[-1].offer.drafter] if segments and defer_draft_model else None
            model = last if isinstance(last, DraftModelDrafter) else None  # the segment left to the caller
            head = segments[:-1] if model is not None else segments
            self._segments = draft_segments(head, by_name, self.stats)
            for declined in decision.declined:  # a lookup's proposal, measured off-policy
                self.shadows.declined(declined.key, by_name[declined.offer.drafter].propose(declined.tokens).tokens)
            deferred = None
            whole = all(len(d.tokens) == s.tokens for d, s in zip(self._segments, head, strict=False))
            if model is not None and whole:
                deferred = (model, segments[-1].tokens, [t for d in self._segments for t in d.tokens])
            self.draft = join_drafts(self._segments)
        return deferred

    def _record_switch(self, decision: Decision) -> None:
        """A plan by another drafter than the last round's is a switch, booked with its reason."""
        policy, stats = self.policy, self.stats
        if decision is not PLAIN and decision.drafter != policy.current:
            # at_token: tokens emitted before this round (the prefill's token + decode tokens).
            stats.switches.append({"at_token": 1 + stats.decode_tokens, "from": policy.current or "plain",
                                   "to": decision.drafter or "plain", "reason": decision.reason})
            policy.current = decision.drafter

    def add_model_draft(self, draft: Draft, ms: float) -> None:
        """The deferred draft-model segment's proposal (see :meth:`propose`), ``ms`` its share of
        the shared draft forwards."""
        self.stats.book_drafting(DraftModelDrafter.name, ms)
        self._segments.append(draft)
        self.draft = join_drafts(self._segments)

    @property
    def pass_tokens(self) -> list[int]:
        """This round's target-pass input: the last committed token, then the draft."""
        return [self.stop.output[-1]] + self.draft.tokens

    def commit(self, logits: torch.Tensor, batch_size: int = 1) -> StreamEvent:
        """Verify the draft against this round's logits ``(len(pass_tokens), vocab)``, crop the
        KV cache to the committed length and commit through the stop checker."""
        with self.stats.overhead():
            seq_len = len(self.prompt) + len(self.stop.output)
            scores = self._selector.scores(self.prompt + self.stop.output, self.draft.tokens, logits)
            block, n_accepted = verify_greedy(self.draft.tokens, scores)
            self.core.target.rollback(self.cache, seq_len + n_accepted)
            committed = self.stop.accept(block)
            proposed = [(s.offer.drafter, len(d.tokens), d.origin)
                        for s, d in zip(self.decision.segments, self._segments, strict=False)]
            self.stats.record_round(proposed, n_accepted, len(committed), batch_size)
            self.policy.update(self.decision, [n for _, n, _ in proposed], n_accepted)
            self.shadows.committed(committed)
            for d in self.drafters:
                d.observe(committed)
            self.draft, self._segments, self.decision = Draft([]), [], PLAIN
        return StreamEvent(self._delta(), committed)

    def finish(self) -> StreamEvent:
        """The last event, carrying the :class:`GenerationResult`; books the answer into the
        engine's answer history."""
        stats, stop = self.stats, self.stop
        if self._cache is not None and stop.output:  # cancelled while it prefilled: nothing decoded
            if stop.finish_reason == "repetition":  # τ counts what the user gets, not the cut repeats
                stats.loop_cut_tokens = stop.generated - len(stop.output)
                stats.decode_tokens = max(len(stop.output) - 1, 0)
                stats.truncate(len(stop.output))
            with stats.overhead():
                self.core.remember(self.prompt, stop.output, self.config.speculation.history_partition)
            self.clock.decoded()
        self.clock.finished()
        stats.new_tokens = len(stop.output)
        stats.finish_reason = stop.finish_reason
        text = stop.final_text()
        result = GenerationResult(list(stop.output), text, stop.finish_reason or "length", stats)
        if self._cache is not None and self._prompt_logits is not None:  # kept for a prompt sharing its prefix
            self.core.prefix_cache.park(self.prompt, self._cache, self._prompt_logits,
                                        self.config.speculation.history_partition)
        elif self._cache is not None:  # cancelled while it prefilled: free the KV cache now
            self.core.target.release(self._cache)
        self._cache = None
        return StreamEvent(self.detok.finish(text), [], result)

    # -- helpers ------------------------------------------------------------------------------
    def _delta(self) -> str:
        """Text that became final with the last commit: ids a loop cut may still remove and a
        possibly unfinished stop string are held back; a finished output goes out with the result."""
        if self.stop.finish_reason is not None:
            return ""
        return self.detok.push(self.stop.output[:self.stop.stable_length])

    def _prefill_draft(self) -> bool:
        """Whether a draft model with its own KV cache prefills the prompt for this request:
        always when the request asks for the draft model alone; with ``auto`` when
        :func:`~decoding.planning.policy.draft_prefill_pays` over a typical answer (the recent answers'
        mean length, half of it on generated spans). The decision and its numbers are in
        ``stats.draft_prefill``."""
        draft = next((d for d in self.drafters if isinstance(d, DraftModelDrafter)), None)
        if draft is None or not draft.needs_prefill:
            return False
        if self.config.speculation.drafting is DraftingMode.DRAFT_MODEL:
            self.stats.draft_prefill = "yes: the draft model alone was asked for"
            return True
        core = self.core
        alpha = core.acceptance.priors.get(draft.name, (0.0, 0.0))[1]
        expected = min(self.budget, core.typical_answer_tokens) / 2
        pays, reason = draft_prefill_pays(core.cost_model(len(self.prompt)), len(self.prompt), expected, alpha,
                                          self.config.speculation.num_speculative_tokens)
        self.stats.draft_prefill = f"{'yes' if pays else 'no'}: {reason}"
        return pays


# -- what a batch asks of each request between rounds ------------------------------------------------
def round_request(state: RequestState) -> RoundRequest:
    """What this round's plan reads of a running request (:mod:`decoding.planning.round`): its
    mode, its γ ceiling (:func:`~decoding.planning.round.gamma_ceiling` over its
    ``num_speculative_tokens``, remaining budget and the context window), its drafters and policy."""
    speculation = state.config.speculation
    context_room = state.core.target.max_positions - (len(state.prompt) + len(state.stop.output))
    room = gamma_ceiling(speculation.num_speculative_tokens, state.stop.remaining, context_room)
    return RoundRequest(speculation.mode, room, state.drafters, state.policy, state.context_tokens)


def check_cancel(state: RequestState) -> None:
    """End the request with ``"cancelled"`` when its cancel callback says so."""
    if not state.done and state.cancel is not None and state.cancel():
        state.stop.finish_reason = "cancelled"
