"""``/v1/feedback``: ratings of answers."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import JsonDict

from copilot.api.schemas.ask import HistoryMessage
from copilot.api.schemas.common import Bool, Int
from copilot.search.filters import JSONObject, Text


class FeedbackSource(BaseModel):
    """A source the rated answer showed (as ``sources[]`` of ``POST /v1/ask`` named it)."""

    model_config = ConfigDict(extra="forbid")

    n: Int = Field(ge=1, le=1000, description="its number: [n] in the answer")
    doc_id: Text = Field(min_length=1, max_length=4096, description="the document id")
    title: Text | None = Field(None, max_length=2000)
    cited: Bool = Field(False, description="the answer cites it")


class FeedbackQuote(BaseModel):
    """A literal of the rated answer found in a source (as ``quotes[]`` of ``POST /v1/ask`` named it)."""

    model_config = ConfigDict(extra="forbid")

    literal: Text = Field(min_length=1, max_length=20_000)
    kind: Text = Field("", max_length=32, description="code | command | path | setting | error | host | ...")
    n: Int = Field(ge=1, le=1000, description="the source that holds it")
    doc_id: Text = Field(min_length=1, max_length=4096)


_FEEDBACK_EXAMPLE: JsonDict = {
    "rating": "up", "reason": "the exact command, and the right ELOG entry",
    "question": "How was the dc-pool-07 domain restarted once the RAID rebuild had finished?",
    "answer": "It was restarted with `systemctl restart dcache@dc-pool-07Domain.service` [1].",
    "history": [], "not_found": False,
    "sources": [{"n": 1, "doc_id": "logbooks/operations.elog#2", "title": "dc-pool-07 back in service", "cited": True}],
    "quotes": [{"literal": "systemctl restart dcache@dc-pool-07Domain.service", "kind": "code", "n": 1,
                "doc_id": "logbooks/operations.elog#2"}],
    "settings": {"max_sources": 3, "filters": {"doc_types": ["elog"], "since": "2026-01-01"}}}


class FeedbackRequest(BaseModel):
    """``POST /v1/feedback``: a 👍/👎 on an answer, with what was asked and answered."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_FEEDBACK_EXAMPLE]})

    rating: Literal["up", "down"] = Field(description="up: 👍 (the answer was right), down: 👎")
    reason: Text | None = Field(None, max_length=2000, description="why (optional)")
    question: Text = Field(min_length=1, max_length=20_000, description="the question the answer answers")
    answer: Text = Field(max_length=100_000, description="the answer as shown ([n] cites sources[n])")
    history: list[HistoryMessage] = Field(default_factory=list, max_length=50,
                                          description="the earlier turns the question was asked with")
    sources: list[FeedbackSource] = Field(default_factory=list, max_length=200)
    quotes: list[FeedbackQuote] = Field(default_factory=list, max_length=1000)
    not_found: Bool = Field(False, description="the answer said the sources do not answer the question")
    settings: JSONObject = Field(default_factory=dict, description="the request options the answer was asked with "
                                 "(max_sources, max_new_tokens, filters, ...), as sent to POST /v1/ask")

    @model_validator(mode="after")
    def _sources_named_once(self) -> "FeedbackRequest":
        """Every source number once; every quote names a listed source."""
        numbers = [s.n for s in self.sources]
        repeated = sorted({n for n in numbers if numbers.count(n) > 1})
        if repeated:
            raise ValueError(f"sources: the numbers {repeated} appear more than once")
        unknown = sorted({q.n for q in self.quotes} - set(numbers))
        if unknown:
            raise ValueError(f"quotes: n {unknown} names no source in sources")
        return self


class FeedbackOut(FeedbackRequest):
    """A stored rating."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [{
        **_FEEDBACK_EXAMPLE, "id": "fb-3f2a9c0d1e4b5a6c", "created": "2026-01-27T10:00:00Z",
        "model": "embedded:qwen2.5-coder-0.5b-instruct"}]})

    id: str = Field(description="fb- and 16 hex digits")
    created: datetime
    model: str | None = Field(None, description="the target model that answered (this server's at the time)")


class FeedbackCreated(BaseModel):
    """``POST /v1/feedback`` → 201."""

    id: str
    created: datetime


class FeedbackPage(BaseModel):
    """``GET /v1/feedback``: one page, newest first."""

    total: int
    offset: int
    limit: int
    feedback: list[FeedbackOut]
