"""One generation worker owns the model; requests queue for it.

The worker is a thread draining a bounded queue. A full queue refuses new jobs at once
(the API answers 503 with Retry-After). Each job streams events back through its own
queue and can be cancelled (a disconnected client), which stops its generation at the
next round boundary.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

log = logging.getLogger(__name__)

_DONE = object()


class QueueFullError(RuntimeError):
    """The generation queue is full; retry after ``retry_after_s`` seconds."""

    def __init__(self, depth: int, retry_after_s: int) -> None:
        super().__init__(f"generation queue is full ({depth} waiting); retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s


@dataclass
class Job:
    """A queued unit of work: ``fn(emit, cancelled)`` runs on the worker thread."""

    fn: Callable[[Callable[[Any], None], Callable[[], bool]], None]
    events: "queue.Queue[Any]" = field(default_factory=queue.Queue)
    cancel_event: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancel_event.set()

    def next_event(self, timeout: float | None = None) -> Any:
        """The next event, :data:`DONE` at the end; raises ``queue.Empty`` on timeout and
        re-raises an exception the job raised."""
        item = self.events.get(timeout=timeout)
        if isinstance(item, _JobError):
            raise item.exc
        return item

    def iter_events(self) -> Iterator[Any]:
        """Blocking iterator over the job's events."""
        while (item := self.next_event()) is not _DONE:
            yield item


@dataclass
class _JobError:
    exc: BaseException


DONE = _DONE


class GenerationWorker:
    """A single thread that runs jobs one at a time.

    Args:
        max_queue: jobs that may wait (the running one not counted).
        retry_after_s: the Retry-After hint given when the queue is full (seconds).
    """

    def __init__(self, max_queue: int = 8, retry_after_s: int = 5) -> None:
        self._queue: "queue.Queue[Job | None]" = queue.Queue(maxsize=max_queue)
        self.retry_after_s = retry_after_s
        self._thread = threading.Thread(target=self._loop, name="generation-worker", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        """Jobs waiting (not counting the running one)."""
        return self._queue.qsize()

    def submit(self, fn: Callable[[Callable[[Any], None], Callable[[], bool]], None]) -> Job:
        """Queue ``fn``; raises :class:`QueueFullError` when the queue is full."""
        job = Job(fn)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFullError(self._queue.qsize(), self.retry_after_s) from None
        return job

    def _loop(self) -> None:
        while (job := self._queue.get()) is not None:
            if job.cancel_event.is_set():
                job.events.put(_DONE)
                continue
            try:
                job.fn(job.events.put, job.cancel_event.is_set)
            except BaseException as exc:  # delivered to the waiting request
                log.exception("generation job failed")
                job.events.put(_JobError(exc))
            else:
                job.events.put(_DONE)

    def close(self) -> None:
        """Stop after the queued jobs (used at shutdown)."""
        self._queue.put(None)
        self._thread.join(timeout=5)
