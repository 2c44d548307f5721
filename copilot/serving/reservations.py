"""Places held for refused requests, so that a client who waits its ``Retry-After`` gets in.

A 503 with ``Retry-After`` only helps a client that, once it has waited, finds room. Under a
closed loop of other clients it does not: the slot freed while it waited goes to whoever asks
first. So a refusal reserves a place for the request it refused, keyed by who asked and what
(:class:`ReservationKey`: the API key or client address, and the checked request). The same
request sent again while its reservation lives is queued even when the queue is full, ahead of the
requests that have not waited. A reservation never keeps free capacity from anyone else: a request
without one is admitted whenever the queue has room, so a server whose refused callers never come
back is not locked (the queue may run over ``max_queue`` by the places reserved, a bounded number).
Reservations are bounded in all and per caller (beyond either bound a refusal reserves nothing) and
expire one hint after the hinted time, so a client that never comes back holds nothing for long.

Not thread-safe on its own: :class:`~copilot.serving.scheduler.BatchScheduler` calls it under its
submit lock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class ReservationKey:
    """Who asked what: ``owner`` identifies the caller, ``request`` the request (opaque digests)."""

    owner: str
    request: str


@dataclass
class Reservations:
    """Reserved queue places by request key.

    Args:
        limit: most places held at once (a refusal beyond it reserves nothing).
        per_owner: most places one caller holds at once.
        clock: seconds, monotonic (``time.monotonic``; tests pass their own).

    Attributes:
        made / used / expired: counts since start (reservations made, taken by their request,
            dropped unused).
    """

    limit: int
    per_owner: int = 1
    clock: Callable[[], float] = time.monotonic
    made: int = 0
    used: int = 0
    expired: int = 0
    _places: list[tuple[float, ReservationKey]] = field(default_factory=list)  # (expires at, key), oldest first

    def __len__(self) -> int:
        """Places held now (expired ones dropped first)."""
        self._expire()
        return len(self._places)

    def reserve(self, key: ReservationKey, retry_after_s: float) -> bool:
        """Hold a place for ``key`` until ``2 × retry_after_s`` seconds from now; False at the limit,
        or when its caller holds ``per_owner`` places already."""
        if len(self) >= self.limit or sum(held.owner == key.owner for _, held in self._places) >= self.per_owner:
            return False
        self._places.append((self.clock() + 2 * retry_after_s, key))
        self.made += 1
        return True

    def take(self, key: ReservationKey) -> bool:
        """Use ``key``'s oldest place; False when it holds none (or they expired)."""
        self._expire()
        for i, (_, held) in enumerate(self._places):
            if held == key:
                del self._places[i]
                self.used += 1
                return True
        return False

    def _expire(self) -> None:
        now = self.clock()
        kept = [(t, key) for t, key in self._places if t > now]
        self.expired += len(self._places) - len(kept)
        self._places = kept
