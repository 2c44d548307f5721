"""The ``questions.jsonl`` format: ``{"id", "question", "answer_span", "source", "copy"?}`` per line."""

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
    """

    id: str
    question: str
    answer_span: str
    source: str
    copy: bool = True

    def matches(self, doc_id: str) -> bool:
        """Whether a retrieved document id is the expected source."""
        return doc_id == self.source if "#" in self.source else doc_id.startswith(self.source + "#")


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
            out.append(Question(str(row["id"]), row["question"], row.get("answer_span", ""), row.get("source", ""),
                                bool(row.get("copy", True))))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{lineno}: not a question record ({exc})") from exc
    return out


def quick_subset(questions: list[T], n: int) -> list[T]:
    """``n`` questions (or eval cases) spread evenly over the file (deterministic)."""
    if len(questions) <= n:
        return questions
    step = len(questions) / n
    return [questions[int(i * step)] for i in range(n)]
