"""Metadata filters as a user writes them (API, CLI, LangChain retriever), validated and
turned into the store's :class:`~ingestion.documents.SearchFilter`."""

from __future__ import annotations

import re
from datetime import date, datetime, time, timezone
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ingestion.documents import SearchFilter
from ingestion.loaders.registry import DOC_TYPES


def _valid_unicode(text: str) -> str:
    """Reject lone UTF-16 surrogates (valid JSON escapes, but not encodable text)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text contains an unpaired UTF-16 surrogate (invalid Unicode)") from None
    return text


#: A string that encodes to UTF-8 (what the tokenizer and the stores need).
Text = Annotated[str, AfterValidator(_valid_unicode)]


def valid_unicode_deep(value: Any) -> Any:
    """Check every string (dict keys included) of a nested JSON value as :data:`Text` does.

    Raises:
        ValueError: a string holds an unpaired UTF-16 surrogate.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            _valid_unicode(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return value


#: A JSON object whose strings, at any depth, are all valid Unicode.
JSONObject = Annotated[dict[str, Any], AfterValidator(valid_unicode_deep)]

#: What ``since`` / ``until`` accept, named in every date error.
DATE_FORMATS = ("ISO 8601 date or date-time (2026-01-20, 2026-01-20T10:00, 2026-01-20T10:00:00+01:00), "
                "or a compact date YYYYMMDD, YYYYMMDDhhmm, YYYYMMDDhhmmss (T before the time allowed: "
                "20260120T1000); no zone = UTC")

# YYYYMMDD, then optionally [T]hhmm or [T]hhmmss, then optionally Z.
_COMPACT = re.compile(r"(\d{4})(\d{2})(\d{2})(?:T?(\d{2})(\d{2})(\d{2})?)?(Z)?", re.IGNORECASE)


def parse_compact_date(text: str) -> date | datetime | None:
    """A compact numeric date (``20260120``, ``202601201000``, ``20260120T1000``, ``20260120T100000Z``)
    as a date (no time given) or a UTC datetime; None when ``text`` has another shape.

    Raises:
        ValueError: the shape is compact but the date or time does not exist (``20261301``).
    """
    m = _COMPACT.fullmatch(text.strip())
    if m is None:
        return None
    year, month, day, hour, minute, second, _ = m.groups()
    try:
        if hour is None:
            return date(int(year), int(month), int(day))
        return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0),
                        tzinfo=timezone.utc)
    except ValueError as exc:
        raise ValueError(f"{text.strip()!r} is not a valid compact date ({exc})") from None


def _date_input(v: object, field: str) -> object:
    """Normalise one ``since``/``until`` input before pydantic's datetime parsing.

    Strings that are compact dates become dates; numbers (JSON integers or floats, and
    digit strings that are not compact dates) are refused rather than read as epoch seconds,
    since ``20260120`` would otherwise mean 1970-08-23.
    """
    if isinstance(v, bool):
        raise ValueError(f"{field}: a boolean is not a date; accepted: {DATE_FORMATS}")
    if isinstance(v, int):
        v = str(v)  # an integer is read like its digits: a compact date or nothing
    elif isinstance(v, float):
        raise ValueError(f"{field}: a number is ambiguous (epoch seconds? a compact date?); "
                         f"accepted: {DATE_FORMATS}")
    if not isinstance(v, str):
        return v
    text = v.strip()
    try:
        compact = parse_compact_date(text)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}; accepted: {DATE_FORMATS}") from None
    if compact is not None:
        return compact
    if _NUMBER.fullmatch(text):
        raise ValueError(f"{field}: {text[:40]!r} is ambiguous (epoch seconds? a compact date?); "
                         f"accepted: {DATE_FORMATS}")
    if len(text) == 10:
        try:
            return date.fromisoformat(text)
        except ValueError:
            pass
    try:
        return datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise ValueError(f"{field}: {text[:40]!r} is not a date; accepted: {DATE_FORMATS}") from None


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


class Filters(BaseModel):
    """Metadata filters; all optional and AND-ed."""

    model_config = ConfigDict(extra="forbid")

    doc_types: list[Literal[DOC_TYPES]] = []  # type: ignore[valid-type]  # the literals of the registry's types
    source: Text | None = Field(None, description="exact source path as stored, e.g. logbooks/operations.elog")
    ticket_key: Text | None = Field(None, description="ticket key or ELOG MID exactly as written")
    since: datetime | None = Field(None, description="created at or after: " + DATE_FORMATS
                                   + "; a bare date means its start")
    until: datetime | None = Field(None, description="created at or before: " + DATE_FORMATS
                                   + "; a bare date means its end, so the day is included")

    @field_validator("since", "until", mode="before")
    @classmethod
    def _dates(cls, v: object, info: ValidationInfo) -> object:
        """Read compact dates, refuse ambiguous numbers; a bare date means the start (``since``)
        or the end (``until``) of that UTC day."""
        if v is None:
            return v
        v = _date_input(v, str(info.field_name))
        if isinstance(v, date) and not isinstance(v, datetime):
            return datetime.combine(v, time.max if info.field_name == "until" else time.min, timezone.utc)
        return v

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
