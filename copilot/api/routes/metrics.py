"""``GET /metrics`` in the Prometheus text format."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from copilot.api.dependencies import MetricsDep

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
async def metrics(m: MetricsDep) -> Response:
    """Requests and latency per route, TTFT, tokens, τ and α per drafter, queue depth."""
    return Response(m.render(), media_type=CONTENT_TYPE_LATEST)
