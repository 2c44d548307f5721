"""Timestamp parsing for the formats found in ops sources, and the metadata fields built from them.

Accepted: ISO 8601 (``2026-01-20T06:04:11.000+0100``, ``2026-01-20 06:04``, dates),
RFC 2822 (ELOG ``Mon, 12 Jan 2026 08:14:03 +0100``), ``20/01/2026 06:04`` (day first),
Jira's export format ``01/Mar/24 10:15 AM`` (``dd/MMM/yy h:mm a``; English month names),
epoch seconds / milliseconds (int or digit string), and datetime/date objects (YAML).
Naive times are read in the loader's default time zone (UTC unless configured).
"""

from __future__ import annotations

import datetime as dt
import email.utils
import re
from zoneinfo import ZoneInfo

_DAY_FIRST = ("%d/%m/%Y %H:%M:%S", "%d/%m/%Y %H:%M", "%d/%m/%Y", "%d.%m.%Y %H:%M:%S", "%d.%m.%Y %H:%M", "%d.%m.%Y")
_EXTRA = ("%Y/%m/%d %H:%M:%S", "%Y/%m/%d %H:%M", "%Y/%m/%d")
_JIRA = ("%d/%b/%y %I:%M %p", "%d/%b/%Y %I:%M %p", "%d/%b/%y %H:%M", "%d/%b/%y")


def get_tz(name: str | None) -> dt.tzinfo:
    """Return a tzinfo for an IANA name (``None``/``"UTC"`` -> UTC).

    Raises:
        zoneinfo.ZoneInfoNotFoundError: unknown zone name.
    """
    if not name or name.upper() == "UTC":
        return dt.timezone.utc
    return ZoneInfo(name)


def parse_timestamp(value: object, default_tz: dt.tzinfo = dt.timezone.utc) -> dt.datetime | None:
    """Parse ``value`` into an aware datetime, or None when empty/unparseable.

    Args:
        value: string, int/float epoch (seconds, or milliseconds if > 1e11), date or datetime.
        default_tz: zone assumed for naive values.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=default_tz)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=default_tz)
    if isinstance(value, (int, float)):
        seconds = float(value) / 1000.0 if abs(value) > 1e11 else float(value)
        return dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc)
    text = str(value).strip()
    if not text:
        return None
    if re.fullmatch(r"\d{9,13}", text):
        return parse_timestamp(int(text), default_tz)
    parsed: dt.datetime | None = None
    iso = text.replace("Z", "+00:00") if text.endswith("Z") else text
    try:
        parsed = dt.datetime.fromisoformat(iso)
    except ValueError:
        parsed = None
    if parsed is None:
        try:
            parsed = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            parsed = None
    if parsed is None:
        for fmt in _DAY_FIRST + _EXTRA + _JIRA:
            try:
                parsed = dt.datetime.strptime(text, fmt)
                break
            except ValueError:
                continue
    if parsed is None:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=default_tz)


def time_fields(name: str, value: object, default_tz: dt.tzinfo = dt.timezone.utc) -> dict[str, int | str | None]:
    """Metadata pair for one timestamp: ``{f"{name}_ts": epoch seconds (int), name: ISO string}``.

    Unparseable or empty values give ``{f"{name}_ts": None, name: <raw string or None>}``
    so the original text is kept.
    """
    parsed = parse_timestamp(value, default_tz)
    if parsed is None:
        raw = None if value is None or str(value).strip() == "" else str(value).strip()
        return {f"{name}_ts": None, name: raw}
    return {f"{name}_ts": int(parsed.timestamp()), name: parsed.isoformat()}
