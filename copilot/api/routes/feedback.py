"""``POST /v1/feedback`` (a 👍/👎 on an answer), ``GET /v1/feedback`` (paged) and
``GET /v1/feedback/export`` (the 👍 ratings as a question set for ``copilot eval answers``).

Ratings are kept in the store's database (:class:`copilot.feedback.ratings.FeedbackTable`),
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

from fastapi import APIRouter, Query, status
from fastapi.responses import Response

from copilot.api.dependencies import AskAccess, FeedbackDep, KeyAccess, SettingsDep
from copilot.api.openapi import error_responses
from copilot.api.schemas.feedback import FeedbackCreated, FeedbackOut, FeedbackPage, FeedbackRequest
from copilot.feedback.ratings import FeedbackRow
from copilot.feedback.visibility import exported_questions, rating_page

router = APIRouter(prefix="/v1/feedback", tags=["feedback"])

_ERRORS = error_responses(400, 401, 403, 413)
EXPORT_MEDIA_TYPE = "application/x-ndjson"
_EXPORT_EXAMPLE = ('{"id": "fb-3f2a9c0d1e4b5a6c", "question": "How was the dc-pool-07 domain restarted?", '
                   '"answer_span": "systemctl restart dcache@dc-pool-07Domain.service", '
                   '"source": "logbooks/operations.elog#2", "copy": true}\n')


def _created(row: FeedbackRow) -> datetime:
    return datetime.fromtimestamp(row.created, UTC)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=FeedbackCreated, responses=_ERRORS)
async def add_feedback(body: FeedbackRequest, settings: SettingsDep, table: FeedbackDep,
                       access: AskAccess) -> FeedbackCreated:
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
                        *, table: FeedbackDep, access: KeyAccess) -> FeedbackPage:
    """A page of the stored ratings the key may see (see the module docstring), newest first, with
    their count (a key is needed when keys are set)."""
    rows, total = await asyncio.to_thread(rating_page, table, rating, offset, limit, access)
    return FeedbackPage(total=total, offset=offset, limit=limit,
                        feedback=[FeedbackOut(**r.record, id=r.id, created=_created(r)) for r in rows])


@router.get("/export", response_class=Response,
            responses={**_ERRORS, 200: {"description": "one question per line (questions.jsonl)",
                                        "content": {EXPORT_MEDIA_TYPE: {"example": _EXPORT_EXAMPLE}}}})
async def export_feedback(table: FeedbackDep, access: KeyAccess) -> Response:
    """The 👍 ratings as a question set for ``copilot eval answers --questions FILE`` (the
    ``questions.jsonl`` format): a "not found" answer becomes an unanswerable question, an answer
    that quoted a source a copy question (the literal is the span to quote), any other an
    explain question. 👎 ratings and follow-ups (asked with earlier turns) are left out; see
    :mod:`copilot.feedback.export`. A key with a read scope exports the ratings it may see.
    """
    lines = await asyncio.to_thread(exported_questions, table, access)
    body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    return Response(body, media_type=EXPORT_MEDIA_TYPE,
                    headers={"Content-Disposition": 'attachment; filename="feedback-questions.jsonl"'})
