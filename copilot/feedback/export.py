"""👍 ratings as a question set for ``copilot eval answers`` (the ``questions.jsonl`` format of
:mod:`evals.questions`: ``{"id", "question", "answer_span", "source" | "sources", "copy"}``).

A 👍 says the answer was right, so it becomes a regression question:

- an answer that said "not found" (or had no source at all): an *unanswerable* question
  (``"sources": []``; a right answer says "not found" again);
- an answer that quoted a literal from a source (a command, path, error string: the page's
  quotes): a *copy* question whose ``answer_span`` is that literal and whose ``source`` is the
  document it was found in (a quote from a cited source first);
- any other answer: an *explain* question (``"copy": false``) whose ``source`` is the first
  cited document (else the first shown).

Left out: 👎 ratings (the right answer is not known; ``GET /v1/feedback?rating=down`` lists them
with their reasons for review), and follow-up questions (asked with earlier turns: the eval
asks every question alone). A question rated 👍 several times is exported once (the latest).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from copilot.feedback.ratings import FeedbackRow


def question_record(row: FeedbackRow) -> dict[str, Any] | None:
    """The question-set line for one stored rating, or None when it cannot be one (a 👎, a follow-up)."""
    record = row.record
    if row.rating != "up" or record.get("history"):
        return None
    out: dict[str, Any] = {"id": row.id, "question": record["question"]}
    sources = record.get("sources") or []
    if record.get("not_found") or not sources:
        return {**out, "answer_span": "", "sources": [], "copy": False}
    cited = {s["n"] for s in sources if s.get("cited")}
    quotes = sorted(record.get("quotes") or [], key=lambda q: q["n"] not in cited)  # stable: cited ones first
    if quotes:
        return {**out, "answer_span": quotes[0]["literal"], "source": quotes[0]["doc_id"], "copy": True}
    first = next((s for s in sources if s["n"] in cited), sources[0])
    return {**out, "answer_span": "", "source": first["doc_id"], "copy": False}


def export_questions(rows: Iterable[FeedbackRow]) -> list[dict[str, Any]]:
    """The question set of ``rows`` (oldest first): one line per distinct question (whitespace and
    case ignored; the latest 👍 wins), in the order the questions were first rated."""
    by_question: dict[str, dict[str, Any]] = {}
    for row in rows:
        line = question_record(row)
        if line is not None:
            by_question[" ".join(line["question"].split()).casefold()] = line
    return list(by_question.values())
