"""OpenAI-compatible ``POST /v1/chat/completions`` and ``GET /v1/models``.

Retrieval runs on the last (user) message; earlier user/assistant messages become the
history. The numbered passages come back in the ``sources`` extension field (on the
response, or on the streamed chunk that carries ``finish_reason``).
"""

from __future__ import annotations

import json
import time
import uuid

from fastapi import APIRouter, Depends, HTTPException, Request, status
from sse_starlette import EventSourceResponse

from copilot.api import generation
from copilot.config import Settings
from copilot.api.dependencies import ask_auth, get_metrics, get_service, get_settings, get_worker
from copilot.api.generation import GenerationFailedError
from copilot.api.metrics import Metrics
from copilot.api.openai_schemas import (AssistantMessage, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest,
                                    Choice, ChunkChoice, Delta, ModelCard, ModelList, OpenAIError, Usage)
from copilot.prompting import ChatTurn
from copilot.api.schemas import SourceOut
from copilot.service import CopilotService
from copilot.api.worker import GenerationWorker

router = APIRouter(prefix="/v1", tags=["openai"])

ERRORS = {code: {"model": OpenAIError} for code in (401, 403, 404, 413, 422, 500, 503)}


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
                           worker: GenerationWorker = Depends(get_worker),
                           metrics: Metrics = Depends(get_metrics)):
    """Answer the last user message over the logbooks and tickets (OpenAI chat format).

    Errors: 404 unknown model, 413 question over the prompt budget, 422 invalid request
    (last message not the user's, non-text content, budget over the cap), 503 queue full
    (with Retry-After, which the ``openai`` client honours).
    """
    started = time.perf_counter()
    if body.model not in served_models(settings):
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"the model {body.model!r} does not exist; use one of {served_models(settings)}")
    try:
        question = body.messages[-1].text()
        history = [ChatTurn(m.role, m.text()) for m in body.messages[:-1] if m.role in ("user", "assistant")]
        config = service.generation_config(body.budget, temperature=body.temperature or 0.0,
                                           top_p=body.top_p if body.top_p is not None else 1.0, seed=body.seed,
                                           stop_strings=body.stop_strings)
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    run = generation.start(request, service, worker, metrics, question, endpoint="chat", started=started,
                           top_k=body.top_k, config=config, history=history,
                           flt=body.filters.to_search_filter() if body.filters else None)
    prepared = await run.prepared(request)
    sources = prepared.prompt.sources
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())

    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        def chunk(**fields) -> str:
            data = ChatCompletionChunk(id=completion_id, created=created, model=body.model, **fields) \
                .model_dump(mode="json")
            for key in ("usage", "sources", "stats"):  # extension fields only where they apply
                if data[key] is None:
                    del data[key]
            for choice in data["choices"]:
                choice["delta"] = {k: v for k, v in choice["delta"].items() if v is not None}
            return json.dumps(data)

        async def sse():
            yield {"data": chunk(choices=[ChunkChoice(delta=Delta(role="assistant", content=""),
                                                      finish_reason=None)])}
            try:
                async for delta in run.deltas(request, check_disconnect=False):
                    yield {"data": chunk(choices=[ChunkChoice(delta=Delta(content=delta), finish_reason=None)])}
            except GenerationFailedError as exc:
                yield {"data": OpenAIError.model_validate(
                    {"error": {"message": str(exc), "type": "server_error"}, "detail": str(exc)}).model_dump_json()}
                return
            outcome = run.outcome()
            yield {"data": chunk(choices=[ChunkChoice(delta=Delta(), finish_reason=_finish_reason(outcome.finish_reason))],
                                 sources=_sources(sources, outcome), stats=outcome.stats)}
            if include_usage:
                yield {"data": chunk(choices=[], usage=_usage(outcome))}
            yield {"data": "[DONE]"}

        return EventSourceResponse(sse())

    outcome = await run.complete(request)
    return ChatCompletion(id=completion_id, created=created, model=body.model,
                          choices=[Choice(message=AssistantMessage(content=outcome.text),
                                          finish_reason=_finish_reason(outcome.finish_reason))],
                          usage=_usage(outcome), sources=_sources(sources, outcome), stats=outcome.stats)


def _usage(outcome: generation.Outcome) -> Usage:
    return Usage(prompt_tokens=outcome.prompt_tokens, completion_tokens=outcome.completion_tokens,
                 total_tokens=outcome.prompt_tokens + outcome.completion_tokens)
