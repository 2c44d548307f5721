"""Liveness and readiness."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from copilot.api.dependencies import ServiceDep
from copilot.api.schemas import HealthResponse, ReadyResponse

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthResponse)
async def healthz() -> HealthResponse:
    """The process is up."""
    return HealthResponse(status="ok")


@router.get("/readyz", response_model=ReadyResponse, responses={503: {"model": ReadyResponse}})
async def readyz(service: ServiceDep) -> ReadyResponse | JSONResponse:
    """Model loaded and store reachable (its database and dense index answer); 503 otherwise."""
    model_loaded = service.models.engine is not None

    def probe() -> int:
        service.store.ping()
        return service.store.lexical.count()

    try:
        chunks = await asyncio.to_thread(probe)
        reachable, detail = True, None
    except Exception as exc:  # any store failure means not ready
        chunks, reachable, detail = None, False, str(exc)
    if not model_loaded:
        detail = "no target model is loaded" + (f"; {detail}" if detail else "")
    ready = model_loaded and reachable
    body = ReadyResponse(status="ready" if ready else "not ready", model_loaded=model_loaded,
                         store_reachable=reachable, chunks=chunks, detail=detail,
                         draft_model=service.models.draft_status)
    return body if ready else JSONResponse(body.model_dump(), status_code=503)
