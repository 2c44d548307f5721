"""``POST /v1/ask``: an answer with citations, whole or as Server-Sent Events."""

from __future__ import annotations

import json
import time
from typing import AsyncIterator

from fastapi import APIRouter, Depends, HTTPException, Request
from sse_starlette import EventSourceResponse

from copilot.access import Access
from copilot.api import generation
from copilot.api.dependencies import ask_auth, get_metrics, get_scheduler, get_service
from copilot.api.generation import GenerationFailedError
from copilot.api.metrics import Metrics
from copilot.api.openapi import streamed
from copilot.api.scheduler import BatchScheduler
from copilot.api.schemas import AskRequest, AskResponse, ErrorResponse, SourceOut
from copilot.prompting import ChatTurn
from copilot.service import CopilotService

router = APIRouter(prefix="/v1", tags=["ask"])

ERRORS = {code: {"model": ErrorResponse} for code in (400, 401, 403, 413, 500, 503)}
STREAMED = streamed("one `sources` event, `delta` events, one `done` event (or `error`)",
                    'event: sources\ndata: {"sources": [...]}\n\nevent: delta\ndata: {"text": "Restart"}\n\n'
                    'event: done\ndata: {"answer": "...", "sources": [...], "cited": [1], "stats": {...}}\n\n')


@router.post("/ask", response_model=AskResponse, responses={**ERRORS, **STREAMED})
async def ask(body: AskRequest, request: Request, service: CopilotService = Depends(get_service),
              scheduler: BatchScheduler = Depends(get_scheduler), metrics: Metrics = Depends(get_metrics),
              access: Access = Depends(ask_auth)):
    """Answer a question from the logbooks and tickets, citing passages as [n].

    Sources are documents (one entry each, matched chunks under it) with evidence lines
    (``highlights``); a ``[n]`` the model wrote that names no source is removed
    (``stats.invalid_citations``); ``cited`` lists the sources the answer cites. Every literal
    of the answer (command, path, error string, host, ticket, value) is checked against the
    sources: ``quotes`` name where each was found (source, chunk, offsets), ``unverified``
    lists those found in none. When the sources do not answer (a named host, ticket, error or
    day in none of them, or no evidence close to the question), ``not_found`` is true and the
    answer says so and lists the closest entries, without running the model. Only documents the
    API key may read are retrieved (its scope: document types and source folders).

    With ``"stream": true`` the response is ``text/event-stream``: one ``sources`` event
    (``{"sources": [...]}``, before the answer starts), ``delta`` events (``{"text": ...}``;
    they add up to the final answer), then one ``done`` event with ``answer``, ``sources``,
    ``cited``, ``quotes``, ``unverified``, ``not_found`` and ``stats`` (or an ``error`` event with ``detail``
    if generation failed, and ``status`` when the prompt was refused after the stream began). A
    stream starts at once and carries SSE comments every ``heartbeat_s`` while the question
    waits for the batch. Errors: 400 invalid request (``error.param`` names the field), 413 question
    over the prompt budget, 503 queue full (with Retry-After) or no model.
    """
    started = time.perf_counter()
    question = generation.question(
        service, body.question, max_sources=body.max_sources, max_new_tokens=body.max_new_tokens,
        flt=body.filters.to_search_filter() if body.filters else None,
        history=[ChatTurn(m.role, m.content) for m in body.history], temperature=body.temperature,
        top_p=body.top_p, seed=body.seed, access=access, **body.logits_settings(), **body.speculation_settings())
    run = generation.start(request, service, scheduler, metrics, question, endpoint="ask", started=started)

    if body.stream:  # the response starts now: heartbeats flow while the question waits in the queue
        async def sse():
            try:
                async for event in _events(run, request):
                    yield event
            finally:
                run.job.cancel()  # no-op once finished; the client left otherwise

        return EventSourceResponse(sse(), ping=service.settings.heartbeat_s)

    prepared = await run.prepared(request)
    outcome = await run.complete(request)
    return AskResponse(answer=outcome.text, sources=_sources_out(prepared.prompt.sources, outcome.cited),
                       cited=outcome.cited, **outcome.trust(), stats=outcome.stats)


def _sources_out(sources: list, cited: list[int]) -> list[dict]:
    return [SourceOut.from_source(s, cited).model_dump() for s in sources]


async def _events(run: generation.GenerationRun, request: Request) -> AsyncIterator[dict]:
    """The answer's SSE events: ``sources``, ``delta``s, ``done`` (or ``error``)."""
    try:
        prepared = await run.prepared(request)
    except HTTPException as exc:  # refused while building the prompt (413), or no model
        yield {"event": "error", "data": json.dumps({"detail": exc.detail, "status": exc.status_code})}
        return
    sources = prepared.prompt.sources
    yield {"event": "sources", "data": json.dumps({"sources": _sources_out(sources, [])})}
    try:
        async for delta in run.deltas(request, check_disconnect=False):
            yield {"event": "delta", "data": json.dumps({"text": delta})}
    except GenerationFailedError as exc:
        yield {"event": "error", "data": json.dumps({"detail": str(exc)})}
        return
    outcome = run.outcome()
    yield {"event": "done", "data": json.dumps({"answer": outcome.text, "sources": _sources_out(sources, outcome.cited),
                                                "cited": outcome.cited, **outcome.trust(), "stats": outcome.stats})}
