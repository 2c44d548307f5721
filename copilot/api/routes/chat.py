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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from fastapi import APIRouter, HTTPException, Request, status
from sse_starlette import EventSourceResponse

from copilot.access import FULL_ACCESS, Access
from copilot.answer.assembly import Answer
from copilot.answer.prompting import ChatTurn
from copilot.answer.question import Question, QuestionRequest
from copilot.api import generation
from copilot.api.dependencies import AskAccess, QuestionsDep, ServiceDep, SettingsDep
from copilot.api.errors import ParameterError, error_body
from copilot.api.footer import DESTRUCTIVE_HEADING, FOOTER_HEADING, UNVERIFIED_HEADING, strip_sources_footer
from copilot.api.openai_schemas import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkChoice,
    Delta,
    Usage,
    finish_reason,
)
from copilot.api.openapi import error_responses, streamed
from copilot.api.routes.models import check_model, served_models
from copilot.api.schemas import SourceOut, sources_out, trust_fields
from copilot.config import Settings
from copilot.service import CopilotService
from copilot.serving.question_job import GenerationFailedError

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1", tags=["openai"])

ERRORS = error_responses(400, 401, 403, 404, 413, 500, 502, 503)
STREAMED = streamed("`chat.completion.chunk` objects (the last with `finish_reason` carries the extensions), "
                    "then `[DONE]`", 'data: {"object": "chat.completion.chunk", "choices": [{"delta": '
                    '{"content": "Restart"}}], ...}\n\ndata: [DONE]\n\n')

def sources_footer(sources: list[SourceOut], unverified: Sequence[Mapping[str, object]] = (),
                   destructive: Sequence[Mapping[str, object]] = ()) -> str:
    """The footer listing ``sources`` for a message's content (empty without sources): a blank
    line, ``Sources:``, then ``[n] title — source, date`` per source (title, else key, else
    document id; the date when known); then, when the answer states literals found in no
    source, a line ``Not in the sources — check before running: `a`, `b```; then, when the
    answer (``destructive``: its marks, :mod:`copilot.search.destructive`) or a source's evidence holds
    a destructive command, a line ``⚠ Destructive — do not run: `rm -rf /` [2], …`` (chat
    clients show the content only, so the warning must be in it)."""
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
    marked = {f"`{m['command']}`": None for m in destructive}
    marked |= {f"`{m.command}` [{s.n}]": None for s in sources for m in s.destructive}
    if marked:
        footer += DESTRUCTIVE_HEADING + ", ".join(marked)
    return footer


def answer_footer(sources: list[SourceOut], answer: Answer, settings: Settings) -> str:
    """The :func:`sources_footer` of an answer (its unverified literals and destructive commands),
    or empty with ``openai_sources_footer`` off."""
    if not settings.openai_sources_footer:
        return ""
    trust = trust_fields(answer)
    return sources_footer(sources, trust["unverified"], trust["destructive"])


def _texts(body: ChatCompletionRequest) -> list[str]:
    """Every message's text; a non-text part is a 400 naming its message."""
    texts = []
    for i, message in enumerate(body.messages):
        try:
            texts.append(message.text())
        except ValueError as exc:
            raise ParameterError(status.HTTP_400_BAD_REQUEST, f"messages.{i}.content: {exc}",
                                 f"messages.{i}.content", "invalid_value") from exc
    return texts


def chat_question(body: ChatCompletionRequest, service: CopilotService, names: dict[str, str],
                  access: Access = FULL_ACCESS) -> Question:
    """The checked question of a chat request: the last message, the earlier user and assistant
    turns as history (sources footers removed), system messages as instructions.

    Args:
        names: the client's parameter names for errors (see :func:`copilot.api.generation.question`).
        access: what the caller may read (retrieval, so the sources and their footer; the
            answer-history partition).

    Raises:
        HTTPException: 400 naming the parameter (a prompt over the budget included), 404 unknown model.
    """
    refused = body.unsupported()
    if refused is not None:
        raise ParameterError(status.HTTP_400_BAD_REQUEST, str(refused), refused.param, "unsupported_parameter")
    check_model(body.model, served_models(service.settings))
    texts = _texts(body)
    history = [ChatTurn(m.role, strip_sources_footer(t) if m.role == "assistant" else t)
               for m, t in zip(body.messages[:-1], texts) if m.role in ("user", "assistant")]
    if body.user or body.metadata:
        log.info("chat request from user %r, metadata %s", body.user, body.metadata)
    asked = QuestionRequest(texts[-1], mode="rag" if body.use_context else "chat", max_sources=body.max_sources,
                            flt=body.filters.to_search_filter() if body.filters else None, history=tuple(history),
                            instructions=body.instructions(), access=access,
                            generation=body.generation_params(body.max_new_tokens))
    return generation.question(service, asked, names)


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


def error_event(exc: HTTPException) -> dict[str, str]:
    """An SSE event carrying an OpenAI error object (a refusal after the stream began)."""
    return {"data": json.dumps(error_body(str(exc.detail), exc.status_code, getattr(exc, "param", None),
                                          getattr(exc, "code", None)))}


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
