"""A question on the batch scheduler as HTTP sees it: its errors as HTTP errors.

Shared by ``/v1/ask`` and the OpenAI routes. A route checks its request once with
:func:`question` (400 naming the parameter, 413 over the prompt budget); :func:`start`
queues it (:class:`copilot.serving.question_job.QuestionQueue`; full queue → 503 with
Retry-After) and returns an :class:`HttpRun`: :meth:`HttpRun.prepared` waits for the prompt
(a late 413 from prompt building surfaces here), :meth:`HttpRun.deltas` streams the text and
:meth:`HttpRun.complete` gives the :class:`~copilot.answer.assembly.Answer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Mapping

from fastapi import HTTPException, Request, status

from copilot.answer.assembly import Answer
from copilot.answer.events import Prepared
from copilot.answer.prompting import PromptTooLongError
from copilot.answer.question import Question, QuestionRequest
from copilot.api.errors import ParameterError
from copilot.service import CopilotService
from copilot.serving import use_cases
from copilot.serving.question_job import (
    ClientLeftError,
    GenerationFailedError,
    GenerationRun,
    PromptRefusedError,
    QuestionQueue,
)
from copilot.serving.scheduler import QueueFullError
from decoding.config import GenerationSettingError


def _as_http(exc: Exception, params: Mapping[str, str] | None = None) -> HTTPException:
    """Map :meth:`CopilotService.question` / :meth:`~CopilotService.prepare` errors to 413 / 400 / 503.

    Args:
        params: the client's names, for ``error.param``: of a generation setting
            (:attr:`~decoding.config.GenerationSettingError.field`) when it differs
            (``{"max_new_tokens": "max_tokens"}``), and under ``"prompt"`` of
            the parameter holding the text (``messages``, ``prompt``, ``input``). With a
            ``"prompt"`` name (the OpenAI routes) a prompt over the budget is a 400
            ``context_length_exceeded`` naming it, as OpenAI answers; without (``/v1/ask``) a 413.
    """
    params = params or {}
    prompt = params.get("prompt", "question")
    if isinstance(exc, PromptTooLongError):
        code = status.HTTP_400_BAD_REQUEST if "prompt" in params else status.HTTP_413_CONTENT_TOO_LARGE
        return ParameterError(code, str(exc), prompt, "context_length_exceeded")
    if isinstance(exc, GenerationSettingError):
        param = params.get(exc.field, exc.field)
        return ParameterError(status.HTTP_400_BAD_REQUEST, str(exc).replace(exc.field, param, 1), param,
                              "invalid_value")
    if isinstance(exc, ValueError):  # an empty or over-long question
        return ParameterError(status.HTTP_400_BAD_REQUEST, str(exc), prompt, "invalid_value")
    return ParameterError(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc), None, "model_not_loaded")


def question(service: CopilotService, request: QuestionRequest, params: Mapping[str, str] | None = None) -> Question:
    """:meth:`CopilotService.question` with its errors as HTTP errors.

    Args:
        request: the request as the route read it (knobs under their own names).
        params: the client's parameter names (see :func:`_as_http`).
    Raises:
        HTTPException: 400 naming the parameter, 413 over the prompt budget (a 400 on the
            OpenAI routes), 503 no model.
    """
    try:
        return service.question(request)
    except (ValueError, RuntimeError) as exc:
        raise _as_http(exc, params) from exc


@dataclass
class HttpRun:
    """One queued question as an HTTP handler consumes it: the
    :class:`~copilot.serving.question_job.GenerationRun`, polling ``request`` for a disconnect,
    with its errors as HTTP errors.

    Attributes:
        params: the client's parameter names, for errors found later (see :func:`_as_http`).
    """

    run: GenerationRun
    request: Request
    params: Mapping[str, str] | None = None

    def cancel(self) -> None:
        """Stop the question (no-op once it finished)."""
        self.run.job.cancel()

    async def prepared(self) -> Prepared:
        """Wait (through the queue) until the scheduler has retrieved and built the prompt.

        Raises:
            HTTPException: 413 when prompt building refused the question, 503 without a
                model, as :func:`failed` when the job failed, 499 when the client left while waiting.
        """
        try:
            return await self.run.prepared(self.request.is_disconnected)
        except GenerationFailedError as exc:
            raise failed(exc) from exc
        except ClientLeftError as exc:
            raise HTTPException(499, str(exc)) from exc
        except PromptRefusedError as exc:
            raise _as_http(exc.reason, self.params) from exc

    def deltas(self, check_disconnect: bool = True) -> AsyncIterator[str]:
        """The answer's text deltas (after :meth:`prepared`), polling the request for a disconnect
        unless ``check_disconnect`` is off (SSE, where sse-starlette watches the connection).

        Raises:
            GenerationFailedError: the engine failed.
        """
        return self.run.deltas(self.request.is_disconnected if check_disconnect else None)

    async def complete(self) -> Answer:
        """Consume the whole answer (non-streaming handlers).

        Raises:
            HTTPException: as :func:`failed` when the engine failed.
        """
        try:
            return await self.run.complete(self.request.is_disconnected)
        except GenerationFailedError as exc:
            raise failed(exc) from exc

    def answer(self) -> Answer:
        """The answer so far (after :meth:`deltas` ended)."""
        return self.run.answer()


def failed(exc: GenerationFailedError) -> HTTPException:
    """The HTTP error for a failed generation: 500, or a model server's 502 / 503 with its ``Retry-After``
    (as gateways answer for their upstream)."""
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else None
    return HTTPException(exc.status, str(exc), headers=headers)


def start(request: Request, questions: QuestionQueue, question: Question, *, endpoint: str,
          started: float | None = None, params: Mapping[str, str] | None = None) -> HttpRun:
    """Queue ``question``'s retrieval and decoding on the scheduler.

    Args:
        request: the request being answered.
        question: checked by :func:`question`.
        endpoint: metric label (``ask``, ``chat``, ``completions`` or ``responses``).
        started: ``time.perf_counter()`` when the request arrived (for TTFT; default now).
        params: the client's parameter names, for errors found later (see :func:`question`).
    Raises:
        HTTPException: 503 when the queue is full (with ``Retry-After``; the same request resent
            takes the place reserved for it).
    """
    caller = request.headers.get("authorization") or (request.client.host if request.client else "")
    try:
        run = use_cases.submit(questions, question, endpoint=endpoint, caller=caller, started=started)
    except QueueFullError as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc),
                            headers={"Retry-After": str(exc.retry_after_s)}) from exc
    return HttpRun(run, request, params)
