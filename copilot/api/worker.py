"""One generation worker owns the model; requests queue for it.

The worker is a thread draining a bounded queue. A full queue refuses new jobs at once
(the API answers 503 with Retry-After). Each job streams events back to the request
that submitted it — into an :class:`asyncio.Queue` on the request's event loop when it
was submitted from async code, else into a thread-safe queue — and can be cancelled
(a disconnected client), which stops its generation at the next round boundary.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from typing import Any, Callable, Iterator

log = logging.getLogger(__name__)

_DONE = object()
#: The sentinel a job's event stream ends with.
DONE = _DONE

Emit = Callable[[Any], None]
Cancelled = Callable[[], bool]


class QueueFullError(RuntimeError):
    """The generation queue is full; retry after ``retry_after_s`` seconds."""

    def __init__(self, depth: int, retry_after_s: int) -> None:
        super().__init__(f"generation queue is full ({depth} waiting); retry in {retry_after_s} s")
        self.depth = depth
        self.retry_after_s = retry_after_s


class _JobError:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Job:
    """A queued unit of work: ``fn(emit, cancelled)`` runs on the worker thread.

    Attributes:
        submitted_at / started_at / finished_at: ``time.perf_counter()`` seconds (None until then).
    """

    def __init__(self, fn: Callable[[Emit, Cancelled], None], loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.fn = fn
        self.cancel_event = threading.Event()
        self.submitted_at = time.perf_counter()
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self._loop = loop
        self._async: asyncio.Queue | None = asyncio.Queue() if loop is not None else None
        self._sync: queue.Queue | None = queue.Queue() if loop is None else None

    # -- worker side -------------------------------------------------------------------------
    def emit(self, item: Any) -> None:
        """Deliver an event to the consumer (called on the worker thread)."""
        if self._sync is not None:
            self._sync.put(item)
            return
        try:
            self._loop.call_soon_threadsafe(self._async.put_nowait, item)  # type: ignore[union-attr]
        except RuntimeError:  # the consumer's event loop is closed: nobody is listening
            self.cancel()

    # -- consumer side -----------------------------------------------------------------------
    def cancel(self) -> None:
        """Ask the job to stop at its next check (no-op once it finished)."""
        self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self.cancel_event.is_set()

    @property
    def queue_ms(self) -> float | None:
        """Milliseconds the job waited before the worker started it (None while waiting)."""
        return None if self.started_at is None else (self.started_at - self.submitted_at) * 1000

    async def next_event_async(self, timeout: float | None = None) -> Any:
        """The next event, :data:`DONE` at the end.

        Raises:
            TimeoutError: nothing arrived within ``timeout`` seconds.
            Exception: the one the job raised.
        """
        assert self._async is not None, "job was not submitted from an event loop"
        item = await asyncio.wait_for(self._async.get(), timeout)
        if isinstance(item, _JobError):
            raise item.exc
        return item

    def next_event(self, timeout: float | None = None) -> Any:
        """Blocking variant of :meth:`next_event_async` for jobs submitted from threads.

        Raises:
            queue.Empty: nothing arrived within ``timeout`` seconds.
        """
        assert self._sync is not None, "job was submitted from an event loop"
        item = self._sync.get(timeout=timeout)
        if isinstance(item, _JobError):
            raise item.exc
        return item

    def iter_events(self) -> Iterator[Any]:
        """Blocking iterator over the events of a job submitted from a thread."""
        while (item := self.next_event()) is not _DONE:
            yield item


class GenerationWorker:
    """A single thread that runs jobs one at a time.

    Args:
        max_queue: jobs that may wait (the running one not counted).
        retry_after_s: the smallest Retry-After hint given when the queue is full (seconds);
            the hint grows with the measured job duration times the queue length.
    """

    def __init__(self, max_queue: int = 8, retry_after_s: int = 5) -> None:
        self.max_queue = max_queue
        self._queue: "queue.Queue[Job | None]" = queue.Queue(maxsize=max_queue)
        self.retry_after_s = retry_after_s
        self._avg_job_s: float | None = None
        self._running = 0
        self._thread = threading.Thread(target=self._loop, name="generation-worker", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        """Jobs waiting (not counting the running one)."""
        return self._queue.qsize()

    @property
    def busy(self) -> bool:
        """True while a job runs."""
        return self._running > 0

    def retry_after(self) -> int:
        """Seconds a refused client should wait: the queue's expected drain time, at least ``retry_after_s``."""
        if self._avg_job_s is None:
            return self.retry_after_s
        return max(self.retry_after_s, min(3600, math.ceil(self._avg_job_s * (self.depth + 1))))

    def submit(self, fn: Callable[[Emit, Cancelled], None], loop: asyncio.AbstractEventLoop | None = None) -> Job:
        """Queue ``fn``; its events go to ``loop`` (an asyncio queue) or, without one, a thread queue.

        Raises:
            QueueFullError: ``max_queue`` jobs are already waiting.
        """
        job = Job(fn, loop)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFullError(self._queue.qsize(), self.retry_after()) from None
        return job

    def _loop(self) -> None:
        while (job := self._queue.get()) is not None:
            job.started_at = time.perf_counter()
            self._running = 1
            try:
                job.fn(job.emit, job.cancel_event.is_set)
            except BaseException as exc:  # delivered to the waiting request
                log.exception("generation job failed")
                job.emit(_JobError(exc))
            else:
                job.emit(_DONE)
            finally:
                self._running = 0
                job.finished_at = time.perf_counter()
                took = job.finished_at - job.started_at
                if not job.cancelled:
                    self._avg_job_s = took if self._avg_job_s is None else 0.8 * self._avg_job_s + 0.2 * took

    def close(self, timeout: float = 5.0) -> None:
        """Cancel the waiting jobs and stop after the running one (used at shutdown)."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
                job.emit(_DONE)
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:  # a racing submit refilled it; the daemon thread dies with the process
            log.warning("generation worker did not stop: queue refilled during shutdown")
        self._thread.join(timeout=timeout)
