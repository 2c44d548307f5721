"""The ``questions.jsonl`` format, one JSON object per line:
``{"id", "question", "answer_span", "source" | "sources", "copy"?, "kind"?, "first"?}``.

``sources`` lists several expected documents (a two-document question: the answer's span is in
the last one); ``first`` makes it a follow-up (``followups.jsonl``): ``first`` is asked before,
and ``question`` is asked with that turn and its answer as the conversation; a question with no
source at all is one the corpus cannot answer (a right answer is "not found"). ``kind`` groups
questions in the report (``copy``, ``explain``, ``distractor``, ``two-document``, ``unanswerable``,
``follow-up``; default from ``first``, ``copy`` and the sources).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

DEFAULT_QUESTIONS = Path(__file__).resolve().parent / "data" / "questions.jsonl"
DEFAULT_CORPUS = Path(__file__).resolve().parent / "data" / "corpus"


@dataclass(frozen=True)
class Question:
    """One eval question.

    Attributes:
        id: stable id.
        question: what the operator asks.
        answer_span: an exact substring of the source a right answer must quote.
        source: the expected document id ``path#KEY``, or ``path`` for any document of that file.
        copy: the question asks for a literal (command, error string, path, value) that a
            right answer quotes; false for why / what-happened questions (default true).
        first: for a follow-up, the conversation's first question ("" otherwise).
    """

    id: str
    question: str
    answer_span: str
    source: str
    copy: bool = True
    sources: tuple[str, ...] = ()
    kind: str = ""
    first: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        if not self.sources and self.source:
            object.__setattr__(self, "sources", (self.source,))
        if self.sources and not self.source:
            object.__setattr__(self, "source", self.sources[-1])
        if not self.kind:
            kind = "follow-up" if self.first else "unanswerable" if not self.sources else \
                "two-document" if len(self.sources) > 1 else "copy" if self.copy else "explain"
            object.__setattr__(self, "kind", kind)

    @property
    def answerable(self) -> bool:
        """The corpus holds an answer (some expected source)."""
        return bool(self.sources)

    def matches(self, doc_id: str, expected: str | None = None) -> bool:
        """Whether a retrieved document id is the expected source (``expected``, default the
        answer-bearing one: :attr:`source`)."""
        want = self.source if expected is None else expected
        if not want:
            return False
        return doc_id == want if "#" in want else doc_id.startswith(want + "#")


def load_questions(path: Path = DEFAULT_QUESTIONS) -> list[Question]:
    """Parse a questions file.

    Raises:
        ValueError: a line is not JSON or lacks a field (the message names the line).
    """
    out = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            sources = row.get("sources") or ([row["source"]] if row.get("source") else [])
            if isinstance(sources, str):
                sources = [sources]
            out.append(Question(str(row["id"]), row["question"], row.get("answer_span", ""), row.get("source", ""),
                                bool(row.get("copy", bool(sources))), tuple(str(x) for x in sources),
                                str(row.get("kind", "")), str(row.get("first", ""))))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{lineno}: not a question record ({exc})") from exc
    return out


def quick_subset(questions: list[T], n: int) -> list[T]:
    """``n`` questions (or eval cases) spread evenly over the file (deterministic)."""
    if len(questions) <= n:
        return questions
    step = len(questions) / n
    return [questions[int(i * step)] for i in range(n)]
