"""The copilot service: retrieval → prompt → speculative decoding → answer with citations."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

import torch

from copilot.config import Settings
from copilot.citations import CitationFilter, cited_numbers
from copilot.prompting import (NO_CONTEXT_ANSWER, PROMPT_STYLES, BuiltPrompt, ChatTurn, PromptStyle,
                               PromptTooLongError, bare_prompt_tokens, build_prompt, style_name)
from copilot.grounding import DocumentText, Grounding, assess, entity_order, not_found_answer, question_entities
from copilot.quotes import Quote, Unverified, check_literals
from copilot.retrieval import HybridRetriever, Passage
from copilot.sources import Source, group_by_document, with_highlights
from decoding import GenerationConfig, SpeculativeEngine
from decoding.derived_draft import AUTO_DRAFT, DERIVED_PREFIX, LEAN_DRAFT, derive_draft
from decoding.engine import GenerationResult, StreamEvent
from decoding.logits import effective_settings
from decoding.stats import GenerationStats
from decoding.lean_draft import MIN_AGREEMENT, MIN_STEP_RATIO, LeanDraftLoader
from decoding.embedded import QWEN_CODER_05B, QWEN_CODER_15B, find_embedded
from decoding.models import LoadedModel, load_model, resolve_device
from ingestion.documents import SearchFilter
from ingestion.store import ChunkStore, open_store

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """A question ready to decode: its prompt, passages and generation settings."""

    question: str
    prompt: BuiltPrompt
    config: GenerationConfig
    retrieval_ms: float
    grounding: Grounding = field(default_factory=lambda: Grounding(True))


@dataclass
class AnswerEvent:
    """One streamed piece of an answer: a checked text delta; the last event carries the
    engine's ``result`` (its ``text`` checked too) and the citations removed."""

    delta: str
    result: GenerationResult | None = None
    invalid_citations: list[int] = field(default_factory=list)


@dataclass
class Answer:
    """A finished answer: ``text`` cites ``sources`` as [n]; ``stats`` from the engine.

    Attributes:
        cited: source numbers cited in ``text`` (every one names a source).
        invalid_citations: numbers the model cited that name no source (removed from ``text``).
    """

    text: str
    sources: list[Source]
    stats: dict = field(default_factory=dict)
    finish_reason: str = "stop"
    cited: list[int] = field(default_factory=list)
    invalid_citations: list[int] = field(default_factory=list)
    quotes: list[Quote] = field(default_factory=list)
    unverified: list[Unverified] = field(default_factory=list)
    not_found: bool = False


@dataclass
class AnswerAssembler:
    """Folds the :class:`AnswerEvent` stream of one prepared question into its
    :class:`Answer` — the one place that does, for the API, the CLI and the evals.

    Attributes:
        text: the answer text so far (deltas add up to the final text).
        result: the engine's result once the last event arrived (``None`` until then, and
            for good when the stream was stopped early).
    """

    prepared: Prepared
    text: str = ""
    result: GenerationResult | None = None
    invalid_citations: list[int] = field(default_factory=list)

    def add(self, event: AnswerEvent) -> str:
        """Take one event; returns its text delta."""
        self.text += event.delta
        if event.result is not None:
            self.result = event.result
            self.invalid_citations = event.invalid_citations
        return event.delta

    def answer(self, stopped_reason: str = "cancelled") -> Answer:
        """The answer so far. Its ``stats``: the engine's statistics plus ``retrieval_ms``,
        ``finish_reason``, ``invalid_citations`` and ``no_context: true`` when nothing was
        retrieved; ``finish_reason`` is ``stopped_reason`` when the stream ended before its
        result (a client that left, an interrupted job)."""
        prompt = self.prepared.prompt
        if self.result is not None:
            stats, reason = self.result.stats.to_dict(), self.result.finish_reason
        else:
            stats, reason = {"prompt_tokens": len(prompt.input_ids)}, stopped_reason
        if not prompt.sources:
            stats["no_context"] = True
        grounding = self.prepared.grounding
        checked = check_literals(self.text, prompt.sources, self.prepared.question)
        stats["retrieval_ms"] = round(self.prepared.retrieval_ms, 2)
        stats["finish_reason"] = reason
        stats["invalid_citations"] = self.invalid_citations
        stats["grounding"] = grounding.to_dict()
        stats["literals"] = {"quoted": len(checked.quotes), "unverified": len(checked.unverified)}
        return Answer(self.text, prompt.sources, stats, reason, cited_numbers(self.text), self.invalid_citations,
                      checked.quotes, checked.unverified, not grounding.answerable)




def auto_draft_plan(settings: Settings) -> str | None:
    """What ``draft_model = "auto"`` uses here: the embedded Qwen2.5-Coder 0.5B for the embedded
    1.5B target (same family, same tokenizer); on a CPU otherwise ``derived:int4`` (the lean
    packed-int4 copy, :mod:`decoding.lean_draft`, kept only when its calibration at start shows
    it pays); none elsewhere. ``None`` when no draft model will be tried."""
    if settings.draft_model != AUTO_DRAFT:
        return None
    if find_embedded(settings.target_model) is QWEN_CODER_15B:
        return QWEN_CODER_05B.name
    return LEAN_DRAFT if resolve_device(settings.device).type == "cpu" else None


def draft_model_plan(settings: Settings) -> str:
    """One line for ``copilot config``: which draft model the service will load and how."""
    spec = settings.draft_model
    if not spec:
        return "none (COPILOT_DRAFT_MODEL is empty): the n-gram drafter alone"
    if spec != AUTO_DRAFT:
        return f"{spec}, loaded at start"
    plan = auto_draft_plan(settings)
    if plan == LEAN_DRAFT:
        return ("auto: derived:int4 built in the background at start (n-gram drafting meanwhile) and kept "
                f"only if its calibration shows it >= {MIN_STEP_RATIO}x cheaper per step than the target and "
                f"agreeing on >= {MIN_AGREEMENT:.0%} of tokens; the outcome is logged and in /readyz")
    if plan:
        return f"auto: {plan} (same family and tokenizer), loaded at start"
    return "auto: none on this device (derived:int4 is a CPU recipe): the n-gram drafter alone"


def load_draft(settings: Settings, target: LoadedModel) -> LoadedModel | None:
    """The draft model to load with the target: none, one derived from the target, the
    same-family embedded draft (``auto`` with the embedded 1.5B target) or any HF id/path
    (``auto`` otherwise and ``derived:int4`` are built by :class:`CopilotService`, which
    calibrates them)."""
    spec = settings.draft_model
    if spec == AUTO_DRAFT:
        spec = auto_draft_plan(settings)
    if not spec or spec == LEAN_DRAFT:
        return None
    if spec.startswith(DERIVED_PREFIX):
        return derive_draft(target, spec, cache_dir=settings.model_cache_dir)
    return load_model(spec, device=settings.device, dtype=settings.dtype, cache_dir=settings.model_cache_dir)


class AnswerFeed:
    """Turns one answer's engine events into answer events (:class:`AnswerEvent`) as they arrive, with the
    citations checked (:mod:`copilot.citations`): a ``[n]`` naming none of ``n_sources``
    sources is removed from the deltas and the result's text. Push-style, so a scheduler that
    steps many answers in one batch can feed each its own events."""

    def __init__(self, n_sources: int) -> None:
        self.citations = CitationFilter(n_sources)

    def convert(self, event: StreamEvent) -> AnswerEvent:
        """The answer event for an engine event (the last one carries the result)."""
        delta = self.citations.push(event.delta)
        if event.result is None:
            return AnswerEvent(delta)
        delta += self.citations.finish()
        event.result.text = self.citations.text
        return AnswerEvent(delta, event.result, self.citations.invalid)


class CopilotService:
    """Owns the store, the retriever and the engine.

    Args:
        settings: the effective settings.
        store: an open chunk store.
        engine: the decoding engine (``None`` = retrieval only; asking raises).
    """

    def __init__(self, settings: Settings, store: ChunkStore, engine: SpeculativeEngine | None) -> None:
        self.settings = settings
        self.store = store
        self.retriever = HybridRetriever(store)
        self.engine = engine
        model_type = getattr(getattr(getattr(engine, "target", None), "model", None), "config", None)
        self.style_name = style_name(settings.prompt_style, getattr(model_type, "model_type", None))
        self.style: PromptStyle = PROMPT_STYLES[self.style_name]
        self.draft_loader: LeanDraftLoader | None = None
        self._draft_attach: threading.Thread | None = None
        if engine is None:
            self._draft_status = "no target model is loaded"
        elif getattr(engine, "draft", None) is not None:  # test doubles of the engine may have none
            self._draft_status = f"{engine.draft.name}: loaded"
        else:
            self._draft_status = draft_model_plan(settings)

    @property
    def draft_status(self) -> str:
        """Which draft model the engine uses, or why none (for ``/readyz`` and the log); while a
        background build is being attached, ``"... (attaching)"``."""
        loader = self.draft_loader
        if loader is None:
            return self._draft_status
        attaching = self._draft_attach is not None and self._draft_attach.is_alive() and loader.done()
        return f"{loader.reason} (attaching)" if attaching else loader.reason

    def start_auto_draft(self) -> None:
        """Build and calibrate ``derived:int4`` (:class:`~decoding.lean_draft.LeanDraftLoader`)
        and attach it to the engine with its measured step cost and agreement (the policy's
        prior for it). ``draft_model = "auto"`` on CPU: on a background thread while the
        engine serves with n-gram drafting, attached only when its calibration pays (else the
        reason is logged). ``draft_model = "derived:int4"``: here and now, attached whatever
        its calibration says (asked for explicitly)."""
        spec = self.settings.draft_model
        explicit = spec == LEAN_DRAFT
        lean_auto = auto_draft_plan(self.settings) == LEAN_DRAFT
        if self.engine is None or self.draft_loader is not None or not (explicit or lean_auto):
            return
        engine = self.engine
        loader = LeanDraftLoader(engine.target, self.settings.model_cache_dir, require_pay=not explicit)
        self.draft_loader = loader.start()

        def attach() -> None:
            if loader.wait() and loader.calibration is not None:
                engine.attach_draft(loader.draft, loader.calibration.draft_ms, agreement=loader.calibration.agreement)
            log.info("draft model (%s): %s", spec, loader.reason)

        self._draft_attach = threading.Thread(target=attach, name="draft-attach", daemon=True)
        self._draft_attach.start()
        if explicit:
            self.wait_for_draft()

    def wait_for_draft(self, timeout_s: float | None = None) -> None:
        """Block until the background draft build (if any) is attached or refused (seconds)."""
        if self._draft_attach is not None:
            self._draft_attach.join(timeout_s)

    @classmethod
    def from_settings(cls, settings: Settings, *, load_models: bool = True,
                      auto_draft: bool = True) -> "CopilotService":
        """Open the store and load the target (and draft) model as configured; with
        ``draft_model = "auto"`` (and ``auto_draft``) start the background draft build."""
        if settings.torch_threads:
            torch.set_num_threads(settings.torch_threads)
        store = open_store(settings)
        engine = None
        if load_models:
            target = load_model(settings.target_model, device=settings.device, dtype=settings.dtype,
                                cache_dir=settings.model_cache_dir)
            engine = SpeculativeEngine(target, load_draft(settings, target), max_ngram=settings.max_ngram,
                                       min_ngram=settings.min_ngram, answer_history=settings.answer_history,
                                       max_speculative_tokens=settings.num_speculative_tokens)
        service = cls(settings, store, engine)
        if auto_draft:
            service.start_auto_draft()
        return service

    @property
    def model_name(self) -> str:
        """The target model's id or path as configured."""
        return self.settings.target_model

    def count_tokens(self, text: str) -> int:
        """Number of target-tokenizer tokens in ``text`` (no special tokens; 0 without a model)."""
        if not text or self.engine is None:
            return 0
        return len(self.engine.target.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generation_config(self, max_new_tokens: int | None = None, **overrides) -> GenerationConfig:
        """Defaults from the settings, ``overrides`` (:class:`GenerationConfig` fields) on top.

        Raises:
            ValueError: ``max_new_tokens`` above the cap.
            decoding.config.GenerationSettingError: a setting out of range, a token id outside
                the target's vocabulary, or a checkpoint setting the engine cannot apply
                exactly (``field`` names it; a ValueError).
        """
        n = self.settings.max_new_tokens if max_new_tokens is None else max_new_tokens
        if n > self.settings.max_new_tokens_cap:
            raise ValueError(f"max_new_tokens={n} exceeds the configured cap {self.settings.max_new_tokens_cap}")
        overrides.setdefault("drafting", self.settings.drafting)
        overrides.setdefault("num_speculative_tokens", self.settings.num_speculative_tokens)
        overrides.setdefault("loop_span", self.settings.loop_span if self.settings.loop_stop else 0)
        config = GenerationConfig(max_new_tokens=n, **overrides)
        if self.engine is not None:  # token ids against the vocabulary, now rather than mid-stream
            target = self.engine.target
            effective_settings(config, target.generation_defaults, target.model.config.vocab_size)
        return config

    def warm_up(self) -> None:
        """Load the embedding model and touch both indexes now, not on the first request (seconds)."""
        self.retriever.retrieve("warm-up", 1)

    def prompt_budget(self, config: GenerationConfig) -> int:
        """Prompt tokens allowed: ``max_prompt_tokens``, capped by the context window minus the answer budget."""
        return min(self.settings.max_prompt_tokens, self.engine.target.max_positions - config.max_new_tokens)

    def check(self, question: str, config: GenerationConfig | None = None) -> str:
        """The cheap checks :meth:`prepare` starts with (no retrieval); returns the stripped question.

        Raises:
            ValueError: empty question or one longer than ``max_question_chars``.
            PromptTooLongError: the question with the instructions alone exceeds the prompt budget.
            RuntimeError: no model is loaded.
        """
        if self.engine is None:
            raise RuntimeError("no target model is loaded")
        question = self._clean(question)
        budget = self.prompt_budget(config or self.generation_config())
        needed = bare_prompt_tokens(self.engine.target.tokenizer, question, self.style)
        if needed > budget:
            raise PromptTooLongError(f"the question needs {needed} prompt tokens; the budget is {budget}")
        return question

    def _clean(self, question: str) -> str:
        """The stripped question; ValueError when empty or over ``max_question_chars``."""
        question = question.strip()
        if not question:
            raise ValueError("the question is empty")
        if len(question) > self.settings.max_question_chars:
            raise ValueError(f"the question has {len(question)} characters; the limit is "
                             f"{self.settings.max_question_chars}")
        return question

    def search(self, question: str, top_k: int | None = None, flt: SearchFilter | None = None) -> list[Source]:
        """The ``top_k`` best documents for ``question`` with their evidence lines (no model call).

        Documents holding every entity the question names (host, ticket, error code, day:
        :mod:`copilot.grounding`) come before near-duplicates that lack one; with ``top_k`` >= 2
        the best ELOG entry brings its parent or first reply along when that is not among them
        (it takes the last place).

        Raises:
            ValueError: empty question or one longer than ``max_question_chars``.
        """
        question = self._clean(question)
        k = top_k or self.settings.top_k or self.style.max_sources
        passages = self.retriever.retrieve(question, max(self.retriever.candidates, 4 * k), flt)
        candidates = group_by_document(passages, max(3 * k, k + 6))
        entities = question_entities(question)
        if entities:
            docs = [self._document_text(c) for c in candidates]
            candidates = [candidates[i] for i in entity_order(docs, entities)]
        chosen = candidates[:k]
        linked = self._linked(chosen, flt) if k >= 2 else []
        chosen = chosen[:k - len(linked)] + linked
        chosen = [replace(c, n=i + 1) for i, c in enumerate(chosen)]
        return with_highlights(question, chosen, self.store.embedder)

    def _document_text(self, source: Source) -> DocumentText:
        """A candidate document's whole text and dates, for the entity check."""
        chunks = self.store.get_document_chunks(source.doc_id) or [p.chunk for p in source.passages]
        created = source.metadata.get("created")
        return DocumentText(source.doc_id, "\n".join(c.text for c in chunks), (str(created),) if created else ())

    def _linked(self, chosen: list[Source], flt: SearchFilter | None) -> list[Source]:
        """The ELOG parent (or first reply) of the best source as a source, when not already
        chosen and no filter is set (at most one; numbered later)."""
        if not chosen or flt is not None and flt != SearchFilter():
            return []
        meta = chosen[0].metadata
        replies = meta.get("replies") or []
        if isinstance(replies, str):
            replies = [r for r in replies.split(",") if r.strip()]
        linked = [meta.get("parent_doc_id")] + [f"{meta.get('source')}#{r.strip()}" for r in replies[:1]]
        have = {c.doc_id for c in chosen}
        for doc_id in linked:
            if doc_id and doc_id not in have:
                chunks = self.store.get_document_chunks(doc_id)
                if chunks:
                    return [Source(len(chosen) + 1, tuple(Passage(0, c, 0.0) for c in chunks[:2]))]
        return []

    def prepare(self, question: str, *, top_k: int | None = None, flt: SearchFilter | None = None,
                history: list[ChatTurn] | None = None, config: GenerationConfig | None = None) -> Prepared:
        """Retrieve, group into sources, pick evidence lines and build the prompt
        (``retrieval_ms`` covers all of it).

        Raises:
            ValueError, PromptTooLongError, RuntimeError: as :meth:`check`.
        """
        config = config or self.generation_config()
        question = self.check(question, config)
        t0 = time.perf_counter()
        sources = self.search(question, top_k, flt)
        prompt = build_prompt(self.engine.target.tokenizer, question, sources, self.prompt_budget(config), history,
                              self.style)
        grounding = self.ground(question, prompt.sources)
        return Prepared(question, prompt, config, (time.perf_counter() - t0) * 1000, grounding)

    def ground(self, question: str, sources: list[Source]) -> Grounding:
        """Whether ``sources`` (as shown) can answer ``question`` (:func:`copilot.grounding.assess`)."""
        if not sources:
            return Grounding(True)  # the no-context answer says so already
        docs = [self._document_text(s) for s in sources]
        highlights = [h for s in sources for h in s.highlights]
        return assess(question, docs, highlights, self.store.embedder, self.settings.min_support)

    def fixed_answer(self, prepared: Prepared) -> AnswerEvent | None:
        """The answer given without running the model, if any: the no-context answer (no
        sources: empty store or nothing matched) or, when the sources do not answer the question
        (``prepared.grounding``), the "not found" answer listing the closest entries
        (``token_ids`` are the answer's tokens, ``finish_reason`` ``stop``)."""
        fixed = None
        if not prepared.prompt.sources:
            fixed = NO_CONTEXT_ANSWER
        elif not prepared.grounding.answerable:
            titles = [" ".join(str(s.metadata.get("title") or s.doc_id).split()) for s in prepared.prompt.sources]
            fixed = not_found_answer(prepared.grounding, titles)
        if fixed is None:
            return None
        ids = self.engine.target.tokenizer(fixed, add_special_tokens=False)["input_ids"]
        stats = GenerationStats(prompt_tokens=len(prepared.prompt.input_ids), new_tokens=len(ids), finish_reason="stop")
        return AnswerEvent(fixed, GenerationResult(ids, fixed, "stop", stats))

    def stream(self, prepared: Prepared, cancel: Callable[[], bool] | None = None) -> Iterator[AnswerEvent]:
        """Decode a prepared question; the last event's ``result`` has the stats.

        Deltas and the result's text have their citations checked (:class:`AnswerFeed`). The
        fixed answers (:meth:`fixed_answer`) are given without running the model.
        """
        fixed = self.fixed_answer(prepared)
        if fixed is not None:
            yield fixed
            return
        feed = AnswerFeed(len(prepared.prompt.sources))
        for event in self.engine.stream(prepared.prompt.input_ids, prepared.config, prepared.prompt.context_ids,
                                        cancel):
            yield feed.convert(event)

    def answer(self, prepared: Prepared, cancel: Callable[[], bool] | None = None) -> Answer:
        """Decode to completion (see :meth:`stream`)."""
        assembler = AnswerAssembler(prepared)
        for event in self.stream(prepared, cancel):
            assembler.add(event)
        return assembler.answer()

    def ask(self, question: str, **kwargs) -> Answer:
        """Retrieve, prompt and decode in one call (keyword arguments as :meth:`prepare`)."""
        return self.answer(self.prepare(question, **kwargs))
