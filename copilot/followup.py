"""Follow-up questions resolved against the conversation: "and on dcpool-19?" after "Which command
restarted dcpool-07?" is searched as "Which command restarted dcpool-19?".

Retrieval, the "not found" check and the prompt's question need a question that stands alone;
an operator's second turn often does not. The standard fix in conversational search is query
rewriting (TREC CAsT's "conversational query reformulation"); an LLM call would cost a second
generation per turn on a CPU, so this rewrite is rule-based and cheap:

- a turn is a *follow-up* when it is short (at most :data:`MAX_FOLLOWUP_WORDS` words), or starts
  like one ("and", "what about", "same for", ...), or points back ("that", "it", "the same");
- its standalone form is the previous question with each entity the follow-up names (a host, a
  ticket, an error code, a day: :func:`copilot.grounding.question_entities`) put in place of the
  previous question's entity of the same kind, and the follow-up's other words added.

A question that names its own subject and is long enough is left as asked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from copilot.grounding import question_entities
from copilot.prompting import ChatTurn
from copilot.quotes import token_kind

#: A turn this short (words) is read as a follow-up of the previous question.
MAX_FOLLOWUP_WORDS = 3
_LEADS = re.compile(r"^\W*(?:and|also|then|same|what about|how about|and what about|what of|ok,? and|"
                    r"now|but)\b", re.IGNORECASE)
_POINTS_BACK = re.compile(r"\b(?:that|it|this|those|these|the same|there|then|them|its)\b", re.IGNORECASE)
_FILLER = re.compile(r"^\W*(?:and|also|then|ok,?|now|but)\s+(?:what about|how about|what of|on|for|in|with)?\s*|"
                     r"^\W*(?:what|how) about\s+(?:on|for|in|with)?\s*|^\W*same\s+(?:for|on|with)\s+",
                     re.IGNORECASE)


def is_followup(question: str) -> bool:
    """Whether ``question`` reads as a follow-up of an earlier one (see the module docstring)."""
    words = question.split()
    return len(words) <= MAX_FOLLOWUP_WORDS or bool(_LEADS.match(question)) or (
        len(words) <= 12 and bool(_POINTS_BACK.search(question)) and not question_entities(question).names)


def standalone_question(question: str, history: Sequence[ChatTurn]) -> str:
    """``question`` as a question that stands alone, given the conversation's earlier turns
    (oldest first): itself when it is no follow-up or there is no earlier user turn.

    Returns:
        The previous user question with the follow-up's entities substituted by kind and
        the follow-up's remaining words appended (see the module docstring).
    """
    previous = next((t.content for t in reversed(history) if t.role == "user" and t.content.strip()), None)
    if previous is None or not is_followup(question):
        return question
    new, old = question_entities(question), question_entities(previous)
    rewritten = previous
    for name in new.names:
        kind = token_kind(name)
        same_kind = [o for o in old.names if token_kind(o) == kind and o != name]
        if same_kind:
            rewritten = rewritten.replace(same_kind[0], name)
    if new.dates:
        for day in old.dates:
            rewritten = rewritten.replace(day.text, new.dates[0].text)
    rest = _FILLER.sub("", question).strip(" ?.!")
    substituted = [n for n in new.names if n in rewritten] + [d.text for d in new.dates if d.text in rewritten]
    for literal in substituted:
        rest = rest.replace(literal, "").strip(" ?.!,")
    rewritten = rewritten.rstrip(" ?")
    if rest and rest.lower() not in rewritten.lower():
        rewritten = f"{rewritten} ({rest})"
    return rewritten + "?"
