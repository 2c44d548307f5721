"""The copilot service: retrieval → prompt → speculative decoding → answer with citations."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

import torch

from copilot.access import FULL_ACCESS, Access
from copilot.answer_shape import addition
from copilot.citations import CitationFilter, cited_numbers
from copilot.config import Settings
from copilot.conversation import EarlierTurn, build_conversation_prompt
from copilot.followup import standalone_question
from copilot.grounding import DocumentText, Grounding, assess, entity_order, not_found_answer, question_entities
from copilot.prompting import (
    PROMPT_STYLES,
    BuiltPrompt,
    ChatTurn,
    PromptStyle,
    PromptTooLongError,
    bare_prompt_tokens,
    build_prompt,
    chat_prompt,
    completion_prompt,
    no_context_answer,
    style_name,
)
from copilot.question import Mode, Question
from copilot.quotes import Quote, Unverified, check_literals
from copilot.remote_target import RemoteEngine, remote_engine
from copilot.retrieval import HybridRetriever, Passage
from copilot.sources import Source, group_by_document, with_highlights
from decoding import GenerationConfig, SpeculativeEngine
from decoding.config import GenerationSettingError
from decoding.derived_draft import LEAN_DRAFT
from decoding.draft_plan import attach_when_ready, draft_model_plan, lean_draft_loader, load_draft
from decoding.engine import GenerationResult, StreamEvent
from decoding.lean_draft import LeanDraftLoader
from decoding.models import load_target
from decoding.stats import GenerationStats
from ingestion.documents import SearchFilter
from ingestion.store import ChunkStore, open_store

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """A question ready to decode: the checked question, its prompt and sources, and whether
    the sources can answer it."""

    question: Question
    prompt: BuiltPrompt
    retrieval_ms: float
    grounding: Grounding = field(default_factory=lambda: Grounding(True))

    @property
    def config(self) -> GenerationConfig:
        """The engine's settings for this question."""
        return self.question.config


@dataclass
class AnswerEvent:
    """One streamed piece of an answer: a checked text delta; the last event carries the
    engine's ``result`` (its ``text`` checked too) and the citations removed."""

    delta: str
    result: GenerationResult | None = None
    invalid_citations: list[int] = field(default_factory=list)
    added: str = ""
    model_not_found: bool = False


@dataclass
class Answer:
    """A finished answer: ``text`` cites ``sources`` as [n]; ``stats`` from the engine.

    Attributes:
        cited: source numbers cited in ``text`` (every one names a source).
        invalid_citations: numbers the model cited that name no source (removed from ``text``).
        added: what the service appended to the model's words, labelled in ``text`` as its own
            (:mod:`copilot.answer_shape`: an extract for a bare citation or an echoed header,
            the closest entries when the model said the sources do not answer); ``""`` for none.
        not_found: the sources do not answer: decided before generation (:mod:`copilot.grounding`)
            or said by the model itself.
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
    added: str = ""

    @property
    def model_text(self) -> str:
        """The answer as the model generated it (citations checked), without the service's addition."""
        return self.text[: len(self.text) - len(self.added)] if self.added else self.text


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
    added: str = ""
    model_not_found: bool = False

    def add(self, event: AnswerEvent) -> str:
        """Take one event; returns its text delta."""
        self.text += event.delta
        if event.result is not None:
            self.result = event.result
            self.invalid_citations = event.invalid_citations
            self.added, self.model_not_found = event.added, event.model_not_found
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
        stats["retrieval_ms"] = round(self.prepared.retrieval_ms, 2)
        stats["finish_reason"] = reason
        if not self.prepared.question.retrieves:  # the messages as sent: nothing to cite or check against
            return Answer(self.text, [], stats, reason)
        if not prompt.turn_sources:
            stats["no_context"] = True
        grounding = self.prepared.grounding
        checked = check_literals(self.text, prompt.sources, self.prepared.question.text)
        stats["invalid_citations"] = self.invalid_citations
        stats["grounding"] = grounding.to_dict()
        stats["literals"] = {"quoted": len(checked.quotes), "unverified": len(checked.unverified)}
        if self.added:
            stats["added"] = "closest_entries" if self.model_not_found else "extract"
        return Answer(self.text, prompt.sources, stats, reason, cited_numbers(self.text), self.invalid_citations,
                      checked.quotes, checked.unverified, not grounding.answerable or self.model_not_found,
                      self.added)


class AnswerFeed:
    """Turns one answer's engine events into answer events (:class:`AnswerEvent`) as they arrive, with the
    citations checked (:mod:`copilot.citations`): a ``[n]`` naming none of ``n_sources``
    sources is removed from the deltas and the result's text. Push-style, so a scheduler that
    steps many answers in one batch can feed each its own events."""

    def __init__(self, n_sources: int | None, sources: Sequence[Source] = ()) -> None:
        self.citations = CitationFilter(n_sources) if n_sources is not None else None
        self.sources = list(sources)  # the question's own: what an addition quotes or lists

    @classmethod
    def for_prepared(cls, prepared: Prepared) -> "AnswerFeed":
        """The feed for a prepared question: citations checked against its sources (``rag``),
        the text as generated otherwise."""
        if not prepared.question.retrieves:
            return cls(None)
        return cls(len(prepared.prompt.sources), prepared.prompt.turn_sources)

    def convert(self, event: StreamEvent) -> AnswerEvent:
        """The answer event for an engine event (the last one carries the result, and after the
        model's words the service's labelled addition, :func:`copilot.answer_shape.addition`)."""
        if self.citations is None:
            return AnswerEvent(event.delta, event.result)
        delta = self.citations.push(event.delta)
        if event.result is None:
            return AnswerEvent(delta)
        delta += self.citations.finish()
        event.result.text = self.citations.text
        added, model_not_found = addition(self.citations.text, self.sources)
        return AnswerEvent(delta + added, event.result, self.citations.invalid, added, model_not_found)


class CopilotService:
    """Owns the store, the retriever and the engine.

    Args:
        settings: the effective settings.
        store: an open chunk store.
        engine: the decoding engine, or an external model server (:mod:`copilot.remote_target`);
            ``None`` = retrieval only (asking raises).
    """

    def __init__(self, settings: Settings, store: ChunkStore, engine: SpeculativeEngine | RemoteEngine | None,
                 ) -> None:
        self.settings = settings
        self.store = store
        self.retriever = HybridRetriever(store)
        self.engine = engine
        target = getattr(engine, "target", None)
        self.style_name = style_name(settings.prompt_style, getattr(target, "model_type", None),
                                     getattr(target, "name", ""))
        self.style: PromptStyle = PROMPT_STYLES[self.style_name]
        #: Source documents per question when a request names none (resolved once).
        self.max_sources: int = settings.max_sources or self.style.max_sources
        if engine is not None and settings.max_model_len and settings.max_model_len > engine.target.max_positions:
            log.warning("max_model_len %d is over the target's context window (%d tokens): using %d",
                        settings.max_model_len, engine.target.max_positions, engine.target.max_positions)
        self.draft_loader: LeanDraftLoader | None = None
        self._draft_attach: threading.Thread | None = None
        if engine is None:
            self._draft_status = "no target model is loaded"
        elif isinstance(engine, RemoteEngine):
            self._draft_status = f"none here: the model server at {engine.target.url} decodes"
        elif getattr(engine, "draft", None) is not None:  # test doubles of the engine may have none
            self._draft_status = f"{engine.draft.name}: loaded"
        else:
            backend = getattr(getattr(engine, "target", None), "backend", "torch")  # test doubles may have none
            self._draft_status = draft_model_plan(settings.draft_model, settings.target_model, settings.device, backend)

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
        """Build and calibrate ``derived:int4`` (:func:`~decoding.draft_plan.lean_draft_loader`)
        and attach it to the engine with its measured step cost and agreement (the policy's
        prior for it). ``draft_model = "auto"`` on CPU: on a background thread while the
        engine serves with n-gram drafting, attached only when its calibration pays (else the
        reason is logged). ``draft_model = "derived:int4"``: here and now, attached whatever
        its calibration says (asked for explicitly)."""
        settings, engine = self.settings, self.engine
        if not isinstance(engine, SpeculativeEngine) or self.draft_loader is not None:
            return
        loader = lean_draft_loader(settings.draft_model, engine.target, target_model=settings.target_model,
                                   device=settings.device, cache_dir=settings.model_cache_dir)
        if loader is None:
            return
        self.draft_loader = loader.start()
        self._draft_attach = threading.Thread(target=attach_when_ready, args=(engine, loader, settings.draft_model),
                                              name="draft-attach", daemon=True)
        self._draft_attach.start()
        if settings.draft_model == LEAN_DRAFT:
            self.wait_for_draft()

    def stop_background(self, timeout_s: float = 60.0) -> None:
        """Cancel a background draft build and join its threads (seconds), before the process exits."""
        if self.draft_loader is not None:
            self.draft_loader.cancel(timeout_s)
        self.wait_for_draft(timeout_s)

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
        engine: SpeculativeEngine | RemoteEngine | None = None
        if load_models and settings.target_url:
            engine = remote_engine(settings)
        elif load_models:
            target = load_target(settings.target_model, backend=settings.backend, device=settings.device,
                                 dtype=settings.dtype, cache_dir=settings.model_cache_dir,
                                 n_seq_max=settings.max_batch + max(settings.prefix_cache, 2),
                                 max_model_len=settings.max_model_len)
            draft = load_draft(settings.draft_model, target, target_model=settings.target_model, device=settings.device,
                               dtype=settings.dtype, cache_dir=settings.model_cache_dir)
            engine = SpeculativeEngine(target, draft, max_ngram=settings.max_ngram,
                                       min_ngram=settings.min_ngram, answer_history=settings.answer_history,
                                       max_speculative_tokens=settings.num_speculative_tokens,
                                       prefix_cache_entries=settings.prefix_cache)
        service = cls(settings, store, engine)
        if auto_draft:
            service.start_auto_draft()
        return service

    @property
    def model_name(self) -> str:
        """The target model's id or path as configured."""
        return self.settings.target_model

    @property
    def context_length(self) -> int | None:
        """The context window in tokens: the target's, capped by ``max_model_len`` (None without a model)."""
        if self.engine is None:
            return None
        return min(self.engine.target.max_positions, self.settings.max_model_len or self.engine.target.max_positions)

    @property
    def fingerprint(self) -> str:
        """OpenAI's ``system_fingerprint``: ``fp_`` and 12 hex digits of a hash of what decides
        an answer besides the request — the target and embedding models, dtype, device, prompt
        style and the retrieval and answer settings. It changes when any of them does."""
        s = self.settings
        backend = getattr(getattr(self.engine, "target", None), "backend", s.backend)
        parts = (s.target_model, backend, s.dtype, s.device, s.embedding_model or "default", self.style_name,
                 self.max_sources, s.max_prompt_tokens, s.min_support, s.loop_stop, s.loop_span)
        return "fp_" + hashlib.sha256(repr(parts).encode()).hexdigest()[:12]

    def count_tokens(self, text: str) -> int:
        """Number of target-tokenizer tokens in ``text`` (no special tokens; 0 without a model)."""
        if not text or self.engine is None:
            return 0
        return len(self.engine.target.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generation_config(self, max_new_tokens: int | None = None, **overrides) -> GenerationConfig:
        """Defaults from the settings, ``overrides`` (:class:`GenerationConfig` fields) on top.

        Args:
            max_new_tokens: the answer budget in tokens (default: the ``max_new_tokens`` setting).
        Raises:
            decoding.config.GenerationSettingError: ``max_new_tokens`` above ``max_new_tokens_cap``,
                or a setting out of range (``field`` names it; a ValueError).
        """
        n = self.settings.max_new_tokens if max_new_tokens is None else max_new_tokens
        if n > self.settings.max_new_tokens_cap:
            raise GenerationSettingError("max_new_tokens", f"{n} exceeds the configured cap "
                                         f"{self.settings.max_new_tokens_cap}")
        overrides.setdefault("drafting", self.settings.drafting)
        overrides.setdefault("num_speculative_tokens", self.settings.num_speculative_tokens)
        overrides.setdefault("loop_span", self.settings.loop_span if self.settings.loop_stop else 0)
        return GenerationConfig(max_new_tokens=n, **overrides)

    def warm_up(self) -> None:
        """Load the embedding model and touch both indexes now, not on the first request (seconds)."""
        self.retriever.retrieve("warm-up", 1)

    def prompt_budget(self, config: GenerationConfig) -> int:
        """Prompt tokens allowed: ``max_prompt_tokens``, capped by the context window
        (:attr:`context_length`) minus the answer budget."""
        return min(self.settings.max_prompt_tokens, self.context_length - config.max_new_tokens)

    def question(self, text: str, *, mode: Mode = "rag", max_sources: int | None = None,
                 flt: SearchFilter | None = None, history: Sequence[ChatTurn] = (), instructions: str = "",
                 max_new_tokens: int | None = None, access: Access = FULL_ACCESS, **generation) -> Question:
        """Check a request and resolve its defaults, once (no retrieval yet).

        Args:
            text: the question; for ``mode="completion"`` the whole prompt. A ``rag`` follow-up
                ("and on dcpool-19?") is resolved against ``history`` into a question that
                stands alone (:func:`copilot.followup.standalone_question`).
            access: what the caller may read (retrieval and the answer-history partition).
            max_sources: source documents to show (default: the ``max_sources`` setting, else
                the prompt style's).
            max_new_tokens, generation: as :meth:`generation_config`.
        Raises:
            ValueError: empty text or longer than ``max_question_chars``.
            decoding.config.GenerationSettingError: a generation setting out of range, a token id
                outside the target's vocabulary, or a checkpoint setting the engine cannot apply
                exactly (``field`` names it).
            PromptTooLongError: the instructions and the question alone exceed the prompt budget.
            RuntimeError: no model is loaded.
        """
        if self.engine is None:
            raise RuntimeError("no target model is loaded")
        text = self._clean(text, mode)
        if mode == "rag" and history:
            standalone = standalone_question(text, history)
            if standalone != text:
                log.info("follow-up %r searched as %r", text[:200], standalone[:200])
                text = standalone
        config = self.generation_config(max_new_tokens, history_partition=access.partition, **generation)
        # the RAG prompt has its own budget; a prompt the client wrote may fill the context window
        budget = self.prompt_budget(config) if mode == "rag" else self.context_length - config.max_new_tokens
        question = Question(text, config, max_sources or self.max_sources, mode, flt, tuple(history),
                            instructions.strip(), budget, self.engine.resolve(config), access)
        tokenizer = self.engine.target.tokenizer
        if mode == "rag":
            needed = bare_prompt_tokens(tokenizer, text, self.style, question.instructions)
            if needed > question.prompt_budget:
                raise PromptTooLongError(f"the question needs {needed} prompt tokens; the budget is "
                                         f"{question.prompt_budget}")
        else:
            self._unretrieved_prompt(question)  # raises PromptTooLongError
        return question

    def _clean(self, text: str, mode: Mode = "rag") -> str:
        """The text (stripped, but a completion prompt as sent); ValueError when empty or, for a
        ``rag`` question, over ``max_question_chars`` (other prompts are bounded by tokens)."""
        question = text if mode == "completion" else text.strip()
        if not question.strip():
            raise ValueError("the question is empty" if mode == "rag" else "the prompt is empty")
        if mode == "rag" and len(question) > self.settings.max_question_chars:
            raise ValueError(f"the question has {len(question)} characters; the limit is "
                             f"{self.settings.max_question_chars}")
        return question

    def _unretrieved_prompt(self, question: Question) -> BuiltPrompt:
        """The prompt of a ``chat`` or ``completion`` question (no sources)."""
        tokenizer = self.engine.target.tokenizer
        if question.mode == "completion":
            return completion_prompt(tokenizer, question.text, question.prompt_budget)
        return chat_prompt(tokenizer, question.text, question.prompt_budget, list(question.history),
                           question.instructions)

    def search(self, question: str, max_sources: int | None = None, flt: SearchFilter | None = None,
               access: Access = FULL_ACCESS) -> list[Source]:
        """The ``max_sources`` best documents for ``question`` that ``access`` may read and ``flt``
        passes (filtered in the stores), with their evidence lines (no model call).

        Documents holding every entity the question names (host, ticket, error code, day:
        :mod:`copilot.grounding`) come before near-duplicates that lack one; with ``max_sources`` >= 2
        the best ELOG entry brings its parent or first reply along when that is not among them
        (it takes the last place).

        Raises:
            ValueError: empty question or one longer than ``max_question_chars``.
        """
        question = self._clean(question)
        n = max_sources or self.max_sources
        # documents have several chunks: fetch passages for 4 chunks per source, keep 3x the
        # documents as candidates for the entity check to reorder, then take n of them
        passages = self.retriever.retrieve(question, max(self.retriever.candidates, 4 * n), access.restrict(flt))
        candidates = group_by_document(passages, max(3 * n, n + 6))
        entities = question_entities(question)
        if entities:
            docs = [self._document_text(c) for c in candidates]
            candidates = [candidates[i] for i in entity_order(docs, entities)]
        chosen = candidates[:n]
        linked = self._linked(chosen, flt, access) if n >= 2 else []
        chosen = chosen[:n - len(linked)] + linked
        chosen = [replace(c, n=i + 1) for i, c in enumerate(chosen)]
        return with_highlights(question, chosen, self.store.embedder)

    def _document_text(self, source: Source) -> DocumentText:
        """A candidate document's whole text and dates, for the entity check."""
        chunks = self.store.get_document_chunks(source.doc_id) or [p.chunk for p in source.passages]
        created = source.metadata.get("created")
        return DocumentText(source.doc_id, "\n".join(c.text for c in chunks), (str(created),) if created else ())

    def _linked(self, chosen: list[Source], flt: SearchFilter | None, access: Access) -> list[Source]:
        """The ELOG parent (or first reply) of the best source as a source, when not already
        chosen, no filter is set and ``access`` may read it (at most one; numbered later)."""
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
                if chunks and access.allows(chunks[0].metadata):
                    return [Source(len(chosen) + 1, tuple(Passage(0, c, 0.0) for c in chunks[:2]))]
        return []

    def prepare(self, question: Question) -> Prepared:
        """Retrieve, group into sources, pick evidence lines and build the prompt
        (``retrieval_ms`` covers all of it); ``chat`` and ``completion`` questions only build
        their prompt.

        Raises:
            PromptTooLongError: no source fits next to the question.
        """
        t0 = time.perf_counter()
        if not question.retrieves:
            return Prepared(question, self._unretrieved_prompt(question), (time.perf_counter() - t0) * 1000)
        sources = self.search(question.text, question.max_sources, question.flt, question.access)
        tokenizer = self.engine.target.tokenizer
        turns = self._earlier_turns(question) if sources else []
        prompt = build_conversation_prompt(tokenizer, question.text, sources, question.prompt_budget, turns,
                                           self.style, question.instructions) if turns else None
        if prompt is None:
            prompt = build_prompt(tokenizer, question.text, sources, question.prompt_budget,
                                  list(question.history), self.style, question.instructions)
        grounding = self.ground(question.text, prompt.turn_sources)
        return Prepared(question, prompt, (time.perf_counter() - t0) * 1000, grounding)

    def _earlier_turns(self, question: Question) -> list[EarlierTurn]:
        """The last ``conversation_turns`` questions of ``question.history`` that have an answer,
        oldest first, each rewritten and searched again as it was asked (the same rewrite,
        ``max_sources``, filters and access as this question: :mod:`copilot.conversation`);
        ``[]`` when the setting is 0 or an earlier question is no longer valid."""
        history, limit = question.history, self.settings.conversation_turns
        asked = [i for i in range(len(history) - 1)
                 if history[i].role == "user" and history[i + 1].role == "assistant"][-limit:] if limit else []
        turns = []
        for i in asked:
            try:
                text = standalone_question(self._clean(history[i].content), history[:i])
            except ValueError:
                return []
            sources = self.search(text, question.max_sources, question.flt, question.access)
            turns.append(EarlierTurn(text, tuple(sources), history[i + 1].content))
        return turns

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
        if not prepared.question.retrieves:
            return None
        if not prepared.prompt.turn_sources:
            question = prepared.question
            filtered = question.flt is not None and question.flt != SearchFilter()
            fixed = no_context_answer(self.store.count_documents() == 0, filtered, not question.access.reads_all)
        elif not prepared.grounding.answerable:
            titles = [" ".join(str(s.metadata.get("title") or s.doc_id).split()) for s in prepared.prompt.turn_sources]
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
        feed = AnswerFeed.for_prepared(prepared)
        for event in self.engine.stream(prepared.prompt.input_ids, prepared.config, prepared.prompt.context_ids,
                                        cancel, prepared.question.logits):
            yield feed.convert(event)

    def answer(self, prepared: Prepared, cancel: Callable[[], bool] | None = None) -> Answer:
        """Decode to completion (see :meth:`stream`)."""
        assembler = AnswerAssembler(prepared)
        for event in self.stream(prepared, cancel):
            assembler.add(event)
        return assembler.answer()

    def ask(self, text: str, **kwargs) -> Answer:
        """Check, retrieve, prompt and decode in one call (keyword arguments as :meth:`question`)."""
        return self.answer(self.prepare(self.question(text, **kwargs)))
