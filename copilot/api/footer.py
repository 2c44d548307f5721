"""The sources footer's shape, and taking it off an earlier turn.

Chat clients show a message's content only, so the OpenAI routes end an answer with its sources,
the literals found in no source and the destructive commands
(:func:`copilot.api.openai_common.sources_footer` writes it with these headings). A client sends that
content back as history: :func:`strip_sources_footer` takes the footer off before the model reads it
again, on every route that takes history (a footer the model reads is a footer it copies, and one a
client forged would be echoed as if OpsCopilot had written it).
"""

from __future__ import annotations

import re

#: Opens the sources footer of a message's content.
FOOTER_HEADING = "\n\nSources:\n"
_FOOTER_LINE = re.compile(r"\[\d+\] .*|Not in the sources — check before running: .*|⚠ Destructive — do not run: .*")
#: Opens the footer's list of literals found in no source.
UNVERIFIED_HEADING = "\nNot in the sources — check before running: "
#: Opens the footer's list of destructive commands in the answer or the evidence shown.
DESTRUCTIVE_HEADING = "\n⚠ Destructive — do not run: "


def strip_sources_footer(text: str) -> str:
    """``text`` without a trailing sources footer (as :func:`copilot.api.openai_common.sources_footer` writes it)."""
    at = text.rfind(FOOTER_HEADING)
    if at < 0:
        return text
    tail = text[at + len(FOOTER_HEADING):].strip("\n").split("\n")
    return text[:at] if tail and all(_FOOTER_LINE.fullmatch(line) for line in tail) else text
