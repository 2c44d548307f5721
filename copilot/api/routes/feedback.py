"""``POST /v1/feedback`` (a 👍/👎 on an answer), ``GET /v1/feedback`` (paged) and
``GET /v1/feedback/export`` (the 👍 ratings as a question set for ``copilot eval answers``).

Ratings are kept in the store's database (:class:`ingestion.stores.feedback_table.FeedbackTable`),
so every replica of a shared store sees them. Rating needs what asking needs (a key when keys
are configured, unless ``public_reads``); listing and exporting show other people's questions,
so they always need a key when keys are configured. A key with a read scope lists and exports
only the ratings made under its own read scope (a rating's sources are what its client sent,
so they cannot vouch for its question and answer).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Literal

from fastapi import APIRouter, Depends, Query, status
from fastapi.responses import Response

from copilot.access import Access
from copilot.api.dependencies import ask_auth, get_feedback, get_settings, require_api_key
from copilot.api.schemas import ErrorResponse, FeedbackCreated, FeedbackOut, FeedbackPage, FeedbackRequest
from copilot.config import Settings
from copilot.feedback_export import export_questions
from ingestion.stores.feedback_table import FeedbackRow, FeedbackTable

router = APIRouter(prefix="/v1/feedback", tags=["feedback"])

_ERRORS = {code: {"model": ErrorResponse} for code in (400, 401, 403, 413)}
EXPORT_MEDIA_TYPE = "application/x-ndjson"
_EXPORT_EXAMPLE = ('{"id": "fb-3f2a9c0d1e4b5a6c", "question": "How was the dc-pool-07 domain restarted?", '
                   '"answer_span": "systemctl restart dcache@dc-pool-07Domain.service", '
                   '"source": "logbooks/operations.elog#2", "copy": true}\n')


def _created(row: FeedbackRow) -> datetime:
    return datetime.fromtimestamp(row.created, UTC)


def readable(rows: list[FeedbackRow], access: Access) -> list[FeedbackRow]:
    """The ratings ``access`` may see: all of them for a key without a read scope; else only
    those rated under its own read scope. (The sources a rating names are what its client
    sent, so they cannot vouch that its question and answer hold nothing of another scope.)"""
    if access.reads_all:
        return rows
    return [r for r in rows if r.record.get("scope") == access.partition]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=FeedbackCreated, responses=_ERRORS)
async def add_feedback(body: FeedbackRequest, settings: Settings = Depends(get_settings),
                       table: FeedbackTable = Depends(get_feedback),
                       access: Access = Depends(ask_auth)) -> FeedbackCreated:
    """Store a 👍/👎 on an answer with its question, earlier turns, sources, quotes and the
    settings it was asked with (and the target model that answered, and the rater's read scope).

    Errors: 400 invalid body (the field is named: an unknown rating, an empty question, a quote
    naming no listed source, ...), 401/403 key, 413 body over the size limit.
    """
    record = {**body.model_dump(mode="json"), "model": settings.target_model, "scope": access.partition}
    row = await asyncio.to_thread(table.add, body.rating, record)
    return FeedbackCreated(id=row.id, created=_created(row))


@router.get("", response_model=FeedbackPage, responses=_ERRORS)
async def list_feedback(rating: Literal["up", "down"] | None = Query(None, description="only these ratings"),
                        offset: int = Query(0, ge=0, le=2**63 - 1, description="ratings to skip"),
                        limit: int = Query(50, ge=1, le=1000, description="page size"),
                        table: FeedbackTable = Depends(get_feedback),
                        access: Access = Depends(require_api_key)) -> FeedbackPage:
    """A page of the stored ratings the key may see (see the module docstring), newest first, with
    their count (a key is needed when keys are set)."""
    if access.reads_all:
        rows, total = await asyncio.to_thread(table.page, rating, offset, limit)
    else:
        every, _ = await asyncio.to_thread(table.page, rating, 0, 2**62)
        visible = readable(every, access)
        rows, total = visible[offset:offset + limit], len(visible)
    return FeedbackPage(total=total, offset=offset, limit=limit,
                        feedback=[FeedbackOut(**r.record, id=r.id, created=_created(r)) for r in rows])


@router.get("/export", response_class=Response,
            responses={**_ERRORS, 200: {"description": "one question per line (questions.jsonl)",
                                        "content": {EXPORT_MEDIA_TYPE: {"example": _EXPORT_EXAMPLE}}}})
async def export_feedback(table: FeedbackTable = Depends(get_feedback),
                          access: Access = Depends(require_api_key)) -> Response:
    """The 👍 ratings as a question set for ``copilot eval answers --questions FILE`` (the
    ``questions.jsonl`` format): a "not found" answer becomes an unanswerable question, an answer
    that quoted a source a copy question (the literal is the span to quote), any other an
    explain question. 👎 ratings and follow-ups (asked with earlier turns) are left out; see
    :mod:`copilot.feedback_export`. A key with a read scope exports the ratings it may see.
    """
    rows = await asyncio.to_thread(table.all, "up")
    lines = export_questions(readable(rows, access))
    body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    return Response(body, media_type=EXPORT_MEDIA_TYPE,
                    headers={"Content-Disposition": 'attachment; filename="feedback-questions.jsonl"'})
