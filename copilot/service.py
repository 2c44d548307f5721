"""The copilot service: retrieval → prompt → speculative decoding → answer with citations."""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterator, TypeVar

import torch

from copilot.access import FULL_ACCESS, Access
from copilot.answer.conversation import EarlierTurn, build_conversation_prompt
from copilot.answer.events import AnswerEvent, AnswerFeed, Prepared
from copilot.answer.followup import standalone_question
from copilot.answer.grounding import Grounding, assess, not_found_answer
from copilot.answer.prompting import (
    PROMPT_STYLES,
    BuiltPrompt,
    PromptStyle,
    PromptTooLongError,
    bare_prompt_tokens,
    build_prompt,
    chat_prompt,
    completion_prompt,
    no_context_answer,
    style_name,
)
from copilot.answer.question import GenerationParams, Mode, Question, QuestionRequest
from copilot.config import Settings
from copilot.model_host import ModelHost, load_engine
from copilot.search.searcher import Searcher
from copilot.search.sources import Source
from copilot.serving.remote_target import RemoteEngine
from decoding import Budget, DraftingMode, GenerationConfig, Sampling, Speculation, SpeculativeEngine
from decoding.config import DEFAULT_CONFIG, GenerationSettingError, SpeculationMode
from decoding.engine import GenerationResult
from decoding.stats import GenerationStats
from ingestion.documents import SearchFilter
from ingestion.stores.chunk_store import ChunkStore, open_store

log = logging.getLogger(__name__)
T = TypeVar("T")


def _given(value: T | None, default: T) -> T:
    """``value``, or ``default`` when it is unset (``None``)."""
    return default if value is None else value


class CopilotService:
    """Owns the store, the retriever and the model host.

    Args:
        settings: the effective settings.
        store: an open chunk store.
        engine: the decoding engine, or an external model server (:mod:`copilot.serving.remote_target`);
            ``None`` = retrieval only (asking raises). The service's :attr:`models`
            (:class:`~copilot.model_host.ModelHost`) holds it.
    """

    def __init__(self, settings: Settings, store: ChunkStore, engine: SpeculativeEngine | RemoteEngine | None,
                 ) -> None:
        self.settings = settings
        self.store = store
        self.searcher = Searcher(store)
        self.models = ModelHost(settings, engine)
        target = engine.target if engine is not None else None
        self.style_name = style_name(settings.prompt_style, target.model_type if target else None,
                                     target.name if target else "")
        self.style: PromptStyle = PROMPT_STYLES[self.style_name]
        #: Source documents per question when a request names none (resolved once).
        self.max_sources: int = settings.max_sources or self.style.max_sources

    @property
    def fingerprint(self) -> str:
        """OpenAI's ``system_fingerprint`` of this service's answers
        (:meth:`~copilot.model_host.ModelHost.fingerprint` of its prompt style and sources per question)."""
        return self.models.fingerprint(self.style_name, self.max_sources)

    @classmethod
    def from_settings(cls, settings: Settings, *, load_models: bool = True,
                      auto_draft: bool = True) -> "CopilotService":
        """Open the store and load the target (and draft) model as configured
        (:func:`copilot.model_host.load_engine`); with ``draft_model = "auto"`` (and
        ``auto_draft``) start the background draft build."""
        if settings.torch_threads:
            torch.set_num_threads(settings.torch_threads)
        store = open_store(settings)
        service = cls(settings, store, load_engine(settings) if load_models else None)
        if auto_draft:
            service.models.start_auto_draft()
        return service

    def generation_config(self, params: GenerationParams, history_partition: str = "") -> GenerationConfig:
        """The engine's settings for a request's knobs: the one place their defaults are applied.

        An unset knob takes the server's setting (``max_new_tokens``, ``num_speculative_tokens``,
        ``loop_span`` when ``loop_stop`` is on, else 0; the drafters from ``drafting``, but
        speculation ``fixed`` drafts with the n-gram drafter), else the engine's default.

        Args:
            history_partition: the answer-history partition (the caller's access scope).
        Raises:
            decoding.config.GenerationSettingError: ``max_new_tokens`` above ``max_new_tokens_cap``,
                or a setting out of range (``field`` names it; a ValueError).
        """
        s, default = self.settings, DEFAULT_CONFIG
        max_new_tokens = _given(params.max_new_tokens, s.max_new_tokens)
        if max_new_tokens > s.max_new_tokens_cap:
            raise GenerationSettingError("max_new_tokens", f"{max_new_tokens} exceeds the configured cap "
                                         f"{s.max_new_tokens_cap}")
        sampling = Sampling(
            temperature=_given(params.temperature, default.sampling.temperature),
            top_k=_given(params.top_k, default.sampling.top_k), top_p=_given(params.top_p, default.sampling.top_p),
            seed=params.seed, repetition_penalty=params.repetition_penalty,
            no_repeat_ngram_size=params.no_repeat_ngram_size, min_new_tokens=params.min_new_tokens,
            bad_words_ids=params.bad_words_ids, suppress_tokens=params.suppress_tokens,
            logit_bias=params.logit_bias,  # type: ignore[arg-type]  # a mapping is normalized to pairs
            frequency_penalty=_given(params.frequency_penalty, default.sampling.frequency_penalty),
            presence_penalty=_given(params.presence_penalty, default.sampling.presence_penalty))
        budget = Budget(max_new_tokens=max_new_tokens, stop_strings=params.stop_strings,
                        loop_span=_given(params.loop_span, s.loop_span if s.loop_stop else 0))
        mode = _given(params.speculation, default.speculation.mode)
        drafting = DraftingMode.NGRAM if mode == SpeculationMode.FIXED else s.drafting
        speculation = Speculation(mode=mode, drafting=drafting,
                                  num_speculative_tokens=_given(params.num_speculative_tokens,
                                                                s.num_speculative_tokens),
                                  history_partition=history_partition)
        return GenerationConfig(sampling=sampling, budget=budget, speculation=speculation)

    def warm_up(self) -> None:
        """Load the embedding model and touch both indexes now, not on the first request (seconds)."""
        self.searcher.retriever.retrieve("warm-up", 1)

    def prompt_budget(self, config: GenerationConfig) -> int:
        """Prompt tokens allowed: ``max_prompt_tokens``, capped by the context window
        (:attr:`context_length`) minus the answer budget."""
        context_length = self.models.loaded().target.max_positions
        return min(self.settings.max_prompt_tokens, context_length - config.budget.max_new_tokens)

    def question(self, request: QuestionRequest) -> Question:
        """Check a request and resolve its defaults, once (no retrieval yet).

        A ``rag`` follow-up ("and on dcpool-19?") is resolved against ``request.history`` into a
        question that stands alone (:func:`copilot.search.followup.standalone_question`);
        ``max_sources`` defaults to the ``max_sources`` setting, else the prompt style's; the
        generation knobs' defaults are :meth:`generation_config`'s.

        Raises:
            ValueError: empty text or longer than ``max_question_chars``.
            decoding.config.GenerationSettingError: a generation setting out of range, a token id
                outside the target's vocabulary, or a checkpoint setting the engine cannot apply
                exactly (``field`` names it).
            PromptTooLongError: the instructions and the question alone exceed the prompt budget.
            RuntimeError: no model is loaded.
        """
        engine = self.models.loaded()
        mode, history, access = request.mode, request.history, request.access
        text = self._clean(request.text, mode)
        if mode == "rag" and history:
            standalone = standalone_question(text, history)
            if standalone != text:
                log.info("follow-up %r searched as %r", text[:200], standalone[:200])
                text = standalone
        config = self.generation_config(request.generation, access.partition)
        # the RAG prompt has its own budget; a prompt the client wrote may fill the context window
        budget = self.prompt_budget(config) if mode == "rag" else \
            engine.target.max_positions - config.budget.max_new_tokens
        question = Question(text, config, request.max_sources or self.max_sources, mode, request.flt, tuple(history),
                            request.instructions.strip(), budget, engine.resolve(config), access, request.problem)
        tokenizer = engine.target.tokenizer
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
        tokenizer = self.models.loaded().target.tokenizer
        if question.mode == "completion":
            return completion_prompt(tokenizer, question.text, question.prompt_budget)
        return chat_prompt(tokenizer, question.text, question.prompt_budget, list(question.history),
                           question.instructions)

    def search(self, question: str, max_sources: int | None = None, flt: SearchFilter | None = None,
               access: Access = FULL_ACCESS) -> list[Source]:
        """The ``max_sources`` best documents for ``question`` that ``access`` may read and ``flt``
        passes (filtered in the stores), with their evidence lines (no model call).

        See :meth:`copilot.search.searcher.Searcher.search` (entity order, linked ELOG entries).

        Raises:
            ValueError: empty question or one longer than ``max_question_chars``.
        """
        return self.searcher.search(self._clean(question), max_sources or self.max_sources, flt, access)

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
        # question.text was checked as typed; a follow-up rewritten with an earlier turn may be longer
        sources = self.searcher.search(question.text, question.max_sources, question.flt, question.access)
        tokenizer = self.models.loaded().target.tokenizer
        turns = self._earlier_turns(question) if sources else []
        prompt = build_conversation_prompt(tokenizer, question.text, sources, question.prompt_budget, turns,
                                           self.style, question.instructions) if turns else None
        if prompt is None:
            prompt = build_prompt(tokenizer, question.text, sources, question.prompt_budget,
                                  list(question.history), self.style, question.instructions)
        grounding = self._ground(question.text, prompt.turn_sources, question.problem)
        return Prepared(question, prompt, (time.perf_counter() - t0) * 1000, grounding)

    def _earlier_turns(self, question: Question) -> list[EarlierTurn]:
        """The last ``conversation_turns`` questions of ``question.history`` that have an answer,
        oldest first, each rewritten and searched again as it was asked (the same rewrite,
        ``max_sources``, filters and access as this question: :mod:`copilot.answer.conversation`);
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
            sources = self.searcher.search(text, question.max_sources, question.flt, question.access)
            turns.append(EarlierTurn(text, tuple(sources), history[i + 1].content))
        return turns

    def _ground(self, question: str, sources: list[Source], problem: tuple[str, ...] = ()) -> Grounding:
        """Whether ``sources`` (as shown) can answer ``question`` (:func:`copilot.answer.grounding.assess`;
        ``problem``: the words an earlier occurrence must name)."""
        if not sources:
            return Grounding(True)  # the no-context answer says so already
        docs = [self.searcher.document_text(s) for s in sources]
        highlights = [h for s in sources for h in s.highlights]
        return assess(question, docs, highlights, self.store.embedder, self.settings.min_support, problem)

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
            fixed = no_context_answer(self.store.manifest.count() == 0, filtered, not question.access.reads_all)
        elif not prepared.grounding.answerable:
            titles = [" ".join(str(s.metadata.get("title") or s.doc_id).split()) for s in prepared.prompt.turn_sources]
            fixed = not_found_answer(prepared.grounding, titles)
        if fixed is None:
            return None
        ids = self.models.loaded().target.tokenizer(fixed, add_special_tokens=False)["input_ids"]
        stats = GenerationStats(prompt_tokens=len(prepared.prompt.input_ids), new_tokens=len(ids), finish_reason="stop")
        return AnswerEvent(fixed, GenerationResult(ids, fixed, "stop", stats))

    def stream(self, prepared: Prepared, cancel: Callable[[], bool] | None = None) -> Iterator[AnswerEvent]:
        """Decode a prepared question; the last event's ``result`` has the stats.

        Deltas and the result's text have their citations checked
        (:class:`~copilot.answer.events.AnswerFeed`). The fixed answers (:meth:`fixed_answer`) are
        given without running the model.
        """
        fixed = self.fixed_answer(prepared)
        if fixed is not None:
            yield fixed
            return
        feed = AnswerFeed.for_prepared(prepared)
        engine = self.models.loaded()
        for event in engine.stream(prepared.prompt.input_ids, prepared.config, prepared.prompt.context_ids, cancel,
                                   prepared.question.logits):
            yield feed.convert(event)
