"""Running a question on the batch scheduler from async request handlers.

Shared by ``/v1/ask`` and the OpenAI routes. A route checks its request once with
:func:`question` (400 naming the parameter, 413 over the prompt budget); :func:`start`
queues one :class:`QuestionJob` (full queue → 503 with Retry-After). When the scheduler admits it, the
job retrieves and builds the prompt on the scheduler's thread — not beside it: on a
CPU-only host both are compute-bound, and running the query embedding while another
request decodes slows both (measured on 2 cores: retrieval 20 → 135 ms) — then joins the
decoding batch. :meth:`GenerationRun.prepared` waits for the prompt (sources known; a late
413 from prompt building surfaces here), and :meth:`GenerationRun.deltas` streams the
text, cancelling the job when the client disconnects or the consumer stops.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Mapping

from fastapi import HTTPException, Request, status

from copilot.api.errors import ParameterError
from copilot.api.metrics import Metrics
from copilot.api.scheduler import DONE, BatchLike, BatchScheduler, Job, QueueFullError
from copilot.destructive import find_destructive
from copilot.prompting import PromptTooLongError
from copilot.question import Question
from copilot.service import AnswerAssembler, AnswerFeed, CopilotService, Prepared
from decoding.config import GenerationSettingError

log = logging.getLogger(__name__)

#: Seconds between client-disconnect checks while waiting for the scheduler.
POLL_S = 0.25


class GenerationFailedError(RuntimeError):
    """The engine raised while generating (reported as HTTP 500 or an SSE ``error`` event)."""


@dataclass
class _PromptReady:
    prepared: Prepared


@dataclass
class _PromptRejected:
    exc: Exception


def _as_http(exc: Exception, params: Mapping[str, str] | None = None) -> HTTPException:
    """Map :meth:`CopilotService.question` / :meth:`~CopilotService.prepare` errors to 413 / 400 / 503.

    Args:
        params: the client's names, for ``error.param``: of a :class:`GenerationConfig` field
            when it differs (``{"max_new_tokens": "max_tokens"}``), and under ``"prompt"`` of
            the parameter holding the text (``messages``, ``prompt``, ``input``). With a
            ``"prompt"`` name (the OpenAI routes) a prompt over the budget is a 400
            ``context_length_exceeded`` naming it, as OpenAI answers; without (``/v1/ask``) a 413.
    """
    params = params or {}
    prompt = params.get("prompt", "question")
    if isinstance(exc, PromptTooLongError):
        code = status.HTTP_400_BAD_REQUEST if "prompt" in params else status.HTTP_413_CONTENT_TOO_LARGE
        return ParameterError(code, str(exc), prompt, "context_length_exceeded")
    if isinstance(exc, GenerationSettingError):
        param = params.get(exc.field, exc.field)
        return ParameterError(status.HTTP_400_BAD_REQUEST, str(exc).replace(exc.field, param, 1), param,
                              "invalid_value")
    if isinstance(exc, ValueError):  # an empty or over-long question
        return ParameterError(status.HTTP_400_BAD_REQUEST, str(exc), prompt, "invalid_value")
    return ParameterError(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc), None, "model_not_loaded")


def question(service: CopilotService, text: str, params: Mapping[str, str] | None = None, **kwargs: Any) -> Question:
    """:meth:`CopilotService.question` with its errors as HTTP errors.

    Args:
        params: the client's parameter names (see :func:`_as_http`).
    Raises:
        HTTPException: 400 naming the parameter, 413 over the prompt budget (a 400 on the
            OpenAI routes), 503 no model.
    """
    try:
        return service.question(text, **kwargs)
    except (ValueError, RuntimeError) as exc:
        raise _as_http(exc, params) from exc


@dataclass
class Outcome:
    """A finished (or stopped) generation as the handlers report it.

    Attributes:
        text: the answer text.
        finish_reason: ``eos | stop | length | repetition | cancelled`` from the engine; ``stop`` for the
            fixed no-context answer.
        stats: engine statistics plus ``retrieval_ms`` (retrieval and prompt building),
            ``queue_ms`` (wait for admission to the batch) and ``finish_reason``; ``no_context: true``
            when nothing was retrieved.
        prompt_tokens / completion_tokens: token counts for OpenAI-style ``usage``.
        cited: source numbers the answer cites (each names a source; invalid ones were
            removed and are listed in ``stats["invalid_citations"]``).
        quotes / unverified: the answer's literals found in a shown source / in none
            (:mod:`copilot.quotes`, as dicts).
        not_found: the sources do not answer the question (:mod:`copilot.grounding`).
    """

    text: str
    finish_reason: str
    stats: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cited: list[int] = field(default_factory=list)
    quotes: list[dict[str, Any]] = field(default_factory=list)
    unverified: list[dict[str, Any]] = field(default_factory=list)
    not_found: bool = False

    def trust(self) -> dict[str, Any]:
        """``quotes``, ``unverified``, ``not_found`` and ``destructive`` (the answer's destructive
        commands, :mod:`copilot.destructive`) as the responses carry them."""
        return {"quotes": self.quotes, "unverified": self.unverified, "not_found": self.not_found,
                "destructive": [m.to_dict() for m in find_destructive(self.text)]}


class GenerationRun:
    """One queued question, consumed by an async request handler."""

    def __init__(self, job: Job, service: CopilotService, metrics: Metrics, endpoint: str, started: float,
                 params: Mapping[str, str] | None = None) -> None:
        self.job = job
        self.service = service
        self.metrics = metrics
        self.endpoint = endpoint
        self.started = started
        self.params = params
        self.assembler: AnswerAssembler | None = None  # from prepared() on
        self.disconnected = False
        self._last_check = time.monotonic()

    async def _next(self, request: Request, check_disconnect: bool) -> Any:
        """The job's next event; None when the client disconnected (the job is then cancelled).

        Raises:
            GenerationFailedError: the job raised.
        """
        while True:
            try:
                event = await self.job.next_event(POLL_S)
            except TimeoutError:
                event = None
            except Exception as exc:
                raise GenerationFailedError(f"generation failed: {type(exc).__name__}: {exc}") from exc
            if check_disconnect and (event is None or time.monotonic() - self._last_check >= POLL_S):
                self._last_check = time.monotonic()
                if await request.is_disconnected():
                    log.info("client disconnected: cancelling its generation")
                    self.disconnected = True
                    self.job.cancel()
                    return None
            if event is not None:
                return event

    async def prepared(self, request: Request) -> Prepared:
        """Wait (through the queue) until the scheduler has retrieved and built the prompt.

        Raises:
            HTTPException: 413 when prompt building refused the question, 503 without a
                model, 500 when the job failed, 499 when the client left while waiting.
        """
        try:
            event = await self._next(request, check_disconnect=True)
        except GenerationFailedError as exc:
            raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, str(exc)) from exc
        if event is None or event is DONE:
            self.job.cancel()
            raise HTTPException(499, "client closed the request")
        if isinstance(event, _PromptRejected):
            raise _as_http(event.exc, self.params)
        assert isinstance(event, _PromptReady), event
        self.assembler = AnswerAssembler(event.prepared)
        return event.prepared

    async def deltas(self, request: Request, check_disconnect: bool = True) -> AsyncIterator[str]:
        """Yield the answer's text deltas as the engine commits them (after :meth:`prepared`).

        Args:
            request: the request (polled for a client disconnect).
            check_disconnect: poll ``request.is_disconnected()`` every :data:`POLL_S` seconds
                (off for SSE, where sse-starlette watches the connection itself).
        Raises:
            GenerationFailedError: the engine failed.
        The job is cancelled when the client disconnects or the consumer stops iterating.
        """
        first = True
        try:
            while True:
                event = await self._next(request, check_disconnect)
                if event is None or event is DONE:
                    return
                if self.assembler.add(event):
                    if first:
                        self.metrics.ttft.labels(self.endpoint).observe(time.perf_counter() - self.started)
                        first = False
                    yield event.delta
        finally:
            self.job.cancel()  # no-op after completion; stops the generation if we were interrupted

    async def complete(self, request: Request) -> Outcome:
        """Consume the whole answer (non-streaming handlers).

        Raises:
            HTTPException: 500 when the engine failed.
        """
        try:
            async for _ in self.deltas(request):
                pass
        except GenerationFailedError as exc:
            raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, str(exc)) from exc
        return self.outcome()

    def outcome(self) -> Outcome:
        """The text so far with its statistics (call after :meth:`deltas` ended)."""
        assembler = self.assembler
        assert assembler is not None, "call prepared() first"
        answer = assembler.answer("cancelled" if self.disconnected else "stop")
        if self.job.queue_ms is not None:
            answer.stats["queue_ms"] = round(self.job.queue_ms, 2)
        result = assembler.result
        completion = len(result.token_ids) if result is not None else self.service.count_tokens(answer.text)
        return Outcome(answer.text, answer.finish_reason, answer.stats, len(assembler.prepared.prompt.input_ids),
                       completion, answer.cited, [q.to_dict() for q in answer.quotes],
                       [u.to_dict() for u in answer.unverified], answer.not_found)


class QuestionJob(Job):
    """One question on the scheduler: retrieval and prompt building when admitted, then its
    decoding in the batch; the fixed answers (:meth:`CopilotService.fixed_answer`) and
    refused prompts end it without decoding."""

    def __init__(self, service: CopilotService, metrics: Metrics, question: Question,
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.service, self.metrics, self.question = service, metrics, question
        self.prepared: Prepared | None = None
        self.feed: AnswerFeed | None = None
        self.assembler: AnswerAssembler | None = None

    def admit(self, batch: BatchLike) -> Any | None:
        """Retrieve and build the prompt, then join ``batch`` (see :class:`~copilot.api.scheduler.Job`)."""
        self.metrics.queue_wait.observe(time.perf_counter() - self.submitted_at)
        try:
            prepared = self.service.prepare(self.question)
        except (ValueError, RuntimeError) as exc:  # PromptTooLongError is a ValueError
            self.emit(_PromptRejected(exc))
            self.emit(DONE)
            return None
        self.prepared, self.assembler = prepared, AnswerAssembler(prepared)
        self.emit(_PromptReady(prepared))
        fixed = self.service.fixed_answer(prepared)
        if fixed is not None:
            self._forward(fixed)
            self.emit(DONE)
            return None
        self.feed = AnswerFeed.for_prepared(prepared)
        handle, events = batch.add(prepared.prompt.input_ids, prepared.config, prepared.prompt.context_ids,
                                   self.cancel_event.is_set, self.question.logits)
        for event in events:
            self.deliver(event)
        if events and events[-1].result is not None:  # ended at its first token
            self.emit(DONE)
            return None
        return handle

    def dropped(self) -> None:
        self.metrics.observe_generation("cancelled")

    def failed(self, exc: BaseException) -> None:
        self.metrics.observe_generation("error")

    def deliver(self, event: Any) -> None:
        """Forward one engine event with its citations checked; book the metrics at the end."""
        self._forward(self.feed.convert(event))

    def _forward(self, answer_event: Any) -> None:
        self.emit(answer_event)
        self.assembler.add(answer_event)
        result = answer_event.result
        if result is None:
            return
        if result.finish_reason == "cancelled":
            self.metrics.observe_generation("cancelled")
        elif self.question.retrieves and not self.prepared.prompt.turn_sources:
            self.metrics.observe_generation("no_context")
        else:
            self.metrics.observe_generation(result.finish_reason, result.stats.to_dict())


def reservation_key(request: Request, endpoint: str, question: Question) -> str:
    """Who asked what, for a reservation (:mod:`copilot.api.reservations`): the caller (its
    ``Authorization`` header, else its address) and the checked question at ``endpoint`` —
    the same request resent has the same key. A SHA-256 hex digest (the key is never kept)."""
    caller = request.headers.get("authorization") or (request.client.host if request.client else "")
    return hashlib.sha256(f"{caller}\0{endpoint}\0{question!r}".encode()).hexdigest()


def start(request: Request, service: CopilotService, scheduler: BatchScheduler, metrics: Metrics,
          question: Question, *, endpoint: str, started: float | None = None,
          params: Mapping[str, str] | None = None) -> GenerationRun:
    """Queue ``question``'s retrieval and decoding on the scheduler.

    Args:
        request: the request being answered.
        question: checked by :func:`question`.
        endpoint: metric label (``ask``, ``chat``, ``completions`` or ``responses``).
        started: ``time.perf_counter()`` when the request arrived (for TTFT; default now).
        params: the client's parameter names, for errors found later (see :func:`question`).
    Raises:
        HTTPException: 503 when the queue is full (with ``Retry-After``; the same request resent
            takes the place reserved for it).
    """
    submitted = time.perf_counter()
    job = QuestionJob(service, metrics, question, asyncio.get_running_loop())
    try:
        scheduler.submit(job, reservation_key(request, endpoint, question))
    except QueueFullError as exc:
        metrics.queue_rejections.inc()
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc),
                            headers={"Retry-After": str(exc.retry_after_s)}) from exc
    return GenerationRun(job, service, metrics, endpoint, started or submitted, params)
