"""``POST /v1/ask``: an answer with citations, whole or as Server-Sent Events."""

from __future__ import annotations

import json
import time
from typing import AsyncIterator

from fastapi import APIRouter, HTTPException, Request
from sse_starlette import EventSourceResponse

from copilot.api import generation
from copilot.api.dependencies import AskAccess, QuestionsDep, ServiceDep
from copilot.api.openapi import error_responses, streamed
from copilot.api.schemas.ask import AskRequest, AskResponse, ask_fields
from copilot.api.schemas.sources import SourceOut
from copilot.serving.question_job import GenerationFailedError

router = APIRouter(prefix="/v1", tags=["ask"])

ERRORS = error_responses(400, 401, 403, 413, 500, 502, 503)
STREAMED = streamed("one `sources` event, `delta` events, one `done` event (or `error`)",
                    'event: sources\ndata: {"sources": [...]}\n\nevent: delta\ndata: {"text": "Restart"}\n\n'
                    'event: done\ndata: {"answer": "...", "sources": [...], "cited": [1], "stats": {...}}\n\n')


@router.post("/ask", response_model=AskResponse, responses={**ERRORS, **STREAMED})
async def ask(body: AskRequest, request: Request, service: ServiceDep, questions: QuestionsDep,
              access: AskAccess) -> AskResponse | EventSourceResponse:
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
    question = generation.question(service, body.question_request(access))
    run = generation.start(request, questions, question, endpoint="ask", started=started)

    if body.stream:  # the response starts now: heartbeats flow while the question waits in the queue
        async def sse() -> AsyncIterator[dict[str, str]]:
            try:
                async for event in _events(run):
                    yield event
            finally:
                run.cancel()  # no-op once finished; the client left otherwise

        return EventSourceResponse(sse(), ping=service.settings.heartbeat_s)

    await run.prepared()
    return AskResponse.from_answer(await run.complete())


async def _events(run: generation.HttpRun) -> AsyncIterator[dict[str, str]]:
    """The answer's SSE events: ``sources``, ``delta``s, ``done`` (or ``error``)."""
    try:
        prepared = await run.prepared()
    except HTTPException as exc:  # refused while building the prompt (413), or no model
        yield {"event": "error", "data": json.dumps({"detail": exc.detail, "status": exc.status_code})}
        return
    sources = [SourceOut.from_source(s).model_dump() for s in prepared.prompt.sources]
    yield {"event": "sources", "data": json.dumps({"sources": sources})}
    try:
        async for delta in run.deltas(check_disconnect=False):
            yield {"event": "delta", "data": json.dumps({"text": delta})}
    except GenerationFailedError as exc:
        yield {"event": "error", "data": json.dumps({"detail": str(exc), "status": exc.status})}
        return
    yield {"event": "done", "data": json.dumps(ask_fields(run.answer()))}
