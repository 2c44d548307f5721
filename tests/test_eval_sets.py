"""Every eval question file holds up against the corpus it is asked of, as the ingester reads it:
each expected source is a document, and each answer span is in the answer-bearing one."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.questions import load_questions
from ingestion.files import discover_files
from ingestion.loaders import load_bytes

DATA = Path(__file__).resolve().parent.parent / "evals" / "data"
SETS = {"sample": DATA, "site2": DATA / "site2", "site3": DATA / "site3", "site4": DATA / "site4",
        "longrec": DATA / "longrec", "site5": DATA / "site5"}
FILES = ("questions.jsonl", "followups.jsonl", "unanswerable.jsonl")


def corpus_texts(root: Path) -> dict[str, str]:
    """doc_id -> the text the ingester builds, for every document under ``root/corpus``."""
    corpus = root / "corpus"
    files, _ = discover_files([corpus])
    docs = {}
    for path in files:
        result = load_bytes(path.read_bytes(), path.relative_to(corpus).as_posix(), name=path.name)
        docs.update((d.doc_id, d.text) for d in result.documents)
    return docs


CASES = [(name, file) for name, root in SETS.items() for file in FILES if (root / file).exists()]


@pytest.mark.parametrize(("name", "file"), CASES, ids=[f"{n}/{f}" for n, f in CASES])
def test_every_expected_source_exists_and_holds_its_span(name, file):
    docs = corpus_texts(SETS[name])
    questions = load_questions(SETS[name] / file)
    assert len({q.id for q in questions}) == len(questions), "ids are unique"
    for q in questions:
        for source in q.sources:
            matching = [d for d in docs if q.matches(d, source)]
            assert matching, f"{q.id}: no document {source}"
        if q.answerable:
            assert any(q.answer_span in docs[d] for d in docs if q.matches(d)), f"{q.id}: span not in {q.source}"
        else:
            assert q.kind == "unanswerable" and not q.answer_span
        if file == "followups.jsonl":
            assert q.first and q.kind == "follow-up"
        if file == "unanswerable.jsonl":
            assert not q.answerable
