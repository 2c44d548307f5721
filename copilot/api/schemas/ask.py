"""``POST /v1/ask``: the request and the answer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from copilot.access import FULL_ACCESS, Access
from copilot.answer.assembly import Answer
from copilot.answer.prompting import ChatTurn
from copilot.answer.question import QuestionRequest
from copilot.api.footer import strip_sources_footer
from copilot.api.schemas.common import Bool, GenerationKnobs, Int
from copilot.api.schemas.sources import DestructiveOut, QuoteOut, SourceOut, UnverifiedOut, sources_out, trust_fields
from copilot.search.filters import Filters, Text


class HistoryMessage(BaseModel):
    """An earlier turn of the conversation."""

    role: Literal["user", "assistant"]
    content: Text = Field(max_length=20_000)


class AskRequest(GenerationKnobs):
    """``POST /v1/ask``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"question": "How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?"},
        {"question": "Which command restarted dc-pool-07?", "max_sources": 3, "stream": True,
         "filters": {"doc_types": ["elog", "shiftlog"], "since": "2026-01-01"}}]})

    question: Text = Field(min_length=1, description="the operator's question")
    max_sources: Int | None = Field(None, ge=1, le=100, description="source documents to retrieve and show "
                                    "(default: the max_sources setting, else the prompt style's)")
    top_k: Int | None = Field(None, ge=1, le=100, deprecated=True, description="deprecated name of max_sources")
    max_new_tokens: Int | None = Field(None, ge=0, description="answer budget in tokens (default: the "
                                       "max_new_tokens setting; at most max_new_tokens_cap); 0 = retrieval "
                                       "only: the sources and their evidence lines with an empty answer")
    stream: Bool = Field(False, description="Server-Sent Events: deltas, then one final event")
    filters: Filters | None = None
    history: list[HistoryMessage] = Field(default_factory=list, max_length=50)

    @model_validator(mode="before")
    @classmethod
    def _one_name(cls, data: Any) -> Any:
        """``top_k`` (deprecated) is read as ``max_sources``."""
        if isinstance(data, dict) and data.get("top_k") is not None:
            if data.get("max_sources") is not None and data["max_sources"] != data["top_k"]:
                raise ValueError("max_sources and its deprecated name top_k disagree; send max_sources only")
            data = {**data, "max_sources": data["top_k"]}
        return data

    def question_request(self, access: Access = FULL_ACCESS) -> QuestionRequest:
        """The request for :meth:`copilot.service.CopilotService.question`, every knob under its own name."""
        return QuestionRequest(self.question, max_sources=self.max_sources,
                               flt=self.filters.to_search_filter() if self.filters else None,
                               history=tuple(ChatTurn(m.role, strip_sources_footer(m.content) if m.role == "assistant"
                                                      else m.content) for m in self.history), access=access,
                               generation=self.knobs(self.max_new_tokens))


class AskResponse(BaseModel):
    """``POST /v1/ask`` (non-streaming): ``[n]`` in ``answer`` cites ``sources[n-1]``."""

    answer: str
    sources: list[SourceOut]
    cited: list[int] = Field(description="source numbers the answer cites, in order of first citation")
    supported: list[int] = Field(default_factory=list, description="source numbers that hold the answer's quoted "
                                 "literals, in order of first quote (the citations by support)")
    quotes: list[QuoteOut] = Field(default_factory=list, description="literals of the answer found in a source")
    unverified: list[UnverifiedOut] = Field(default_factory=list, description="literals of the answer found in no "
                                            "source: not in the sources, check before running")
    not_found: bool = Field(False, description="the sources do not answer the question: the answer says so and "
                            "lists the closest entries (stats.grounding.reason says why)")
    destructive: list[DestructiveOut] = Field(default_factory=list, description="destructive commands in the "
                                              "answer: never run them as they are")
    stats: dict[str, Any]

    @classmethod
    def from_answer(cls, answer: Answer) -> "AskResponse":
        """The response for a finished answer."""
        return cls(**ask_fields(answer))


def ask_fields(answer: Answer) -> dict[str, Any]:
    """The :class:`AskResponse` of an answer as JSON values (the data of ``/v1/ask``'s streamed
    ``done`` event)."""
    return {"answer": answer.text, "sources": [s.model_dump() for s in sources_out(answer)], "cited": answer.cited,
            "supported": answer.supported, **trust_fields(answer), "stats": answer.stats}
