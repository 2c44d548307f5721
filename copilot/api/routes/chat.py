"""OpenAI-compatible ``POST /v1/chat/completions``.

Retrieval runs on the last (user) message; earlier user/assistant messages become the
history, and system (or developer) messages are added to OpsCopilot's instructions, within
the prompt budget. With ``use_context: false`` nothing is retrieved: the model answers the
messages as sent (for a chain that brings its own context). ``tools`` are accepted and
never called (Open WebUI sends them by default); a ``tool_choice`` that forces a call is a 400.
The numbered sources come back in the ``sources`` extension field (on the response, or on the
streamed chunk that carries ``finish_reason``) and, with
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
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from fastapi import APIRouter, HTTPException, Request
from sse_starlette import EventSourceResponse

from copilot.api import generation
from copilot.api.dependencies import AskAccess, QuestionsDep, ServiceDep, SettingsDep
from copilot.api.openai_common import answer_footer, chat_question, error_event
from copilot.api.openapi import error_responses, streamed
from copilot.api.schemas.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, ChunkChoice, Delta
from copilot.api.schemas.openai import Usage, finish_reason
from copilot.api.schemas.sources import sources_out, trust_fields
from copilot.config import Settings
from copilot.serving.question_job import GenerationFailedError

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1", tags=["openai"])

ERRORS = error_responses(400, 401, 403, 404, 413, 500, 502, 503)
STREAMED = streamed("`chat.completion.chunk` objects (the last with `finish_reason` carries the extensions), "
                    "then `[DONE]`", 'data: {"object": "chat.completion.chunk", "choices": [{"delta": '
                    '{"content": "Restart"}}], ...}\n\ndata: [DONE]\n\n')

@router.post("/chat/completions", response_model=ChatCompletion, responses={**ERRORS, **STREAMED})
async def chat_completions(body: ChatCompletionRequest, request: Request, settings: SettingsDep,
                           service: ServiceDep, questions: QuestionsDep,
                           access: AskAccess) -> ChatCompletion | EventSourceResponse:
    """Answer the last user message over the logbooks and tickets (OpenAI chat format).

    Errors: 400 invalid request or a parameter the server does not implement (``n`` > 1,
    ``logprobs``, a forced tool call, ``response_format`` other than text; named in
    ``error.param``; ``context_length_exceeded`` for messages over the prompt budget), 404
    unknown model, 503 queue full (with Retry-After, which the ``openai`` client honours).
    """
    started = time.perf_counter()
    names = {"max_new_tokens": body.budget_param, "prompt": "messages"}
    question = chat_question(body, service, names, access)
    run = generation.start(request, questions, question, endpoint="chat", started=started, params=names)
    reply = Reply(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), body.model, service.fingerprint)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        # starts at once: the role chunk, then heartbeats while the question waits
        async def sse() -> AsyncIterator[dict[str, str]]:
            try:
                yield {"data": reply.chunk(choices=[ChunkChoice(delta=Delta(role="assistant", content=""),
                                                                finish_reason=None)])}
                async for item in _answer_chunks(run, settings, include_usage, reply.chunk):
                    yield item
            finally:
                run.cancel()  # no-op once finished; the client left otherwise

        return EventSourceResponse(sse(), ping=settings.heartbeat_s)

    await run.prepared()
    answer = await run.complete()
    out = sources_out(answer)
    return ChatCompletion.from_answer(answer, answer.text + answer_footer(out, answer, settings), out, id=reply.id,
                                      created=reply.created, model=body.model, system_fingerprint=reply.fingerprint)


@dataclass(frozen=True)
class Reply:
    """The fields every chunk of one completion repeats."""

    id: str
    created: int
    model: str
    fingerprint: str

    def chunk(self, **fields: Any) -> str:
        """One ``chat.completion.chunk`` as JSON, the extensions only where they apply."""
        data = ChatCompletionChunk(id=self.id, created=self.created, model=self.model,
                                   system_fingerprint=self.fingerprint, **fields).model_dump(mode="json")
        for key in ("usage", "sources", "quotes", "unverified", "not_found", "destructive", "stats"):
            if data[key] is None:
                del data[key]
        for choice in data["choices"]:
            choice["delta"] = {k: v for k, v in choice["delta"].items() if v is not None}
        return json.dumps(data)


async def _answer_chunks(run: generation.HttpRun, settings: Settings, include_usage: bool,
                         chunk: Callable[..., str]) -> AsyncIterator[dict[str, str]]:
    """The streamed answer after the role chunk: content deltas, the sources footer, the final
    chunk with the extensions, usage when asked for, ``[DONE]``; an error object instead when
    the prompt was refused or generation failed."""
    try:
        await run.prepared()
    except HTTPException as exc:  # refused while building the prompt (413), or no model
        yield error_event(exc)
        return
    try:
        async for delta in run.deltas(check_disconnect=False):
            yield {"data": chunk(choices=[ChunkChoice(delta=Delta(content=delta), finish_reason=None)])}
    except GenerationFailedError as exc:
        yield error_event(generation.failed(exc))
        return
    answer = run.answer()
    out = sources_out(answer)
    footer = answer_footer(out, answer, settings)
    if footer:
        yield {"data": chunk(choices=[ChunkChoice(delta=Delta(content=footer), finish_reason=None)])}
    yield {"data": chunk(choices=[ChunkChoice(delta=Delta(), finish_reason=finish_reason(answer))],
                         sources=out, **trust_fields(answer), stats=answer.stats)}
    if include_usage:
        yield {"data": chunk(choices=[], usage=Usage.from_answers(answer))}
    yield {"data": "[DONE]"}
