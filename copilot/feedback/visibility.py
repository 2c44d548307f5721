"""Which ratings a caller may see: the use cases behind ``GET /v1/feedback`` and
``GET /v1/feedback/export``.

A key without a read scope sees every rating; a key with one sees only the ratings made under
its own read scope (the sources a rating names are what its client sent, so they cannot vouch
that its question and answer hold nothing of another scope).
"""

from __future__ import annotations

from typing import Any, Literal

from copilot.access import Access
from copilot.feedback.export import export_questions
from copilot.feedback.ratings import FeedbackRow, FeedbackTable


def visible(rows: list[FeedbackRow], access: Access) -> list[FeedbackRow]:
    """The ratings of ``rows`` that ``access`` may see (see the module docstring)."""
    if access.reads_all:
        return rows
    return [r for r in rows if r.record.get("scope") == access.partition]


def rating_page(table: FeedbackTable, rating: Literal["up", "down"] | None, offset: int, limit: int,
                access: Access) -> tuple[list[FeedbackRow], int]:
    """A page of the ratings ``access`` may see (only ``rating`` ones when set), newest first,
    and how many there are in all."""
    if access.reads_all:
        return table.page(rating, offset, limit)
    every, _ = table.page(rating, 0, 2**62)
    shown = visible(every, access)
    return shown[offset:offset + limit], len(shown)


def exported_questions(table: FeedbackTable, access: Access) -> list[dict[str, Any]]:
    """The 👍 ratings ``access`` may see as a question set (:func:`copilot.feedback.export.export_questions`)."""
    return export_questions(visible(table.all("up"), access))
