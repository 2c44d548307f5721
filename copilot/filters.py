"""Metadata filters as a user writes them (API, CLI, LangChain retriever), validated and
turned into the store's :class:`~ingestion.documents.SearchFilter`."""

from __future__ import annotations

from datetime import date, datetime, time, timezone
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from ingestion.documents import SearchFilter


def _valid_unicode(text: str) -> str:
    """Reject lone UTF-16 surrogates (valid JSON escapes, but not encodable text)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text contains an unpaired UTF-16 surrogate (invalid Unicode)") from None
    return text


#: A string that encodes to UTF-8 (what the tokenizer and the stores need).
Text = Annotated[str, AfterValidator(_valid_unicode)]
class Filters(BaseModel):
    """Metadata filters; all optional and AND-ed."""

    model_config = ConfigDict(extra="forbid")

    doc_types: list[Literal["elog", "shiftlog", "postmortem", "jira", "csv_ticket", "jsonl", "text"]] = []
    source: str | None = Field(None, description="exact source path as stored, e.g. logbooks/operations.elog")
    ticket_key: str | None = Field(None, description="ticket key or ELOG MID exactly as written")
    since: datetime | None = Field(None, description="created at or after (ISO 8601; no zone = UTC; "
                                   "a bare date = its start)")
    until: datetime | None = Field(None, description="created at or before (ISO 8601; no zone = UTC; "
                                   "a bare date = its end, so the day is included)")

    @field_validator("since", "until", mode="before")
    @classmethod
    def _bare_dates(cls, v: object, info) -> object:
        """A bare ``YYYY-MM-DD`` means the start (``since``) or the end (``until``) of that UTC day."""
        day = v if isinstance(v, date) and not isinstance(v, datetime) else None
        if isinstance(v, str) and len(v.strip()) == 10:
            try:
                day = date.fromisoformat(v.strip())
            except ValueError:
                return v  # let the datetime validation report it
        if day is None:
            return v
        return datetime.combine(day, time.max if info.field_name == "until" else time.min, timezone.utc)

    @field_validator("since", "until")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        return v.replace(tzinfo=timezone.utc) if v is not None and v.tzinfo is None else v

    @model_validator(mode="after")
    def _ordered(self) -> "Filters":
        if self.since and self.until and self.since > self.until:
            raise ValueError(f"since ({self.since.isoformat()}) is after until ({self.until.isoformat()})")
        return self

    def to_search_filter(self) -> SearchFilter:
        """The store's filter (times as epoch seconds)."""
        return SearchFilter(tuple(self.doc_types), self.source, self.ticket_key,
                            int(self.since.timestamp()) if self.since else None,
                            int(self.until.timestamp()) if self.until else None)
