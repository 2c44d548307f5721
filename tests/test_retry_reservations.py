"""A Retry-After that means it: a refused request's place is held until it comes back.

Pure parts (the reservations with a test clock) and the scheduler's queue order with jobs
whose admission the test holds; the openai SDK's own retries against a real uvicorn are in
``test_api_batching.py``.
"""

from __future__ import annotations

import threading

import pytest
from interleaved import InterleavedBatch

from copilot.serving.reservations import ReservationKey, Reservations
from copilot.serving.scheduler import BatchScheduler, Job, QueueFullError


def key(name: str, owner: str | None = None) -> ReservationKey:
    return ReservationKey(owner or name, name)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_reservation_is_taken_once_by_its_own_key():
    r = Reservations(limit=4, clock=Clock())
    assert r.reserve(key("a"), 5)
    assert not r.take(key("b"))
    assert r.take(key("a"))
    assert not r.take(key("a"))
    assert (r.made, r.used, len(r)) == (1, 1, 0)


def test_reservations_expire_one_hint_after_the_hinted_time():
    clock = Clock()
    r = Reservations(limit=4, clock=clock)
    r.reserve(key("a"), 5)
    clock.now = 9.9
    assert len(r) == 1
    clock.now = 10.0
    assert not r.take(key("a"))
    assert (len(r), r.expired) == (0, 1)


def test_reservations_are_bounded_in_all_and_per_caller():
    r = Reservations(limit=2, per_owner=1, clock=Clock())
    assert r.reserve(key("a"), 5)
    assert not r.reserve(key("a2", owner="a"), 5)  # the caller holds its one place already
    assert r.reserve(key("b"), 5)
    assert not r.reserve(key("c"), 5)  # the bound in all
    assert len(r) == 2 and r.take(key("a")) and r.take(key("b"))


class HeldJob(Job):
    """A job whose admission waits for ``gate``, then ends without decoding; records the order."""

    def __init__(self, name: str, order: list[str], gate: threading.Event) -> None:
        super().__init__()
        self.name, self.order, self.gate = name, order, gate
        self.admitted = threading.Event()

    def admit(self, batch):
        self.order.append(self.name)
        self.admitted.set()
        self.gate.wait(10)
        return None

    def end(self, last) -> None:  # nobody listens in this test
        pass


def test_a_refused_request_sent_again_is_queued_ahead_of_those_that_did_not_wait():
    gate, order = threading.Event(), []
    scheduler = BatchScheduler(lambda: InterleavedBatch(None), max_batch=1, max_queue=1, retry_after_s=1)
    try:
        first = scheduler.submit(HeldJob("first", order, gate))
        assert first.admitted.wait(5)  # the scheduler thread holds it: the batch slot is taken
        scheduler.submit(HeldJob("waited-not", order, gate), key=key("w"))  # the one queue place
        with pytest.raises(QueueFullError):
            scheduler.submit(HeldJob("refused", order, gate), key=key("r"))  # refused: a place is reserved
        with pytest.raises(QueueFullError):
            scheduler.submit(HeldJob("anonymous", order, gate))  # no key: nothing reserved
        scheduler.submit(HeldJob("refused", order, gate), key=key("r"))  # back: it takes its place
        with pytest.raises(QueueFullError):
            scheduler.submit(HeldJob("other", order, gate), key=key("o"))
        assert scheduler.reservations.used == 1 and len(scheduler.reservations) == 1  # "o" holds one now
        gate.set()
        for _ in range(100):
            if len(order) == 3:
                break
            threading.Event().wait(0.05)
        assert order == ["first", "refused", "waited-not"]
    finally:
        gate.set()
        scheduler.close()


def test_refused_callers_who_never_return_do_not_lock_an_idle_server():
    """Issue 46: places reserved for refused callers counted as taken, so once the long questions ended
    an idle server (batch 0, queue 0) refused a newcomer for as long as the reservations lived."""
    gate, order = threading.Event(), []
    scheduler = BatchScheduler(lambda: InterleavedBatch(None), max_batch=1, max_queue=1, retry_after_s=1,
                               max_reservations=4)
    try:
        first = scheduler.submit(HeldJob("first", order, gate))
        assert first.admitted.wait(5)
        scheduler.submit(HeldJob("queued", order, gate))
        for caller in "abcd":  # refused callers who never come back
            with pytest.raises(QueueFullError):
                scheduler.submit(HeldJob(caller, order, gate), key=key(caller))
        assert len(scheduler.reservations) == 4
        gate.set()
        for _ in range(100):
            if len(order) == 2 and scheduler.depth == 0 and scheduler.batch_size == 0:
                break
            threading.Event().wait(0.05)
        newcomer = scheduler.submit(HeldJob("newcomer", order, gate), key=key("n"))  # admitted at once
        assert newcomer.admitted.wait(5) and len(scheduler.reservations) == 4
    finally:
        gate.set()
        scheduler.close()


def test_the_hint_is_the_slot_time_of_the_requests_ahead():
    """The Retry-After hint follows the measured drain: one batch slot frees every median answer time
    ÷ max_batch; a refused caller waits for the reserved callers ahead of it and itself (was the whole
    queue plus the reservations over a rate diluted by idle time: 81-273 s for answers of 10-50 s)."""
    scheduler = BatchScheduler(lambda: InterleavedBatch(None), max_batch=2, max_queue=4, retry_after_s=1)
    try:
        assert scheduler.retry_after() == 1  # nothing measured yet
        scheduler._held_s.extend([10.0, 30.0, 50.0])
        assert scheduler.drain_rate() == 2 / 30
        assert scheduler.retry_after() == 15
        scheduler.reservations.reserve(key("a"), 15)
        assert scheduler.retry_after() == 30
    finally:
        scheduler.close()
