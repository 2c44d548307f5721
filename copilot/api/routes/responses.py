"""OpenAI-compatible ``POST /v1/responses`` (text in, text out), answered as chat is.

Streamed, the events are the Responses API's: ``response.created``, ``response.in_progress``,
``response.output_item.added``, ``response.content_part.added``, ``response.output_text.delta``
per piece of text, then the ``.done`` events and ``response.completed`` (``response.incomplete``
when the answer hit ``max_output_tokens``, ``response.failed`` when generation failed).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any, AsyncIterator

from fastapi import APIRouter, HTTPException, Request, status
from pydantic import ValidationError
from sse_starlette import EventSourceResponse

from copilot.answer.assembly import Answer
from copilot.api import generation
from copilot.api.dependencies import AskAccess, QuestionsDep, ServiceDep, SettingsDep
from copilot.api.errors import ParameterError, error_body, validation_message
from copilot.api.openai_common import answer_footer, chat_question
from copilot.api.openapi import error_responses, streamed
from copilot.api.schemas.chat import ChatCompletionRequest
from copilot.api.schemas.responses import OutputMessage, OutputText, ResponseObject, ResponseRequest, ResponseUsage
from copilot.api.schemas.sources import SourceOut, sources_out, trust_fields
from copilot.config import Settings
from copilot.serving.question_job import GenerationFailedError

router = APIRouter(prefix="/v1", tags=["openai"])

ERRORS = error_responses(400, 401, 403, 404, 413, 500, 502, 503)
STREAMED = streamed("the Responses API's events, `response.created` ... `response.output_text.delta` ... "
                    "`response.completed`", 'event: response.output_text.delta\ndata: {"type": '
                    '"response.output_text.delta", "delta": "Restart", ...}\n\n')


def _chat_body(body: ResponseRequest) -> ChatCompletionRequest:
    refused = body.unsupported()
    if refused is not None:
        raise ParameterError(status.HTTP_400_BAD_REQUEST, str(refused), refused.param, "unsupported_parameter")
    try:
        return body.as_chat()
    except ValidationError as exc:  # the chat form's checks: name the Responses API's fields
        message = validation_message(list(exc.errors())).replace("messages", "input")
        raise ParameterError(status.HTTP_400_BAD_REQUEST, message, "input", "invalid_value") from exc
    except ValueError as exc:
        raise ParameterError(status.HTTP_400_BAD_REQUEST, f"input: {exc}", "input", "invalid_value") from exc


class ResponseBuilder:
    """The response object of one request, in progress or finished."""

    def __init__(self, body: ResponseRequest) -> None:
        self.body = body
        self.id = f"resp_{uuid.uuid4().hex}"
        self.message_id = f"msg_{uuid.uuid4().hex}"
        self.created = int(time.time())

    def build(self, text: str | None = None, answer: Answer | None = None,
              sources: Sequence[SourceOut] = ()) -> ResponseObject:
        """In progress (no ``answer``) or finished, with ``text`` as the output."""
        body = self.body
        fields: dict[str, Any] = {"id": self.id, "created_at": self.created, "model": body.model,
                                  "instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
                                  "temperature": body.temperature, "top_p": body.top_p, "tools": body.tools or [],
                                  "tool_choice": body.tool_choice if isinstance(body.tool_choice, str) else "auto",
                                  "metadata": body.metadata or {}}
        if answer is None:
            return ResponseObject(status="in_progress", output=[], **fields)
        cut = answer.finish_reason == "length"
        message = OutputMessage(id=self.message_id, status="incomplete" if cut else "completed",
                                content=[OutputText(text=text or "")])
        return ResponseObject(status="incomplete" if cut else "completed", output=[message],
                              incomplete_details={"reason": "max_output_tokens"} if cut else None,
                              usage=ResponseUsage.from_answer(answer), sources=list(sources), **trust_fields(answer),
                              stats=answer.stats, **fields)


def _finished(answer: Answer, settings: Settings) -> tuple[str, list[SourceOut]]:
    out = sources_out(answer)
    return answer.text + answer_footer(out, answer, settings), out


@router.post("/responses", response_model=ResponseObject, responses={**ERRORS, **STREAMED})
async def create_response(body: ResponseRequest, request: Request, settings: SettingsDep, service: ServiceDep,
                          questions: QuestionsDep, access: AskAccess) -> ResponseObject | EventSourceResponse:
    """Answer the input over the logbooks and tickets (OpenAI Responses format, text only).

    Errors: 400 invalid request or an unsupported parameter (``previous_response_id``,
    ``reasoning``, a non-text format, a forced tool call, non-text input), 404 unknown model,
    ``context_length_exceeded`` for input over the prompt budget, 503 queue full (with Retry-After).
    """
    started = time.perf_counter()
    names = {"max_new_tokens": "max_output_tokens", "prompt": "input"}
    question = chat_question(_chat_body(body), service, names, access)
    run = generation.start(request, questions, question, endpoint="responses", started=started, params=names)
    builder = ResponseBuilder(body)
    if body.stream:
        async def sse() -> AsyncIterator[dict[str, str]]:
            try:
                async for event in _events(run, builder, settings):
                    yield event
            finally:
                run.cancel()

        return EventSourceResponse(sse(), ping=settings.heartbeat_s)
    await run.prepared()
    answer = await run.complete()
    text, out = _finished(answer, settings)
    return builder.build(text, answer, out)


async def _events(run: generation.HttpRun, builder: ResponseBuilder,
                  settings: Settings) -> AsyncIterator[dict[str, str]]:
    """The Responses API's streaming events for one answer."""
    seq = 0

    def event(kind: str, **data: Any) -> dict[str, str]:
        nonlocal seq
        seq += 1
        return {"event": kind, "data": json.dumps({"type": kind, "sequence_number": seq - 1, **data})}

    where = {"item_id": builder.message_id, "output_index": 0, "content_index": 0}
    yield event("response.created", response=builder.build().model_dump(mode="json"))
    yield event("response.in_progress", response=builder.build().model_dump(mode="json"))
    item = OutputMessage(id=builder.message_id, status="in_progress")
    yield event("response.output_item.added", output_index=0, item=item.model_dump(mode="json"))
    yield event("response.content_part.added", **where, part=OutputText(text="").model_dump(mode="json"))
    try:
        await run.prepared()
        async for delta in run.deltas(check_disconnect=False):
            yield event("response.output_text.delta", **where, delta=delta, logprobs=[])
    except (HTTPException, GenerationFailedError) as exc:
        code = exc.status_code if isinstance(exc, HTTPException) else exc.status
        detail = exc.detail if isinstance(exc, HTTPException) else str(exc)
        failed = builder.build().model_copy(
            update={"status": "failed", "error": error_body(str(detail), code)["error"]})
        yield event("response.failed", response=failed.model_dump(mode="json"))
        return
    answer = run.answer()
    text, out = _finished(answer, settings)
    footer = text[len(answer.text):]
    if footer:
        yield event("response.output_text.delta", **where, delta=footer, logprobs=[])
    final = builder.build(text, answer, out)
    yield event("response.output_text.done", **where, text=text, logprobs=[])
    yield event("response.content_part.done", **where, part=OutputText(text=text).model_dump(mode="json"))
    yield event("response.output_item.done", output_index=0, item=final.output[0].model_dump(mode="json"))
    done = "response.incomplete" if final.status == "incomplete" else "response.completed"
    yield event(done, response=final.model_dump(mode="json"))
