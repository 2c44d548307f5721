"""The batch scheduler: one thread owns the model and decodes every admitted question at once.

Questions queue first come, first served (a bounded queue: a full one refuses at once, and
the API answers 503 with a ``Retry-After`` from the measured drain rate). A refusal reserves a
place for the refused request (:mod:`copilot.serving.reservations`): sent again, it is queued ahead
of the requests that have not waited. Between decoding
rounds the scheduler admits waiting questions while fewer than ``max_batch`` decode — each
retrieves and builds its prompt on this thread, then joins the engine's
:class:`~decoding.batch.Batch` — and then runs one round for all of them. Every round
advances every running answer, so a long answer never starves a short one, and a finished,
failed or cancelled (disconnected) answer leaves at the round boundary without disturbing
the others.

Events go back to the request that submitted the job through an :class:`asyncio.Queue` on
its event loop (:class:`AsyncJob`): the job's own events, then :data:`DONE` or a :class:`JobError`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Generic, Protocol, Sequence, TypeVar

from copilot.serving.reservations import ReservationKey, Reservations
from decoding import GenerationConfig
from decoding.engine import StreamEvent
from decoding.logits import LogitsSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobDone:
    """The end of a job's event stream (:data:`DONE`)."""


#: The item a job's event stream ends with.
DONE = JobDone()


class QueueFullError(RuntimeError):
    """The generation queue is full; retry after ``retry_after_s`` seconds."""

    def __init__(self, depth: int, retry_after_s: int) -> None:
        super().__init__(f"generation queue is full ({depth} waiting); retry in {retry_after_s} s")
        self.depth = depth
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class JobError:
    """An exception delivered to the waiting request in place of an event."""

    exc: BaseException


#: How a job's event stream ends: :data:`DONE`, or the exception it failed with.
JobEnd = JobDone | JobError


class BatchLike(Protocol):
    """What the scheduler drives: :class:`decoding.batch.Batch`, :class:`copilot.serving.remote_target.RemoteBatch`
    (or :class:`NoModelBatch`). A handle names one request of the batch (by identity)."""

    def add(self, prompt_ids: Sequence[int], config: GenerationConfig, contexts: Sequence[Sequence[int]] = (),
            cancel: Callable[[], bool] | None = None,
            settings: LogitsSettings | None = None) -> tuple[object, Sequence[StreamEvent]]: ...

    def step(self) -> Sequence[tuple[object, StreamEvent | BaseException]]:
        """One round's ``(handle, event)`` pairs; an event that is an exception fails that
        request alone (an exception raised by ``step`` fails every request of the batch)."""
        ...


class Job:
    """A queued question, as the scheduler thread sees it. Subclasses implement :meth:`admit`,
    :meth:`deliver` and :meth:`end`, all called on the scheduler thread.

    Attributes:
        submitted_at / started_at / finished_at: ``time.perf_counter()`` seconds (None until then).
    """

    def __init__(self) -> None:
        self.cancel_event = threading.Event()
        self.submitted_at = time.perf_counter()
        self.started_at: float | None = None
        self.finished_at: float | None = None

    # -- scheduler side ----------------------------------------------------------------------
    def admit(self, batch: BatchLike) -> object | None:
        """Prepare and join ``batch``; return the batch's handle, or ``None`` when the job ended
        without decoding (its events and :data:`DONE` already emitted)."""
        raise NotImplementedError

    def deliver(self, event: StreamEvent) -> None:
        """One engine event of this job's request (the last one carries the result)."""
        raise NotImplementedError

    def end(self, last: JobEnd) -> None:
        """Tell the consumer the job ended: :data:`DONE`, or the :class:`JobError` it failed with."""
        raise NotImplementedError

    def dropped(self) -> None:
        """The job was cancelled while it waited and is dropped unadmitted."""

    def failed(self, exc: BaseException) -> None:
        """The job's admission or a decoding round it was in raised ``exc``."""

    # -- consumer side -----------------------------------------------------------------------
    def cancel(self) -> None:
        """Ask the job to stop at its next round boundary (no-op once it finished)."""
        self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self.cancel_event.is_set()

    @property
    def queue_ms(self) -> float | None:
        """Milliseconds the job waited before it was admitted (None while waiting)."""
        return None if self.started_at is None else (self.started_at - self.submitted_at) * 1000


EventT = TypeVar("EventT")


class AsyncJob(Job, Generic[EventT]):
    """A job whose events (of type ``EventT``) go to a request handler on ``loop``, through an
    :class:`asyncio.Queue`: the scheduler thread emits, the handler awaits :meth:`next_event`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._loop = loop
        self._events: asyncio.Queue[EventT | JobEnd] = asyncio.Queue()

    def emit(self, item: EventT | JobEnd) -> None:
        """Deliver an event (or the end) to the consumer (from any thread)."""
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, item)
        except RuntimeError:  # the consumer's event loop is closed: nobody is listening
            self.cancel()

    def end(self, last: JobEnd) -> None:
        self.emit(last)

    async def next_event(self, timeout: float | None = None) -> EventT | JobDone:
        """The next event, :data:`DONE` at the end.

        Raises:
            TimeoutError: nothing arrived within ``timeout`` seconds.
            Exception: the one the job raised.
        """
        item = await asyncio.wait_for(self._events.get(), timeout)
        if isinstance(item, JobError):
            raise item.exc
        return item


class BatchingEngine(Protocol):
    """An engine that batches: :class:`decoding.engine.SpeculativeEngine`,
    :class:`copilot.serving.remote_target.RemoteEngine`."""

    def batch(self) -> BatchLike: ...


class NoModelBatch:
    """The batch of a service without a target model (retrieval only): no job joins it, since
    every question is answered (or refused) before decoding."""

    def add(self, prompt_ids: Sequence[int], config: GenerationConfig, contexts: Sequence[Sequence[int]] = (),
            cancel: Callable[[], bool] | None = None,
            settings: LogitsSettings | None = None) -> tuple[object, list[StreamEvent]]:
        """Raises RuntimeError: there is no model to decode with."""
        raise RuntimeError("no target model is loaded")

    def step(self) -> list[tuple[object, StreamEvent]]:
        """Nothing runs: no rounds, no events."""
        return []


def make_batch(engine: BatchingEngine | None) -> BatchLike:
    """The engine's own batch (:meth:`~decoding.engine.SpeculativeEngine.batch`,
    :meth:`~copilot.serving.remote_target.RemoteEngine.batch`), or :class:`NoModelBatch` without one."""
    return NoModelBatch() if engine is None else engine.batch()


class BatchScheduler:
    """One thread that admits queued jobs into a batch and steps it.

    Args:
        new_batch: makes an empty batch (again after a failed round).
        max_batch: most questions decoding at once (≥ 1; 1 = one at a time).
        max_queue: questions that may wait beyond the free batch slots (so ``max_batch`` questions
            arriving together are all taken while the first of them prefills).
        retry_after_s: the smallest Retry-After hint (seconds).
        max_reservations: most places held for refused requests at once (default
            ``max_batch + max_queue``).

    Raises:
        ValueError: ``max_batch`` or ``max_queue`` below 1.
    """

    def __init__(self, new_batch: Callable[[], BatchLike], max_batch: int = 8, max_queue: int = 8,
                 retry_after_s: int = 5, max_reservations: int | None = None) -> None:
        if max_batch < 1 or max_queue < 1:
            raise ValueError(f"max_batch and max_queue must be >= 1, got {max_batch}, {max_queue}")
        self.new_batch, self.max_batch, self.max_queue = new_batch, max_batch, max_queue
        self.retry_after_s = retry_after_s
        # (0 for a job that had a reservation, else 1; arrival number; the job): reserved first, then FIFO.
        self._queue: "queue.PriorityQueue[tuple[int, int, Job | None]]" = queue.PriorityQueue()
        self._arrivals = itertools.count()
        self.reservations = Reservations(max_reservations if max_reservations is not None else max_batch + max_queue)
        self._held_s: deque[float] = deque(maxlen=32)  # seconds recent answers held their batch slot
        self._submit = threading.Lock()
        self._running = 0
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="batch-scheduler", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        """Jobs waiting for admission."""
        return self._queue.qsize()

    @property
    def capacity(self) -> int:
        """Jobs that may wait now: ``max_queue`` plus the batch's free slots."""
        return self.max_queue + max(0, self.max_batch - self._running)

    @property
    def batch_size(self) -> int:
        """Jobs decoding now."""
        return self._running

    def drain_rate(self) -> float | None:
        """Answers per second a full batch finishes: ``max_batch`` ÷ the median time a recent answer
        held its slot (None before two answers). Measured on the answers themselves, so idle
        stretches between them do not read as a slow drain."""
        held = sorted(self._held_s)
        if len(held) < 2 or held[len(held) // 2] <= 0:
            return None
        return self.max_batch / held[len(held) // 2]

    def retry_after(self) -> int:
        """Seconds a refused client should wait: the time the batch takes to free a slot for each
        request ahead of it when it comes back (the places reserved for earlier refused requests,
        which go first) and for itself, at the measured drain rate; at least ``retry_after_s``, at
        most an hour."""
        rate = self.drain_rate()
        if rate is None:
            return self.retry_after_s
        ahead = len(self.reservations) + 1
        return max(self.retry_after_s, min(3600, math.ceil(ahead / rate)))

    def submit(self, job: Job, key: ReservationKey | None = None) -> Job:
        """Queue ``job``. A ``key`` (who asked, and what) that holds a reservation is queued even
        when the queue is full, ahead of the jobs without one; a refused ``key`` gets a reservation
        (:mod:`copilot.serving.reservations`). A job without one is queued whenever there is room.

        Raises:
            QueueFullError: the queue is full for ``job``, with the Retry-After hint in seconds.
        """
        with self._submit:
            reserved = key is not None and self.reservations.take(key)
            if not reserved and self.depth >= self.capacity:
                hint = self.retry_after()
                if key is not None:
                    self.reservations.reserve(key, hint)
                raise QueueFullError(self.depth, hint)
            self._queue.put_nowait((0 if reserved else 1, next(self._arrivals), job))
        return job

    # -- the scheduler thread ----------------------------------------------------------------
    def _loop(self) -> None:
        batch, jobs = self.new_batch(), dict[int, Job]()
        while not self._closing:
            if not self._admit(batch, jobs, block=not jobs):
                break
            if not jobs:
                continue
            try:
                events = batch.step()
            except BaseException as exc:  # the batch's state is unknown now: fail its jobs, start anew
                log.exception("a decoding round failed")
                for job in jobs.values():
                    self._end(job, JobError(exc))
                batch, jobs = self.new_batch(), {}
                continue
            for handle, event in events:
                job = jobs[id(handle)]
                if isinstance(event, BaseException):  # this request alone failed (a remote target's)
                    del jobs[id(handle)]
                    self._end(job, JobError(event))
                    continue
                self._deliver(job, event)
                if event.result is not None:
                    del jobs[id(handle)]
                    self._end(job, DONE)
            self._running = len(jobs)
        for job in jobs.values():  # shutting down mid-answer
            job.cancel()
            job.end(DONE)

    def _admit(self, batch: BatchLike, jobs: dict[int, Job], block: bool) -> bool:
        """Admit waiting jobs while the batch has room (waiting for one when ``block``);
        False when told to stop."""
        while len(jobs) < self.max_batch:
            try:
                _, _, job = self._queue.get(timeout=0.5) if block else self._queue.get_nowait()
            except queue.Empty:
                return True
            if job is None:
                return False
            block = False
            job.started_at = time.perf_counter()
            self._running = len(jobs) + 1  # its slot is taken while it prefills
            if job.cancelled:  # the client left while it waited
                job.dropped()
                self._end(job, DONE)
                self._running = len(jobs)
                continue
            try:
                handle = job.admit(batch)
            except BaseException as exc:  # delivered to the waiting request
                log.exception("a question failed before decoding")
                self._end(job, JobError(exc))
                self._running = len(jobs)
                continue
            if handle is None:
                self._end(job, None)
            else:
                jobs[id(handle)] = job
            self._running = len(jobs)
        return True

    def _deliver(self, job: Job, event: StreamEvent) -> None:
        try:
            job.deliver(event)
        except BaseException:  # a consumer-side failure must not stop the batch
            log.exception("delivering an event failed")
            job.cancel()

    def _end(self, job: Job, last: JobEnd | None) -> None:
        """Book ``job`` as finished and hand the consumer ``last`` (``None``: the job already did)."""
        job.finished_at = time.perf_counter()
        if isinstance(last, JobError):
            job.failed(last.exc)
        if last is not None:
            job.end(last)
        if not job.cancelled and not isinstance(last, JobError) and job.started_at is not None:
            self._held_s.append(job.finished_at - job.started_at)

    def close(self, timeout: float = 5.0) -> None:
        """Cancel the waiting jobs and stop after the current round (used at shutdown)."""
        self._closing = True
        while True:
            try:
                _, _, job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
                job.end(DONE)
        self._queue.put_nowait((-1, next(self._arrivals), None))
        self._thread.join(timeout=timeout)
