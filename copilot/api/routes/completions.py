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
from typing import AsyncIterator, TypedDict

from fastapi import APIRouter, HTTPException, Request, status
from sse_starlette import EventSourceResponse

from copilot.access import FULL_ACCESS, Access
from copilot.answer.assembly import Answer
from copilot.answer.question import Question, QuestionRequest
from copilot.api import generation
from copilot.api.dependencies import AskAccess, QuestionsDep, ServiceDep, SettingsDep
from copilot.api.errors import ParameterError
from copilot.api.openai_common import check_model, error_event, served_models
from copilot.api.openapi import error_responses, streamed
from copilot.api.schemas.completions import Completion, CompletionChoice, CompletionRequest
from copilot.api.schemas.openai import UnsupportedParameterError, Usage, finish_reason
from copilot.service import CopilotService
from copilot.serving.question_job import GenerationFailedError, QuestionQueue

router = APIRouter(prefix="/v1", tags=["openai"])

#: The client's names for errors (see :func:`copilot.api.generation.question`).
NAMES = {"max_new_tokens": "max_tokens", "prompt": "prompt"}
ERRORS = error_responses(400, 401, 403, 404, 413, 500, 502, 503)
STREAMED = streamed("`text_completion` chunks (`choices[0].text` is the delta), then `[DONE]`",
                    'data: {"object": "text_completion", "choices": [{"text": " a disk"}], ...}\n\ndata: [DONE]\n\n')


class _Head(TypedDict):
    """The fields every chunk of one completion repeats."""

    id: str
    created: int
    model: str
    system_fingerprint: str


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
        except UnsupportedParameterError as exc:
            refused = exc
    if refused is not None:
        raise ParameterError(status.HTTP_400_BAD_REQUEST, str(refused), refused.param, "unsupported_parameter")
    check_model(body.model, served_models(service.settings))
    if len(prompts) > service.settings.max_batch:
        raise ParameterError(status.HTTP_400_BAD_REQUEST, f"prompt: at most {service.settings.max_batch} prompts "
                             f"per request (the batch size), got {len(prompts)}", "prompt", "invalid_value")
    knobs = body.generation_params(body.max_tokens)
    return [generation.question(service, QuestionRequest(p, mode="completion", access=access, generation=knobs), NAMES)
            for p in prompts]


def _start_all(request: Request, queue: QuestionQueue, questions: list[Question],
               started: float) -> list[generation.HttpRun]:
    """Queue every prompt; when the queue fills part way, cancel those queued (none of the
    request's prompts run) and raise its 503."""
    runs: list[generation.HttpRun] = []
    try:
        for q in questions:
            runs.append(generation.start(request, queue, q, endpoint="completions", started=started, params=NAMES))
    except HTTPException:
        for run in runs:
            run.cancel()
        raise
    return runs


@router.post("/completions", response_model=Completion, responses={**ERRORS, **STREAMED})
async def completions(body: CompletionRequest, request: Request, settings: SettingsDep, service: ServiceDep,
                      questions: QuestionsDep, access: AskAccess) -> Completion | EventSourceResponse:
    """Complete the prompt(s) (OpenAI completions format; ``stream`` gives ``text_completion``
    chunks, then ``[DONE]``).

    Errors: 400 invalid request or a parameter the server does not implement (``n``/``best_of``
    > 1, ``logprobs``, ``suffix``, token-id prompts, more prompts than ``max_batch``;
    ``context_length_exceeded`` for a prompt over the budget), 404 unknown model, 503 queue full
    (with Retry-After).
    """
    started = time.perf_counter()
    asked = completion_questions(body, service, access)
    runs = _start_all(request, questions, asked, started)
    head = _Head(id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()), model=body.model,
                 system_fingerprint=service.fingerprint)
    if body.stream:
        run, prompt = runs[0], asked[0].text
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        async def sse() -> AsyncIterator[dict[str, str]]:
            try:
                await run.prepared()
                if body.echo:
                    yield {"data": Completion(**head, choices=[CompletionChoice(text=prompt)]).model_dump_json()}
                async for delta in run.deltas(check_disconnect=False):
                    yield {"data": Completion(**head, choices=[CompletionChoice(text=delta)]).model_dump_json()}
                answer = run.answer()
                choice = CompletionChoice(text="", finish_reason=finish_reason(answer))
                yield {"data": Completion(**head, choices=[choice]).model_dump_json()}
                if include_usage:
                    usage = Usage.from_answers(answer)
                    yield {"data": Completion(**head, choices=[], usage=usage).model_dump_json()}
                yield {"data": "[DONE]"}
            except HTTPException as exc:  # refused while building the prompt (413)
                yield error_event(exc)
            except GenerationFailedError as exc:
                yield error_event(generation.failed(exc))
            finally:
                run.cancel()

        return EventSourceResponse(sse(), ping=settings.heartbeat_s)

    async def complete(run: generation.HttpRun) -> Answer:
        await run.prepared()
        return await run.complete()

    answers = await asyncio.gather(*(complete(r) for r in runs))
    return Completion.from_answers(answers, [q.text for q in asked] if body.echo else None, **head)
