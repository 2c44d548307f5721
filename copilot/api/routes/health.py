"""Liveness and readiness."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from copilot.api.dependencies import ServiceDep
from copilot.api.schemas.health import HealthResponse, ReadyResponse
from copilot.serving.remote_target import RemoteEngine
from decoding.backends.cpu import cpu_report

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthResponse)
async def healthz() -> HealthResponse:
    """The process is up."""
    return HealthResponse(status="ok")


@router.get("/readyz", response_model=ReadyResponse, responses={503: {"model": ReadyResponse}})
async def readyz(service: ServiceDep) -> ReadyResponse | JSONResponse:
    """Model loaded (an external model server answering) and store reachable (its database and
    dense index answer); 503 otherwise, naming what is not. A damaged dense index (search is then
    lexical only) is ready, with ``dense_index: degraded`` and the reason."""
    engine = service.models.engine
    model_loaded = engine is not None
    server_error = None
    if isinstance(engine, RemoteEngine):  # an external model server answers, or not
        try:
            await asyncio.to_thread(engine.ping)
        except Exception as exc:  # noqa: BLE001 - any failure to answer means not ready
            server_error = str(exc)

    def probe() -> int:
        service.store.ping()
        service.store.refresh()  # another process's rebuild or damage
        return service.store.lexical.count()

    try:
        chunks = await asyncio.to_thread(probe)
        reachable, detail = True, None
    except Exception as exc:  # any store failure means not ready
        chunks, reachable, detail = None, False, str(exc)
    if not model_loaded:
        detail = "no target model is loaded" + (f"; {detail}" if detail else "")
    if server_error is not None:
        detail = server_error + (f"; {detail}" if detail else "")
    ready = model_loaded and reachable and server_error is None
    body = ReadyResponse(status="ready" if ready else "not ready", model_loaded=model_loaded,
                         store_reachable=reachable, chunks=chunks, detail=detail,
                         draft_model=service.models.draft_status,
                         dense_index=None if not reachable else "degraded" if service.store.dense_damage else "ok",
                         dense_index_detail=service.store.dense_damage, cpu=cpu_report().summary())
    return body if ready else JSONResponse(body.model_dump(), status_code=503)
