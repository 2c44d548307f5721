"""What kind of line answers a question: an action, an error string, a value or a location.

Operations questions ask for a few kinds of answer, and the line that gives it has a shape an
operator recognises: "Which command drained …?" is answered by a line that *does* something
(``Started drain: eos fs config 1187 configstatus=drain``), not by the line that states the
problem in the question's own words; "What error did … log?" by a line that quotes an error;
"How much refrigerant …?" by a line holding a measured value; "Where do the quotas live?" by
a path. This is answer-type matching as in classic question answering (the expected answer
type of TREC QA systems, e.g. Li & Roth 2002, "Learning Question Classifiers"), written as a
handful of rules over the question and the evidence unit.

:func:`question_kinds` gives the kinds a question asks for (none for a why / what-happened
question), :func:`unit_kinds` the kinds a unit of evidence holds, and :func:`kind_match` whether
they meet; :mod:`copilot.search.highlights` raises a matching unit as far as it is relevant to the
question by itself, so a line is never promoted for its shape alone.
"""

from __future__ import annotations

import re

from copilot.search.literals import COMMAND_WORDS

ACTION, ERROR, VALUE, PLACE = "action", "error", "value", "place"

_ASKS: dict[str, re.Pattern[str]] = {
    ACTION: re.compile(
        r"\b(?:command|cmds?|commands|fix(?:ed|es)?|resolved?|workaround|how (?:did|was|were|do|does|to|can)\b"
        r"|what (?:was|were) (?:done|run|changed|added)|what did \w+(?: \w+){0,3} (?:do|change|set|add|run|use)"
        r"|setting|config(?:uration)? change|parameter|option|flag|changed|added|raised|lowered|set to"
        r"|restart(?:ed)?|rolled back|roll back|generated?|creates?|enabled?|drain(?:ed|ing)?|freed|repack"
        r"|sorted|solved|cured|did the trick|(?:what|which) (?:cmd|command|change)|in the end|eventually|for good)\b",
        re.IGNORECASE),
    ERROR: re.compile(r"\b(?:error|errors|message|logged|log|logs|said|say|says|printed|complain(?:ed|s)?"
                      r"|exception|traceback|reason string|status code|alarm|alert)\b", re.IGNORECASE),
    VALUE: re.compile(r"\b(?:how (?:much|many|big|long|large|high|low|fast|old|often)|what (?:level|value|size|rate|"
                      r"temperature|voltage|power|percentage|version|number|threshold|limit|load|serial)|which "
                      r"(?:ticket|case|downtime|id|number|version|battery|block|fuse|port|vid|tape|drive|change)"
                      r"|at what|until when|valid until|expir(?:e|es|y)|not ?after|serial|use%|avail|free\w*|left on)\b"
                      r"|%\s?use\b", re.IGNORECASE),
    PLACE: re.compile(r"\b(?:where|which (?:file|path|directory|folder)|what (?:file|path|directory|folder))\b",
                      re.IGNORECASE),
}

_HOLDS: dict[str, re.Pattern[str]] = {
    ACTION: re.compile(
        r"\b(?:fixed|fix(?:ed)? with|set|added|changed|raised|lowered|increased|decreased|restarted|started|ran|"
        r"deployed|replaced|created?|issued|enabled|disabled|downgraded?|upgraded|rolled back|reverted|freed|"
        r"cleared|drained|moved|moving|topped up|applied|executed|workaround|solution|resolved (?:by|with)|copied|"
        r"installed|reinstalled|re-?issued|regenerated|generated|reset|rebooted|killed|deleted|removed|mounted|"
        r"unmounted|reseated|swapped|steps?)\b"
        r"|\$ |# |> |`[^`]+`"
        rf"|\b(?:{COMMAND_WORDS}|ssh|for|echo|cp|mv|ln|chmod|chown|ping|copy|"
        r"interface|ALTER|DELETE|UPDATE|INSERT|SET)\s+\S+", re.IGNORECASE),
    ERROR: re.compile(r"\b(?:ERROR|FATAL|CRITICAL|WARN(?:ING)?|Exception|Traceback|failed|failure|cannot|can't|"
                      r"unable|denied|refused|timed? ?out|not found|no such|too many|exceeded|invalid|"
                      r"error)\b|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\[\d{3,5}\]|\b\w+\[\d+\]:|\"[^\"]{12,}\""),
    VALUE: re.compile(r"\b\d+(?:[.,]\d+)?\s?(?:%|[kMGTP]i?B|dBm|[AVW]|kVA|kW|bar|kg|°C|s|ms|min|h|TB|GB)\b"
                      r"|\b(?:not ?after|not ?before|expires?|serial)\b\s*[=:]?\s*\S"
                      r"|\b[A-Z]{2,}[-_]?\d{3,}(?:-\d+)*\b|\b\d{1,3}(?:,\d{3})+\b|\b(?:bloc|block|fuse|port|ticket)\s+\S*\d"),
    PLACE: re.compile(r"(?:^|[\s:=(\"'`])(?:/[\w.@+{}*-]+){2,}"),
}


def question_kinds(question: str) -> frozenset[str]:
    """The kinds of answer ``question`` asks for: a subset of ``{"action", "error", "value",
    "place"}``; empty for a why / what-happened question (no kind is preferred then)."""
    return frozenset(kind for kind, pattern in _ASKS.items() if pattern.search(question))


def unit_kinds(unit: str) -> frozenset[str]:
    """The kinds of answer evidence unit ``unit`` (one line or sentence) holds."""
    return frozenset(kind for kind, pattern in _HOLDS.items() if pattern.search(unit))


def kind_match(asked: frozenset[str], unit: str) -> float:
    """1.0 when ``unit`` holds a kind of answer that was ``asked`` for, else 0.0 (only the asked
    kinds are looked for: this runs on every unit of every question's sources)."""
    return 1.0 if any(_HOLDS[kind].search(unit) for kind in asked) else 0.0
