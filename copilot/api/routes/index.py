"""``GET /v1/index``: whether dense search works; ``POST /v1/index/reindex``: rebuild the dense
index from the chunk texts the store keeps (:mod:`ingestion.reindex`), in the background.

A dense index whose files cannot be read (a disk that filled while it was written, a file cut
short or deleted) leaves the server serving: search and answers use the lexical index alone,
listing, reading and deleting documents work, ingest is refused with the reason, and ``/readyz``
says ``dense_index: degraded``. The rebuild needs a key allowed to maintain the whole store
(the ``ingest`` and ``delete`` rights, no read scope).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from fastapi import APIRouter, HTTPException, status

from copilot.api.dependencies import AdminAccess, ReadAccess, ReindexDep, StoreDep
from copilot.api.openapi import error_responses
from copilot.api.schemas.index import IndexStatus, RebuildOut
from copilot.serving.reindex_runner import RebuildRunningError, ReindexRunner
from ingestion.stores.chunk_store import ChunkStore

router = APIRouter(prefix="/v1/index", tags=["documents"])


def _status(store: ChunkStore, runner: ReindexRunner) -> IndexStatus:
    store.refresh()  # another process's rebuild or damage
    state = runner.state
    problem = store.dense_damage or ("the dense index is being rebuilt" if state is not None and state.running
                                     else None)

    def when(t: float | None) -> datetime | None:
        return None if t is None else datetime.fromtimestamp(t, timezone.utc)

    rebuild = None if state is None else RebuildOut(
        running=state.running, done=state.done, total=state.total, started_at=when(state.started_at),
        finished_at=when(state.finished_at), error=state.error)
    return IndexStatus(dense_index="degraded" if problem else "ok", detail=problem, chunks=store.lexical.count(),
                       rebuild=rebuild)


@router.get("", response_model=IndexStatus, responses=error_responses(401, 403))
async def index_status(store: StoreDep, runner: ReindexDep, access: ReadAccess) -> IndexStatus:
    """Whether the dense index serves (``degraded``: damaged, or being rebuilt; search is lexical
    only), why not, and the latest rebuild this server ran."""
    return await asyncio.to_thread(_status, store, runner)


@router.post("/reindex", response_model=IndexStatus, status_code=status.HTTP_202_ACCEPTED,
             responses=error_responses(401, 403, 409))
async def start_reindex(store: StoreDep, runner: ReindexDep, access: AdminAccess) -> IndexStatus:
    """Start rebuilding the dense index from the stored chunks (202; follow it at ``GET /v1/index``).
    Resumes an interrupted rebuild; 409 while one runs here. An ingest holding the store makes the
    rebuild fail at once, with the reason in ``rebuild.error``."""
    try:
        runner.start()
    except RebuildRunningError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc
    return await asyncio.to_thread(_status, store, runner)
