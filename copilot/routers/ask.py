"""``POST /v1/ask``: an answer with citations, whole or as Server-Sent Events."""

from __future__ import annotations

import json

from fastapi import APIRouter, Depends, HTTPException, Request, status
from sse_starlette import EventSourceResponse

from copilot import generation
from copilot.dependencies import ask_auth, get_service, get_worker
from copilot.prompting import ChatTurn
from copilot.schemas import AskRequest, AskResponse, ErrorResponse, SourceOut
from copilot.service import CopilotService
from copilot.worker import GenerationWorker

router = APIRouter(prefix="/v1", tags=["ask"])

_ERRORS = {401: {"model": ErrorResponse}, 403: {"model": ErrorResponse}, 413: {"model": ErrorResponse},
           422: {"model": ErrorResponse}, 503: {"model": ErrorResponse}}


@router.post("/ask", response_model=AskResponse, responses=_ERRORS, dependencies=[Depends(ask_auth)])
async def ask(body: AskRequest, request: Request, service: CopilotService = Depends(get_service),
              worker: GenerationWorker = Depends(get_worker)):
    """Answer a question from the logbooks and tickets, citing passages as [n].

    With ``"stream": true`` the response is ``text/event-stream``: ``delta`` events
    (``{"text": ...}``), then one ``done`` event with ``sources`` and ``stats``.
    """
    try:
        config = service.generation_config(body.max_new_tokens, temperature=body.temperature, top_p=body.top_p,
                                           seed=body.seed)
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    prepared = await generation.prepare(
        service, body.question, top_k=body.top_k, config=config,
        flt=body.filters.to_search_filter() if body.filters else None,
        history=[ChatTurn(m.role, m.content) for m in body.history])
    job = generation.submit(worker, service, prepared)
    sources = [SourceOut.from_passage(p).model_dump() for p in prepared.prompt.passages]

    def final_stats(result) -> dict:
        stats = result.stats.to_dict() if result is not None else {}
        stats["retrieval_ms"] = round(prepared.retrieval_ms, 2)
        stats["finish_reason"] = result.finish_reason if result is not None else "stop"
        return stats

    if body.stream:
        async def sse():
            result = None
            async for event in generation.events(job, request):
                if event.delta:
                    yield {"event": "delta", "data": json.dumps({"text": event.delta})}
                result = event.result or result
            yield {"event": "done", "data": json.dumps({"sources": sources, "stats": final_stats(result)})}

        return EventSourceResponse(sse())

    text, result = "", None
    async for event in generation.events(job, request):
        text += event.delta
        result = event.result or result
    return AskResponse(answer=text, sources=sources, stats=final_stats(result))
