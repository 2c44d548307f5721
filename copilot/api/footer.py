"""The sources footer of an OpenAI-style message's content, and taking it off an earlier turn.

Chat clients show a message's content only, so the OpenAI routes end an answer with its sources,
the literals found in no source and the destructive commands (:func:`sources_footer`). A client sends
that content back as history: :func:`strip_sources_footer` takes the footer off before the model
reads it again, on every route that takes history (a footer the model reads is a footer it copies,
and one a client forged would be echoed as if OpsCopilot had written it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from copilot.api.schemas import SourceOut

#: Opens the sources footer of a message's content.
FOOTER_HEADING = "\n\nSources:\n"
_FOOTER_LINE = re.compile(r"\[\d+\] .*|Not in the sources — check before running: .*|⚠ Destructive — do not run: .*")
#: Opens the footer's list of literals found in no source.
UNVERIFIED_HEADING = "\nNot in the sources — check before running: "
#: Opens the footer's list of destructive commands in the answer or the evidence shown.
DESTRUCTIVE_HEADING = "\n⚠ Destructive — do not run: "


def sources_footer(sources: list[SourceOut], unverified: Sequence[Mapping[str, object]] = (),
                   destructive: Sequence[Mapping[str, object]] = ()) -> str:
    """The footer listing ``sources`` for a message's content (empty without sources): a blank
    line, ``Sources:``, then ``[n] title — source, date`` per source (title, else key, else
    document id; the date when known); then, when the answer states literals found in no
    source, a line ``Not in the sources — check before running: `a`, `b```; then, when the
    answer (``destructive``: its marks, :mod:`copilot.search.destructive`) or a source's evidence holds
    a destructive command, a line ``⚠ Destructive — do not run: `rm -rf /` [2], …`` (chat
    clients show the content only, so the warning must be in it)."""
    if not sources:
        return ""
    lines = []
    for s in sources:
        title = " ".join((s.title or s.key or s.doc_id).split())
        where = s.source + (f", {s.created[:10]}" if s.created else "")
        lines.append(f"[{s.n}] {title} — {where}")
    footer = FOOTER_HEADING + "\n".join(lines)
    literals = list(dict.fromkeys(u["literal"] for u in unverified))
    if literals:
        footer += UNVERIFIED_HEADING + ", ".join(f"`{x}`" for x in literals)
    marked = {f"`{m['command']}`": None for m in destructive}
    marked |= {f"`{m.command}` [{s.n}]": None for s in sources for m in s.destructive}
    if marked:
        footer += DESTRUCTIVE_HEADING + ", ".join(marked)
    return footer


def strip_sources_footer(text: str) -> str:
    """``text`` without a trailing sources footer (as :func:`sources_footer` writes it)."""
    at = text.rfind(FOOTER_HEADING)
    if at < 0:
        return text
    tail = text[at + len(FOOTER_HEADING):].strip("\n").split("\n")
    return text[:at] if tail and all(_FOOTER_LINE.fullmatch(line) for line in tail) else text
