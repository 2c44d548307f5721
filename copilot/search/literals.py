"""What an operator copies out of a record: commands, paths, settings, error codes, host names, values.

One home for the shape of a literal on the search side: :func:`literal_weight` (does an evidence unit
hold one?) and :data:`COMMAND_WORDS` (the operations tools whose name and an argument make a command
line), and the kind of one token (:func:`token_kind`: ticket, date, path, error code, setting, host,
name), used by the evidence scorer (:mod:`copilot.search.highlights`), the unit splitter
(:mod:`copilot.search.record`) and the answer kinds (:mod:`copilot.search.answer_kinds`). The answer
side's literal *extraction* with offsets (:mod:`copilot.answer.quotes`) checks what a model wrote, with
the same token kinds; the entities a question names (:mod:`copilot.search.entities`) are tokens of these kinds.
"""

from __future__ import annotations

import re

#: Operations tools whose name followed by an argument is a command line.
COMMAND_WORDS = (r"systemctl|sudo|yum|dnf|rpm|kubectl|eos|cta-admin|condor_\w+|scontrol|sacct|xrdcp|gfal-\w+|fts-\w+|"
                 r"voms-\w+|mysqldump|pg_\w+|rman|ip|ceph|puppet|ansible")

_LITERAL = re.compile(
    r"`[^`]+`"                                    # inline code
    r"|(?:^|\s)(?:/[\w.@+-]+){2,}"                 # a path
    r"|\b[\w.-]+\s?=\s?\S+"                       # key=value, settings
    r"|(?:^|\s)--?[a-z][\w-]*"                     # a command-line flag
    r"|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b"              # an ERROR_CODE
    r"|\b\w[\w-]*\.\w[\w-]*\.\w+"                 # a host name or dotted id
    r"|\b\d+(?:[.,]\d+)?\s?(?:%|[kMGT]i?B|dBm|[AVW]|kg|°C|s|ms|h)\b"  # a measured value
    rf"|\b(?:{COMMAND_WORDS}|dmesg)\s+\S+",
)


def literal_weight(unit: str) -> float:
    """1.0 when ``unit`` holds a literal an operator copies (command, path, setting, error
    code, host name, measured value), else 0.0."""
    return 1.0 if _LITERAL.search(unit) else 0.0


#: Quotes, brackets and sentence punctuation around a token; sentence-final characters after it.
STRIP_CHARS = "\"'“”‘’()[]{}<>,;!?*"
TRAIL_CHARS = ".:"

#: The literal kinds of one token, first match wins (:func:`token_kind`).
_KINDS: list[tuple[str, re.Pattern[str]]] = [
    ("ticket", re.compile(r"^(?:[A-Z][A-Z0-9]+-\d+|#\d{3,})$")),
    ("date", re.compile(r"^\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?$")),
    ("path", re.compile(r"^[a-z][\w+.-]*://\S+$")),  # a URL
    ("error", re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")),
    ("path", re.compile(r"^(?:~?/|\./|\.\./)[^\s/]*(?:/[^\s/]*)*[\w/]$")),
    ("path", re.compile(r"^(?=\S*[\d.-])[\w.{},*~-]+(?:/[\w.{},*~-]+)+/?$")),  # relative: logs/x.log, et-0/0/2
    ("setting", re.compile(r"^[A-Za-z_][\w.-]*=\S+$")),
    ("host", re.compile(r"^(?:\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?"  # an IPv4 address, or a dotted name
                        r"|(?=[\w.-]*[A-Za-z])[A-Za-z0-9][\w-]*(?:\.[\w-]+)*\.[\w-]{2,}(?::\d+)?)$")),
    ("name", re.compile(r"^(?=[\w@:.-]*\d)(?=[\w@:.-]*[A-Za-z])[A-Za-z][\w-]*\d[\w-]*$|^\S*@\S+$|^\w+::\w+"
                        r"|^[A-Za-z][\w-]*_[\w-]*$"  # snake_case identifiers: condor_reconfig, rx_missed_errors
                        r"|^(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}$")),  # commit and object ids
]


def token_kind(token: str) -> str | None:
    """The literal kind of one whitespace-free token (surrounding punctuation stripped), or
    ``None`` for a plain word."""
    for kind, pattern in _KINDS:
        if pattern.match(token):
            return kind
    return None


def trim_token(text: str, start: int) -> tuple[str, int]:
    """A token without surrounding quotes/brackets and sentence punctuation; its new start."""
    lead = len(text) - len(text.lstrip(STRIP_CHARS))
    text = text[lead:].rstrip(STRIP_CHARS)
    while text and text[-1] in TRAIL_CHARS:
        text = text[:-1].rstrip(STRIP_CHARS)
    return text, start + lead
