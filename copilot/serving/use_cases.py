"""The two things every surface does — search the records, and answer a question from them —
as the web routes (``/v1/search``, ``/v1/ask``), the MCP tools and the alert receiver call them.

A surface turns its own request into a :class:`~copilot.answer.question.QuestionRequest` (or a
search's question, filter and access) and its errors into its own (an HTTP status, an MCP tool
error, an alert's stored error); what is searched and how the answer is made is here, once.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

from copilot.access import Access
from copilot.answer.assembly import Answer
from copilot.answer.question import Question, QuestionRequest
from copilot.search.sources import Source
from copilot.service import CopilotService
from copilot.serving.question_job import Disconnected, GenerationRun, QuestionQueue
from copilot.serving.reservations import ReservationKey
from ingestion.documents import SearchFilter


async def search(service: CopilotService, question: str, max_sources: int | None, flt: SearchFilter | None,
                 access: Access) -> list[Source]:
    """Retrieval only, off the event loop: the best documents for ``question`` with their evidence
    lines (no model call, no queue).

    Args:
        max_sources: documents to return (None: the settings' default).
        flt: the request's filters (None: none).
        access: what the caller may read; nothing else is searched.
    Raises:
        ValueError: an empty or over-long question, or a bad filter.
    """
    return await asyncio.to_thread(service.search, question, max_sources, flt, access)


def reservation_key(caller: str, endpoint: str, question: Question) -> ReservationKey:
    """Who asked what, for a reservation (:mod:`copilot.serving.reservations`): the caller (its
    credentials, else its address) and the checked question at ``endpoint`` — the same request
    resent has the same key. SHA-256 hex digests (the caller is never kept)."""
    owner = hashlib.sha256(caller.encode()).hexdigest()
    return ReservationKey(owner, hashlib.sha256(f"{owner}\0{endpoint}\0{question!r}".encode()).hexdigest())


def submit(queue: QuestionQueue, question: Question, *, endpoint: str, caller: str,
           started: float | None = None) -> GenerationRun:
    """Queue a checked question's retrieval and decoding on the scheduler (on the event loop).

    Args:
        question: checked by :meth:`copilot.service.CopilotService.question`.
        endpoint: the metric label (``ask``, ``chat``, ``mcp``, ``alerts``, ...).
        caller: who asks (credentials or address), for the reservation key.
        started: ``time.perf_counter()`` when the request arrived (for the TTFT; default now).
    Raises:
        copilot.serving.scheduler.QueueFullError: the queue is full.
    """
    submitted = time.perf_counter()
    return queue.submit(question, endpoint, reservation_key(caller, endpoint, question), started or submitted)


async def ask(queue: QuestionQueue, request: QuestionRequest, *, endpoint: str, caller: str,
              disconnected: Disconnected | None = None) -> Answer:
    """The whole answer to ``request``, through the batch scheduler like every other question:
    retrieval, the prompt, exact decoding, then the checks (quotes, unverified literals, "not
    found", destructive commands).

    Args:
        endpoint, caller: as :func:`submit`.
        disconnected: polled while waiting; the question is cancelled when it answers True.
    Raises:
        ValueError: a bad question or generation knob (:class:`~copilot.answer.prompting.PromptTooLongError`
            over the prompt budget, :class:`~decoding.config.GenerationSettingError` naming the knob).
        RuntimeError: no model is loaded.
        copilot.serving.scheduler.QueueFullError: the queue is full.
        copilot.serving.question_job.PromptRefusedError: prompt building refused the question.
        copilot.serving.question_job.GenerationFailedError: the engine (or the model server) failed.
        copilot.serving.question_job.ClientLeftError: ``disconnected`` said the caller left.
    """
    run = submit(queue, queue.service.question(request), endpoint=endpoint, caller=caller)
    await run.prepared(disconnected)
    return await run.complete(disconnected)
