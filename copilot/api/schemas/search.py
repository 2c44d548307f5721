"""``POST /v1/search``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from copilot.api.schemas.common import Int
from copilot.api.schemas.sources import SourceOut
from copilot.search.filters import Filters, Text


class SearchRequest(BaseModel):
    """``POST /v1/search``: retrieval only, no model call."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"question": "dc-pool-07 disk failure", "max_sources": 5, "filters": {"doc_types": ["jira"]}}]})

    question: Text = Field(min_length=1, description="what to look for (a question or keywords)")
    max_sources: Int | None = Field(None, ge=1, le=100, description="documents to return (default: the "
                                    "max_sources setting, else the prompt style's)")
    filters: Filters | None = None


class SearchResponse(BaseModel):
    """``POST /v1/search``: the best documents, best first, with their evidence lines."""

    sources: list[SourceOut]
    retrieval_ms: float
