"""Test scaffolding: a batch over a stand-in engine that only streams (moved out of
``copilot/serving/scheduler.py``; the product drives the engine's own batch)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable, Iterator, Protocol, Sequence

from decoding import GenerationConfig
from decoding.engine import StreamEvent
from decoding.logits import LogitsSettings


class StreamingEngine(Protocol):
    """An engine stand-in that only streams."""

    def stream(self, prompt_ids: Sequence[int], config: GenerationConfig, contexts: Sequence[Sequence[int]],
               cancel: Callable[[], bool] | None, settings: LogitsSettings | None) -> Iterator[StreamEvent]: ...


class InterleavedBatch:
    """A :class:`copilot.serving.scheduler.BatchLike` over an engine that only streams: its requests
    take turns, one event each per round. ``None``: a batch that takes no requests."""

    def __init__(self, engine: StreamingEngine | None) -> None:
        self.engine = engine
        self.active: list[Iterator[StreamEvent]] = []

    def add(self, prompt_ids: Sequence[int], config: GenerationConfig, contexts: Sequence[Sequence[int]] = (),
            cancel: Callable[[], bool] | None = None,
            settings: LogitsSettings | None = None) -> tuple[Iterator[StreamEvent], list[StreamEvent]]:
        assert self.engine is not None, "an InterleavedBatch without an engine takes no requests"
        stream = self.engine.stream(prompt_ids, config, contexts, cancel, settings)
        first = next(stream)
        if first.result is None:
            self.active.append(stream)
        return stream, [first]

    def step(self) -> list[tuple[Iterator[StreamEvent], StreamEvent]]:
        events = []
        for stream in list(self.active):
            event = next(stream)
            events.append((stream, event))
            if event.result is not None:
                self.active.remove(stream)
        return events


class StreamOnly:
    """Mix-in for an engine stand-in with a ``stream`` method: its :meth:`batch` interleaves its streams,
    and its ``target`` answers what the service reads of a target (no name, no family, torch)."""

    target = SimpleNamespace(name="", model_type=None, backend="torch")

    def batch(self) -> InterleavedBatch:
        return InterleavedBatch(self)  # type: ignore[arg-type]
