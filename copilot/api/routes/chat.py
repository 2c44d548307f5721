"""OpenAI-compatible ``POST /v1/chat/completions`` and ``GET /v1/models``.

Retrieval runs on the last (user) message; earlier user/assistant messages become the
history. The numbered sources come back in the ``sources`` extension field (on the
response, or on the streamed chunk that carries ``finish_reason``) and, with
``openai_sources_footer`` (on by default), also as a footer of the message content, which
is all standard clients (Open WebUI, LangChain's ``ChatOpenAI``) show::

    <answer citing [1]>

    Sources:
    [1] Title — tickets/jira_export.json, 2026-01-20

Streamed, the footer is the last content delta. A footer in an assistant message sent
back as history is removed before it reaches the prompt. Parameters the server cannot
honour get a 400 naming them (see :meth:`ChatCompletionRequest.unsupported`).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import AsyncIterator, Callable

from fastapi import APIRouter, Depends, HTTPException, Request, status
from sse_starlette import EventSourceResponse

from copilot.api import generation
from copilot.config import Settings
from copilot.api.dependencies import ask_auth, get_metrics, get_service, get_settings, get_scheduler
from copilot.api.errors import ParameterError
from copilot.api.generation import GenerationFailedError
from copilot.api.metrics import Metrics
from copilot.api.openai_schemas import (AssistantMessage, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest,
                                    Choice, ChunkChoice, Delta, ModelCard, ModelList, OpenAIError, Usage)
from copilot.prompting import ChatTurn
from copilot.api.schemas import SourceOut
from copilot.service import CopilotService
from copilot.api.scheduler import BatchScheduler

router = APIRouter(prefix="/v1", tags=["openai"])

ERRORS = {code: {"model": OpenAIError} for code in (400, 401, 403, 404, 413, 422, 500, 503)}

#: Opens the sources footer of a message's content.
FOOTER_HEADING = "\n\nSources:\n"
_FOOTER_LINE = re.compile(r"\[\d+\] .*|Not in the sources — check before running: .*")
#: Opens the footer's list of literals found in no source.
UNVERIFIED_HEADING = "\nNot in the sources — check before running: "


def sources_footer(sources: list[SourceOut], unverified: list[dict] = ()) -> str:
    """The footer listing ``sources`` for a message's content (empty without sources): a blank
    line, ``Sources:``, then ``[n] title — source, date`` per source (title, else key, else
    document id; the date when known); then, when the answer states literals found in no
    source, a line ``Not in the sources — check before running: `a`, `b```."""
    if not sources:
        return ""
    lines = []
    for s in sources:
        title = " ".join((s.title or s.key or s.doc_id).split())
        where = s.source + (f", {s.created[:10]}" if s.created else "")
        lines.append(f"[{s.n}] {title} — {where}")
    footer = FOOTER_HEADING + "\n".join(lines)
    literals = list(dict.fromkeys(u["literal"] for u in unverified))
    if literals:
        footer += UNVERIFIED_HEADING + ", ".join(f"`{x}`" for x in literals)
    return footer


def strip_sources_footer(text: str) -> str:
    """``text`` without a trailing sources footer (as :func:`sources_footer` writes it)."""
    at = text.rfind(FOOTER_HEADING)
    if at < 0:
        return text
    tail = text[at + len(FOOTER_HEADING):].strip("\n").split("\n")
    return text[:at] if tail and all(_FOOTER_LINE.fullmatch(line) for line in tail) else text


def served_models(settings: Settings) -> list[str]:
    """Model ids a client may name: the alias and the target model's id."""
    return list(dict.fromkeys([settings.model_alias, settings.target_model]))


def _finish_reason(reason: str) -> str:
    """Engine reasons → OpenAI's: the budget is ``length``, everything else ``stop`` (the
    engine's own reason, e.g. ``repetition``, is in ``stats.finish_reason``)."""
    return "length" if reason == "length" else "stop"


def _sources(sources: list, outcome: generation.Outcome) -> list[SourceOut]:
    return [SourceOut.from_source(s, outcome.cited) for s in sources]


@router.get("/models", response_model=ModelList, responses=ERRORS, dependencies=[Depends(ask_auth)])
async def list_models(request: Request, settings: Settings = Depends(get_settings)) -> ModelList:
    """The models this server answers as (any of them gives the same answers)."""
    created = int(request.app.state.started_at)
    return ModelList(data=[ModelCard(id=m, created=created) for m in served_models(settings)])


@router.post("/chat/completions", response_model=ChatCompletion, responses=ERRORS, dependencies=[Depends(ask_auth)])
async def chat_completions(body: ChatCompletionRequest, request: Request,
                           settings: Settings = Depends(get_settings),
                           service: CopilotService = Depends(get_service),
                           scheduler: BatchScheduler = Depends(get_scheduler),
                           metrics: Metrics = Depends(get_metrics)):
    """Answer the last user message over the logbooks and tickets (OpenAI chat format).

    Errors: 400 a parameter the server does not implement (``n`` > 1, ``logprobs``, ``tools``,
    ``response_format`` other than text; named in ``error.param``),
    404 unknown model, 413 question over the prompt budget, 422 invalid request (last message
    not the user's, non-text content, budget over the cap), 503 queue full (with Retry-After,
    which the ``openai`` client honours).
    """
    started = time.perf_counter()
    refused = body.unsupported()
    if refused is not None:
        raise ParameterError(status.HTTP_400_BAD_REQUEST, str(refused), refused.param, "unsupported_parameter")
    if body.model not in served_models(settings):
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"the model {body.model!r} does not exist; use one of {served_models(settings)}")
    try:
        question = body.messages[-1].text()
        history = [ChatTurn(m.role, strip_sources_footer(m.text()) if m.role == "assistant" else m.text())
                   for m in body.messages[:-1] if m.role in ("user", "assistant")]
        config = service.generation_config(body.budget, temperature=body.temperature or 0.0,
                                           top_p=body.top_p if body.top_p is not None else 1.0, seed=body.seed,
                                           stop_strings=body.stop_strings, **body.logits_settings(),
                                           **body.speculation_settings())
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    run = generation.start(request, service, scheduler, metrics, question, endpoint="chat", started=started,
                           top_k=body.top_k, config=config, history=history,
                           flt=body.filters.to_search_filter() if body.filters else None)
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())

    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        def chunk(**fields) -> str:
            data = ChatCompletionChunk(id=completion_id, created=created, model=body.model, **fields) \
                .model_dump(mode="json")
            for key in ("usage", "sources", "quotes", "unverified", "not_found", "stats"):  # extensions where they apply
                if data[key] is None:
                    del data[key]
            for choice in data["choices"]:
                choice["delta"] = {k: v for k, v in choice["delta"].items() if v is not None}
            return json.dumps(data)

        async def sse():  # starts at once: the role chunk, then heartbeats while the question waits
            try:
                yield {"data": chunk(choices=[ChunkChoice(delta=Delta(role="assistant", content=""),
                                                          finish_reason=None)])}
                async for item in _answer_chunks(run, request, settings, include_usage, chunk):
                    yield item
            finally:
                run.job.cancel()  # no-op once finished; the client left otherwise

        return EventSourceResponse(sse(), ping=settings.heartbeat_s)

    prepared = await run.prepared(request)
    sources = prepared.prompt.sources
    outcome = await run.complete(request)
    out = _sources(sources, outcome)
    content = outcome.text + (sources_footer(out, outcome.unverified) if settings.openai_sources_footer else "")
    return ChatCompletion(id=completion_id, created=created, model=body.model,
                          choices=[Choice(message=AssistantMessage(content=content),
                                          finish_reason=_finish_reason(outcome.finish_reason))],
                          usage=_usage(outcome), sources=out, **outcome.trust(), stats=outcome.stats)


async def _answer_chunks(run: generation.GenerationRun, request: Request, settings: Settings, include_usage: bool,
                         chunk: Callable[..., str]) -> AsyncIterator[dict]:
    """The streamed answer after the role chunk: content deltas, the sources footer, the final
    chunk with the extensions, usage when asked for, ``[DONE]``; an error object instead when
    the prompt was refused or generation failed."""
    try:
        prepared = await run.prepared(request)
    except HTTPException as exc:  # refused while building the prompt (413/422), or no model
        yield {"data": OpenAIError.model_validate(
            {"error": {"message": str(exc.detail), "type": "invalid_request_error", "code": str(exc.status_code)},
             "detail": str(exc.detail)}).model_dump_json()}
        return
    try:
        async for delta in run.deltas(request, check_disconnect=False):
            yield {"data": chunk(choices=[ChunkChoice(delta=Delta(content=delta), finish_reason=None)])}
    except GenerationFailedError as exc:
        yield {"data": OpenAIError.model_validate(
            {"error": {"message": str(exc), "type": "server_error"}, "detail": str(exc)}).model_dump_json()}
        return
    outcome = run.outcome()
    out = _sources(prepared.prompt.sources, outcome)
    footer = sources_footer(out, outcome.unverified) if settings.openai_sources_footer else ""
    if footer:
        yield {"data": chunk(choices=[ChunkChoice(delta=Delta(content=footer), finish_reason=None)])}
    yield {"data": chunk(choices=[ChunkChoice(delta=Delta(), finish_reason=_finish_reason(outcome.finish_reason))],
                         sources=out, **outcome.trust(), stats=outcome.stats)}
    if include_usage:
        yield {"data": chunk(choices=[], usage=_usage(outcome))}
    yield {"data": "[DONE]"}


def _usage(outcome: generation.Outcome) -> Usage:
    return Usage(prompt_tokens=outcome.prompt_tokens, completion_tokens=outcome.completion_tokens,
                 total_tokens=outcome.prompt_tokens + outcome.completion_tokens)
