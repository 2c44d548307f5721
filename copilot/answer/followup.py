"""Follow-up questions resolved against the conversation: "and on dcpool-19?" after "Which command
restarted dcpool-07?" is searched as "Which command restarted dcpool-19?".

Retrieval, the "not found" check and the prompt's question need a question that stands alone;
an operator's second turn often does not. The standard fix in conversational search is query
rewriting (TREC CAsT's "conversational query reformulation"); an LLM call would cost a second
generation per turn on a CPU, so this rewrite is rule-based and cheap:

- a turn is a *follow-up* when it is short (at most :data:`MAX_FOLLOWUP_WORDS` words), or starts
  like one ("and", "what about", "same for", ...), or names no subject of its own and is short
  (:data:`MAX_UNNAMED_WORDS`) or points back ("that", "it", "the same");
- an elliptical follow-up that swaps a subject ("and on dc-pool-19?", "CH-2 on the 20th?")
  becomes the previous question with each entity it names (a host, a ticket, an error code, a
  day: :func:`copilot.answer.grounding.question_entities`) put in place of the previous question's
  entity of the same kind (or, when each names one, the one for the other), a bare day ("the
  20th") in place of the previous date's day, and its other words added;
- one that asks something new of the same subject ("exact rebuild command?", "how were the held
  jobs let go?") is kept, followed by ``(follow-up to: <previous question>)``: the search and the
  model see both, the asked part first;
- a longer one that names its own subject (an entity, ``UPS-A``, ``FNAL``) is left as asked.

Chosen on the sample and site2 follow-up sets (10 two-turn cases each); measured on every set
in evals/results/README.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from copilot.answer.prompting import ChatTurn
from copilot.search.entities import MONTH_NAMES, question_entities
from copilot.search.literals import token_kind

#: A turn this short (words) is read as a follow-up of the previous question.
MAX_FOLLOWUP_WORDS = 3
#: ... and so is one this short that names no entity of its own ("how big was the accounting db?").
MAX_UNNAMED_WORDS = 8
_SUBJECT = re.compile(r"(?=[\w.-]*\d)[A-Za-z][\w.-]*|[A-Z]{2,}[\w-]*|[A-Z]\w*-[A-Z0-9][\w-]*")
_BARE_DAY = re.compile(r"\b(?:on\s+)?the\s+(\d{1,2})(?:st|nd|rd|th)\b", re.IGNORECASE)
_LEADS = re.compile(r"^\W*(?:and|also|then|same|what about|how about|and what about|what of|ok,? and|"
                    r"now|but)\b", re.IGNORECASE)
_POINTS_BACK = re.compile(r"\b(?:that|it|this|those|these|the same|there|then|them|its)\b", re.IGNORECASE)
_FILLER = re.compile(r"^\W*(?:and|also|then|ok,?|now|but)\s+(?:what about|how about|what of|on|for|in|with)?\s*|"
                     r"^\W*(?:what|how) about\s+(?:on|for|in|with)?\s*|^\W*same\s+(?:for|on|with)\s+",
                     re.IGNORECASE)


def is_followup(question: str) -> bool:
    """Whether ``question`` reads as a follow-up of an earlier one (see the module docstring)."""
    words = question.split()
    if len(words) <= MAX_FOLLOWUP_WORDS or _LEADS.match(question):
        return True
    if _names_subject(question):
        return False
    return len(words) <= MAX_UNNAMED_WORDS or len(words) <= 12 and bool(_POINTS_BACK.search(question))


def _names_subject(question: str) -> bool:
    """Whether ``question`` names a subject of its own: an entity (:func:`question_entities`), or a
    name with a digit or in capitals (``UPS-A``, ``wn-b-301..318``, ``FNAL``) after its first word."""
    words = [w.strip("?.,!:;()") for w in question.split()[1:]]
    return bool(question_entities(question)) or any(_SUBJECT.fullmatch(w) for w in words)


def _previous_question(history: Sequence[ChatTurn]) -> str | None:
    return next((t.content for t in reversed(history) if t.role == "user" and t.content.strip()), None)


def _substituted(previous: str, question: str) -> tuple[str, list[str]]:
    """``previous`` with each entity ``question`` names put in place of the one of its kind, and a
    bare day ("on the 20th") put in place of the previous date's day; also the follow-up's words
    that went in."""
    new, old = question_entities(question), question_entities(previous)
    rewritten, used = previous, []
    for name in new.names:
        kind = token_kind(name)
        same_kind = [o for o in old.names if token_kind(o) == kind and o != name]
        if not same_kind and len(new.names) == len(old.names) == 1:
            same_kind = list(old.names)  # one name for one: "CH-2" for "CRAC-B2", whatever their kinds
        if same_kind:
            rewritten = rewritten.replace(same_kind[0], name)
        if name in rewritten:
            used.append(name)
    if new.dates:
        for day in old.dates:
            rewritten = rewritten.replace(day.text, new.dates[0].text)
        used += [d.text for d in new.dates if d.text in rewritten]
    elif (bare := _BARE_DAY.search(question)) and old.dates:
        day = old.dates[0]
        month = MONTH_NAMES[day.month - 1].capitalize()
        rewritten = rewritten.replace(day.text, f"{int(bare.group(1))} {month}")
        used.append(bare.group(0))
    return rewritten, used


def standalone_question(question: str, history: Sequence[ChatTurn]) -> str:
    """``question`` as a question that stands alone, given the conversation's earlier turns
    (oldest first): itself when it is no follow-up or there is no earlier user turn.

    Returns:
        For an elliptical follow-up that swaps a subject ("and on dc-pool-19?", "CH-2 on the
        20th?": at most :data:`MAX_FOLLOWUP_WORDS` words of its own), the previous user question
        with the follow-up's entities substituted and its remaining words appended; for a longer
        one that names its own subject, itself; otherwise ("exact rebuild command?", "how were
        the held jobs released?") itself followed by the previous question as its context.
    """
    previous = _previous_question(history)
    if previous is None or not is_followup(question):
        return question
    rewritten, used = _substituted(previous, question)
    rest = _FILLER.sub("", question).strip(" ?.!")
    for literal in used:
        rest = rest.replace(literal, "").strip(" ?.!,")
    if not used or len(rest.split()) > MAX_FOLLOWUP_WORDS:
        if _names_subject(question) and len(rest.split()) > MAX_FOLLOWUP_WORDS:
            return question  # it names its own subject: the previous question would mislead the search
        return f"{question.rstrip(' ?')}? (follow-up to: {previous.strip()})"
    rewritten = rewritten.rstrip(" ?")
    if rest and rest.lower() not in rewritten.lower():
        rewritten = f"{rewritten} ({rest})"
    return rewritten + "?"

