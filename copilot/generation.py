"""Running a prepared question on the generation worker from async request handlers."""

from __future__ import annotations

import asyncio
import queue
from typing import Any, AsyncIterator

from fastapi import HTTPException, Request, status

from copilot.prompting import PromptTooLongError
from copilot.service import CopilotService, Prepared
from copilot.worker import DONE, GenerationWorker, Job, QueueFullError

POLL_S = 0.25


async def prepare(service: CopilotService, question: str, **kwargs: Any) -> Prepared:
    """Retrieve and build the prompt off the event loop; bad input → 413/422."""
    try:
        return await asyncio.to_thread(service.prepare, question, **kwargs)
    except PromptTooLongError as exc:
        raise HTTPException(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, str(exc)) from exc
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc


def submit(worker: GenerationWorker, service: CopilotService, prepared: Prepared) -> Job:
    """Queue the decode; a full queue → 503 with Retry-After."""

    def run(emit, cancelled) -> None:
        for event in service.stream(prepared, cancel=cancelled):
            emit(event)

    try:
        return worker.submit(run)
    except QueueFullError as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc),
                            headers={"Retry-After": str(exc.retry_after_s)}) from exc


async def events(job: Job, request: Request) -> AsyncIterator[Any]:
    """The job's events; cancels the job when the client disconnects or the consumer stops."""
    try:
        while True:
            try:
                event = await asyncio.to_thread(job.next_event, POLL_S)
            except queue.Empty:
                if await request.is_disconnected():
                    job.cancel()
                    return
                continue
            if event is DONE:
                return
            yield event
    finally:
        job.cancel()  # no-op after completion; stops generation if we were interrupted
