"""One question on the batch scheduler: the job on the scheduler's thread and the run its
request handler consumes.

When the scheduler admits a :class:`QuestionJob`, the job retrieves and builds the prompt on
the scheduler's thread — not beside it: on a CPU-only host both are compute-bound, and
running the query embedding while another request decodes slows both (measured on 2 cores:
retrieval 20 → 135 ms) — then joins the decoding batch. Its events cross to the handler's
event loop typed (:data:`QuestionEvent`): first :class:`PromptReady` or :class:`PromptRefused`,
then the :class:`~copilot.answer.events.AnswerEvent` stream. :meth:`GenerationRun.prepared`
waits for the prompt (sources known; a late refusal from prompt building surfaces here), and
:meth:`GenerationRun.deltas` streams the text, cancelling the job when the client disconnects
or the consumer stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol

from prometheus_client import Counter, Histogram

from copilot.answer.assembly import Answer, AnswerAssembler
from copilot.answer.events import AnswerEvent, AnswerFeed, Prepared
from copilot.answer.question import Question
from copilot.service import CopilotService
from copilot.serving.remote_target import RemoteTargetError
from copilot.serving.reservations import ReservationKey
from copilot.serving.scheduler import DONE, AsyncJob, BatchLike, BatchScheduler, JobDone, QueueFullError
from decoding.engine import StreamEvent

log = logging.getLogger(__name__)

#: Seconds between client-disconnect checks while waiting for the scheduler.
POLL_S = 0.25

#: Asks whether the client has gone (``starlette.requests.Request.is_disconnected``).
Disconnected = Callable[[], Awaitable[bool]]


class GenerationFailedError(RuntimeError):
    """The engine raised while generating (reported as an HTTP error or an SSE ``error`` event).

    Attributes:
        status: the HTTP status to answer with: 500, or the external model server's
            (:class:`~copilot.serving.remote_target.RemoteTargetError`: 502, or 503 for its 429).
        retry_after_s: the ``Retry-After`` to send with a 503 (seconds), else ``None``.
    """

    def __init__(self, message: str, status: int = 500, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status, self.retry_after_s = status, retry_after_s

    @classmethod
    def of(cls, exc: BaseException) -> "GenerationFailedError":
        """The failure for what the engine raised (a model server's error keeps its status)."""
        if isinstance(exc, RemoteTargetError):
            return cls(str(exc), exc.status, exc.retry_after_s)
        return cls(f"generation failed: {type(exc).__name__}: {exc}")


class PromptRefusedError(RuntimeError):
    """Building the prompt refused the question; ``reason`` is the service's error
    (:class:`~copilot.answer.prompting.PromptTooLongError`, another ValueError, or a RuntimeError)."""

    def __init__(self, reason: Exception) -> None:
        super().__init__(str(reason))
        self.reason = reason


class ClientLeftError(RuntimeError):
    """The client disconnected before the prompt was built (the job is cancelled)."""


@dataclass(frozen=True)
class PromptReady:
    """The job retrieved and built its prompt (the first event of an admitted question)."""

    prepared: Prepared


@dataclass(frozen=True)
class PromptRefused:
    """Building the prompt refused the question (the job ends after this event)."""

    reason: Exception


#: What a question job hands its request handler, besides the end (:data:`~copilot.serving.scheduler.DONE`).
QuestionEvent = PromptReady | PromptRefused | AnswerEvent


class QuestionMetrics(Protocol):
    """What a question books (:class:`copilot.api.metrics.Metrics`)."""

    queue_wait: Histogram
    queue_rejections: Counter
    ttft: Histogram

    def observe_generation(self, finish_reason: str, stats: dict[str, Any] | None = None) -> None: ...


class QuestionJob(AsyncJob[QuestionEvent]):
    """One question on the scheduler: retrieval and prompt building when admitted, then its
    decoding in the batch; the fixed answers (:meth:`CopilotService.fixed_answer`) and
    refused prompts end it without decoding."""

    def __init__(self, service: CopilotService, metrics: QuestionMetrics, question: Question,
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.service, self.metrics, self.question = service, metrics, question
        self.prepared: Prepared | None = None
        self.feed: AnswerFeed | None = None

    def admit(self, batch: BatchLike) -> object | None:
        """Retrieve and build the prompt, then join ``batch`` (see :class:`~copilot.serving.scheduler.Job`)."""
        self.metrics.queue_wait.observe(time.perf_counter() - self.submitted_at)
        try:
            prepared = self.service.prepare(self.question)
        except (ValueError, RuntimeError) as exc:  # PromptTooLongError is a ValueError
            self.emit(PromptRefused(exc))
            self.emit(DONE)
            return None
        self.prepared = prepared
        self.emit(PromptReady(prepared))
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

    def deliver(self, event: StreamEvent) -> None:
        """Forward one engine event with its citations checked; book the metrics at the end."""
        assert self.feed is not None, "admit() first"
        self._forward(self.feed.convert(event))

    def _forward(self, answer_event: AnswerEvent) -> None:
        self.emit(answer_event)
        result = answer_event.result
        if result is None:
            return
        if result.finish_reason == "cancelled":
            self.metrics.observe_generation("cancelled")
        elif self.question.retrieves and self.prepared is not None and not self.prepared.prompt.turn_sources:
            self.metrics.observe_generation("no_context")
        else:
            self.metrics.observe_generation(result.finish_reason, result.stats.to_dict())


class GenerationRun:
    """One queued question, consumed by an async request handler.

    Args:
        endpoint: the metric label of the time to first token.
        started: ``time.perf_counter()`` when the request arrived.
    """

    def __init__(self, job: QuestionJob, service: CopilotService, metrics: QuestionMetrics, endpoint: str,
                 started: float) -> None:
        self.job = job
        self.service = service
        self.metrics = metrics
        self.endpoint = endpoint
        self.started = started
        self.assembler: AnswerAssembler | None = None  # from prepared() on
        self.disconnected = False
        self._last_check = time.monotonic()

    async def _next(self, disconnected: Disconnected | None) -> QuestionEvent | JobDone | None:
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
                raise GenerationFailedError.of(exc) from exc
            if disconnected is not None and (event is None or time.monotonic() - self._last_check >= POLL_S):
                self._last_check = time.monotonic()
                if await disconnected():
                    log.info("client disconnected: cancelling its generation")
                    self.disconnected = True
                    self.job.cancel()
                    return None
            if event is not None:
                return event

    async def prepared(self, disconnected: Disconnected | None) -> Prepared:
        """Wait (through the queue) until the scheduler has retrieved and built the prompt.

        Args:
            disconnected: polled every :data:`POLL_S` seconds while waiting (None: never).
        Raises:
            PromptRefusedError: prompt building refused the question.
            GenerationFailedError: the job failed.
            ClientLeftError: the client left while waiting (or the job ended unadmitted).
        """
        event = await self._next(disconnected)
        if event is None or isinstance(event, JobDone):
            self.job.cancel()
            raise ClientLeftError("client closed the request")
        if isinstance(event, PromptRefused):
            raise PromptRefusedError(event.reason)
        assert isinstance(event, PromptReady), event
        self.assembler = AnswerAssembler(event.prepared)
        return event.prepared

    async def deltas(self, disconnected: Disconnected | None = None) -> AsyncIterator[str]:
        """Yield the answer's text deltas as the engine commits them (after :meth:`prepared`).

        Args:
            disconnected: polled every :data:`POLL_S` seconds (``None`` for SSE, where
                sse-starlette watches the connection itself).
        Raises:
            GenerationFailedError: the engine failed.
        The job is cancelled when the client disconnects or the consumer stops iterating.
        """
        assert self.assembler is not None, "call prepared() first"
        first = True
        try:
            while True:
                event = await self._next(disconnected)
                if event is None or isinstance(event, JobDone):
                    return
                assert isinstance(event, AnswerEvent), event
                if self.assembler.add(event):
                    if first:
                        self.metrics.ttft.labels(self.endpoint).observe(time.perf_counter() - self.started)
                        first = False
                    yield event.delta
        finally:
            self.job.cancel()  # no-op after completion; stops the generation if we were interrupted

    async def complete(self, disconnected: Disconnected | None) -> Answer:
        """Consume the whole answer (non-streaming handlers).

        Raises:
            GenerationFailedError: the engine failed.
        """
        async for _ in self.deltas(disconnected):
            pass
        return self.answer()

    def answer(self) -> Answer:
        """The answer so far, with ``stats["queue_ms"]`` (call after :meth:`deltas` ended);
        ``completion_tokens`` of a stopped answer are its text's tokens."""
        assembler = self.assembler
        assert assembler is not None, "call prepared() first"
        answer = assembler.answer("cancelled" if self.disconnected else "stop")
        if self.job.queue_ms is not None:
            answer.stats["queue_ms"] = round(self.job.queue_ms, 2)
        if assembler.result is None:
            answer.completion_tokens = self.service.models.count_tokens(answer.text)
        return answer


@dataclass(frozen=True)
class QuestionQueue:
    """Where the server's questions are answered: the service, the scheduler that owns the
    model, and the metrics each question books."""

    service: CopilotService
    scheduler: BatchScheduler
    metrics: QuestionMetrics

    def submit(self, question: Question, endpoint: str, key: ReservationKey, started: float) -> GenerationRun:
        """Queue ``question``'s retrieval and decoding (must run on the handler's event loop).

        Args:
            endpoint: the metric label (``ask``, ``chat``, ``completions`` or ``responses``).
            key: who asked what, for a reservation (:mod:`copilot.serving.reservations`).
            started: ``time.perf_counter()`` when the request arrived (for the time to first token).
        Raises:
            copilot.serving.scheduler.QueueFullError: the queue is full (counted in
                ``queue_rejections``; the same ``key`` sent again takes the place reserved for it).
        """
        job = QuestionJob(self.service, self.metrics, question, asyncio.get_running_loop())
        try:
            self.scheduler.submit(job, key)
        except QueueFullError:
            self.metrics.queue_rejections.inc()
            raise
        return GenerationRun(job, self.service, self.metrics, endpoint, started)
