"""The server's side of ``POST /v1/index/reindex``: one dense-index rebuild at a time
(:func:`ingestion.reindex.reindex`), on a background thread, with its progress kept for ``GET /v1/index``."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace

from ingestion.errors import StoreError
from ingestion.reindex import reindex
from ingestion.stores.chunk_store import ChunkStore

log = logging.getLogger(__name__)


class RebuildRunningError(RuntimeError):
    """A rebuild is already running in this process."""


@dataclass(frozen=True)
class RebuildState:
    """The latest rebuild started by this process.

    Attributes:
        running: still under way.
        done / total: chunks handled so far / in all (0 until counted).
        started_at: Unix time it started.
        finished_at: Unix time it ended (None while running).
        error: why it failed (None: it succeeded, or runs).
    """

    running: bool
    done: int = 0
    total: int = 0
    started_at: float = 0.0
    finished_at: float | None = None
    error: str | None = None


class ReindexRunner:
    """Runs :func:`~ingestion.reindex.reindex` on ``store`` in a daemon thread, one at a time."""

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self.state: RebuildState | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> RebuildState:
        """Start a rebuild; its first state.

        Raises:
            RebuildRunningError: one is running already.
        """
        with self._lock:
            if self.state is not None and self.state.running:
                raise RebuildRunningError("a rebuild of the dense index is already running")
            self.state = RebuildState(running=True, started_at=time.time())
            self._thread = threading.Thread(target=self._run, name="reindex", daemon=True)
            self._thread.start()
            return self.state

    def _progress(self, done: int, total: int) -> None:
        with self._lock:
            assert self.state is not None
            self.state = replace(self.state, done=done, total=total)

    def _run(self) -> None:
        error = None
        try:
            reindex(self.store, on_progress=self._progress)
        except StoreError as exc:  # StoreLockedError too: an ingest holds the store
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - reported to the caller, never kills the server
            log.exception("the rebuild of the dense index failed")
            error = f"{type(exc).__name__}: {exc}"
        with self._lock:
            assert self.state is not None
            self.state = replace(self.state, running=False, finished_at=time.time(), error=error)
