"""OpenAI-compatible ``POST /v1/completions``: the prompt as sent, decoded by the same engine.

No retrieval and no chat template: the prompt is the model's whole input (LlamaIndex's
``OpenAILike`` and other completion clients bring their own context). Greedy by default,
so the text is what plain greedy decoding of the target gives. Several prompts in one
request are decoded together in the batch (non-streaming).
"""

from __future__ import annotations

import asyncio
import time
import uuid

from fastapi import APIRouter, Depends, HTTPException, Request, status
from sse_starlette import EventSourceResponse

from copilot.access import FULL_ACCESS, Access
from copilot.api import generation
from copilot.api.completion_schemas import Completion, CompletionChoice, CompletionRequest
from copilot.api.dependencies import ask_auth, get_metrics, get_scheduler, get_service, get_settings
from copilot.api.errors import ParameterError
from copilot.api.metrics import Metrics
from copilot.api.openapi import streamed
from copilot.api.routes.chat import error_event, usage
from copilot.api.routes.models import check_model, served_models
from copilot.api.scheduler import BatchScheduler
from copilot.api.schemas import ErrorResponse
from copilot.config import Settings
from copilot.question import Question
from copilot.service import CopilotService

router = APIRouter(prefix="/v1", tags=["openai"])

#: The client's names for errors (see :func:`copilot.api.generation.question`).
NAMES = {"max_new_tokens": "max_tokens", "prompt": "prompt"}
ERRORS = {code: {"model": ErrorResponse} for code in (400, 401, 403, 404, 413, 500, 503)}
STREAMED = streamed("`text_completion` chunks (`choices[0].text` is the delta), then `[DONE]`",
                    'data: {"object": "text_completion", "choices": [{"text": " a disk"}], ...}\n\ndata: [DONE]\n\n')


def completion_questions(body: CompletionRequest, service: CopilotService,
                         access: Access = FULL_ACCESS) -> list[Question]:
    """One checked ``completion`` question per prompt (no retrieval; ``access`` names the
    answer-history partition the drafter may use).

    Raises:
        HTTPException: 400 naming the parameter, 404 unknown model, 413 a prompt over the budget.
    """
    refused = body.unsupported()
    if refused is None:
        try:
            prompts = body.prompts()
        except ValueError as exc:
            refused = exc
    if refused is not None:
        raise ParameterError(status.HTTP_400_BAD_REQUEST, str(refused), refused.param, "unsupported_parameter")
    check_model(body.model, served_models(service.settings))
    if len(prompts) > service.settings.max_batch:
        raise ParameterError(status.HTTP_400_BAD_REQUEST, f"prompt: at most {service.settings.max_batch} prompts "
                             f"per request (the batch size), got {len(prompts)}", "prompt", "invalid_value")
    return [generation.question(service, p, NAMES, mode="completion", max_new_tokens=body.max_tokens,
                                access=access, **body.generation_settings()) for p in prompts]


def _start_all(request: Request, service: CopilotService, scheduler: BatchScheduler, metrics: Metrics,
               questions: list[Question], started: float) -> list[generation.GenerationRun]:
    """Queue every prompt; when the queue fills part way, cancel those queued (none of the
    request's prompts run) and raise its 503."""
    runs: list[generation.GenerationRun] = []
    try:
        for q in questions:
            runs.append(generation.start(request, service, scheduler, metrics, q, endpoint="completions",
                                         started=started, params=NAMES))
    except HTTPException:
        for run in runs:
            run.job.cancel()
        raise
    return runs


def _finish(reason: str) -> str:
    return "length" if reason == "length" else "stop"


@router.post("/completions", response_model=Completion, responses={**ERRORS, **STREAMED})
async def completions(body: CompletionRequest, request: Request, settings: Settings = Depends(get_settings),
                      service: CopilotService = Depends(get_service),
                      scheduler: BatchScheduler = Depends(get_scheduler), metrics: Metrics = Depends(get_metrics),
                      access: Access = Depends(ask_auth)):
    """Complete the prompt(s) (OpenAI completions format; ``stream`` gives ``text_completion``
    chunks, then ``[DONE]``).

    Errors: 400 invalid request or a parameter the server does not implement (``n``/``best_of``
    > 1, ``logprobs``, ``suffix``, token-id prompts, more prompts than ``max_batch``;
    ``context_length_exceeded`` for a prompt over the budget), 404 unknown model, 503 queue full
    (with Retry-After).
    """
    started = time.perf_counter()
    questions = completion_questions(body, service, access)
    runs = _start_all(request, service, scheduler, metrics, questions, started)
    head = {"id": f"cmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": body.model,
            "system_fingerprint": service.fingerprint}
    if body.stream:
        run, prompt = runs[0], questions[0].text
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        async def sse():
            try:
                await run.prepared(request)
                if body.echo:
                    yield {"data": Completion(**head, choices=[CompletionChoice(text=prompt)]).model_dump_json()}
                async for delta in run.deltas(request, check_disconnect=False):
                    yield {"data": Completion(**head, choices=[CompletionChoice(text=delta)]).model_dump_json()}
                outcome = run.outcome()
                choice = CompletionChoice(text="", finish_reason=_finish(outcome.finish_reason))
                yield {"data": Completion(**head, choices=[choice]).model_dump_json()}
                if include_usage:
                    yield {"data": Completion(**head, choices=[], usage=usage(outcome)).model_dump_json()}
                yield {"data": "[DONE]"}
            except HTTPException as exc:  # refused while building the prompt (413)
                yield error_event(exc)
            except generation.GenerationFailedError as exc:
                yield error_event(HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, str(exc)))
            finally:
                run.job.cancel()

        return EventSourceResponse(sse(), ping=settings.heartbeat_s)

    async def complete(run: generation.GenerationRun) -> generation.Outcome:
        await run.prepared(request)
        return await run.complete(request)

    outcomes = await asyncio.gather(*(complete(r) for r in runs))
    choices = [CompletionChoice(text=(q.text if body.echo else "") + o.text, index=i,
                                finish_reason=_finish(o.finish_reason))
               for i, (q, o) in enumerate(zip(questions, outcomes))]
    prompt_tokens = sum(o.prompt_tokens for o in outcomes)
    completion_tokens = sum(o.completion_tokens for o in outcomes)
    return Completion(**head, choices=choices, usage={"prompt_tokens": prompt_tokens,
                                                      "completion_tokens": completion_tokens,
                                                      "total_tokens": prompt_tokens + completion_tokens})
