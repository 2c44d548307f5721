"""``GET /v1/index`` and ``POST /v1/index/reindex``: the dense index and its rebuild."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class RebuildOut(BaseModel):
    """The latest rebuild of the dense index this server started (``POST /v1/index/reindex``)."""

    running: bool
    done: int = Field(description="chunks handled so far")
    total: int = Field(description="chunks in all (0 until counted)")
    started_at: datetime
    finished_at: datetime | None = None
    error: str | None = Field(None, description="why it failed (run it again to resume)")


class IndexStatus(BaseModel):
    """``GET /v1/index``, ``POST /v1/index/reindex``: whether dense search works, and the latest rebuild."""

    dense_index: Literal["ok", "degraded"]
    detail: str | None = Field(None, description="the damaged file, or the unfinished rebuild, and what repairs it")
    chunks: int = Field(description="chunks the store keeps (what a rebuild embeds)")
    rebuild: RebuildOut | None = None
