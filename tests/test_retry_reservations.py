"""A Retry-After that means it: a refused request's place is held until it comes back.

Pure parts (the reservations with a test clock) and the scheduler's queue order with jobs
whose admission the test holds; the openai SDK's own retries against a real uvicorn are in
``test_api_batching.py``.
"""

from __future__ import annotations

import threading

import pytest

from copilot.serving.reservations import Reservations
from copilot.serving.scheduler import BatchScheduler, InterleavedBatch, Job, QueueFullError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_reservation_is_taken_once_by_its_own_key():
    r = Reservations(limit=4, clock=Clock())
    assert r.reserve("a", 5)
    assert not r.take("b")
    assert r.take("a")
    assert not r.take("a")
    assert (r.made, r.used, len(r)) == (1, 1, 0)


def test_reservations_expire_one_hint_after_the_hinted_time():
    clock = Clock()
    r = Reservations(limit=4, clock=clock)
    r.reserve("a", 5)
    clock.now = 9.9
    assert len(r) == 1
    clock.now = 10.0
    assert not r.take("a")
    assert (len(r), r.expired) == (0, 1)


def test_reservations_are_bounded():
    r = Reservations(limit=2, clock=Clock())
    assert r.reserve("a", 5) and r.reserve("a", 5)
    assert not r.reserve("b", 5)
    assert len(r) == 2 and r.take("a") and r.take("a")


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
        scheduler.submit(HeldJob("waited-not", order, gate), key="w")  # the one queue place
        with pytest.raises(QueueFullError):
            scheduler.submit(HeldJob("refused", order, gate), key="r")  # refused: a place is reserved
        with pytest.raises(QueueFullError):
            scheduler.submit(HeldJob("anonymous", order, gate))  # no key: nothing reserved
        scheduler.submit(HeldJob("refused", order, gate), key="r")  # back: it takes its place
        with pytest.raises(QueueFullError):
            scheduler.submit(HeldJob("other", order, gate), key="o")
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
