"""``POST /v1/search``: the best documents for a question, with evidence lines, no model call."""

from __future__ import annotations

import time

from fastapi import APIRouter, HTTPException, status

from copilot.api.dependencies import ReadAccess, ServiceDep
from copilot.api.openapi import error_responses
from copilot.api.schemas.search import SearchRequest, SearchResponse
from copilot.api.schemas.sources import SourceOut
from copilot.serving import use_cases

router = APIRouter(prefix="/v1", tags=["search"])


@router.post("/search", response_model=SearchResponse,
             responses=error_responses(400, 401, 403))
async def search(body: SearchRequest, service: ServiceDep, access: ReadAccess) -> SearchResponse:
    """Retrieval only: the ``max_sources`` best documents (hybrid dense + BM25, one entry per
    document) with the lines that best answer the question. Same filters as ``/v1/ask``;
    a key is needed when keys are configured, unless ``public_reads``; only documents the key
    may read are searched. It does not wait for the generation queue. Errors: 400 invalid request."""
    t0 = time.perf_counter()
    flt = body.filters.to_search_filter() if body.filters else None
    try:
        sources = await use_cases.search(service, body.question, body.max_sources, flt, access)
    except ValueError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc
    return SearchResponse(sources=[SourceOut.from_source(s) for s in sources],
                          retrieval_ms=round((time.perf_counter() - t0) * 1000, 2))
