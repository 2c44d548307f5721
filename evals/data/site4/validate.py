#!/usr/bin/env python3
"""Check the site4 (LNT-T1) held-out evaluation set against the text the ingester builds.

Run from anywhere (with the project's environment, e.g. ``.venv/bin/python``)::

    python evals/data/site4/validate.py

It ingests ``corpus/`` with the project's own loaders (no store, no embedding, no server) and
checks ``questions.jsonl`` and ``followups.jsonl``:

- every line is a JSON object with exactly the expected keys and value types; ids are unique
  (across both files) and follow ``s4qNN`` / ``s4fNN``;
- every source id exists among the ingested documents;
- every non-empty ``answer_span`` is an exact substring of the text of the LAST listed source and
  occurs in no other document of the corpus; it is not contained (case-insensitively) in the
  question (nor, for follow-ups, in the first question);
- ``unanswerable`` questions have ``answer_span == ""`` and ``sources == []``; every other kind has
  a non-empty span and at least one source (``distractor``: exactly one; ``two-document``: two or
  more, all distinct); ``copy`` is true for ``copy``, false for ``explain`` and ``unanswerable``;
- per-kind minimum counts, the number of follow-ups, and that the corpus loads without failed
  records and has 30-45 documents.

Exits 0 when everything passes, 1 with one line per problem otherwise.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from evals.set_checks import load_corpus, read_jsonl, report  # noqa: E402

CORPUS = HERE / "corpus"
QUESTIONS = HERE / "questions.jsonl"
FOLLOWUPS = HERE / "followups.jsonl"

QUESTION_KEYS = {"id", "question", "answer_span", "sources", "kind", "copy"}
FOLLOWUP_KEYS = {"id", "first", "question", "answer_span", "sources"}
MIN_PER_KIND = {"distractor": 10, "two-document": 6, "copy": 8, "explain": 4, "unanswerable": 10}
MIN_QUESTIONS = 44
MIN_FOLLOWUPS = 10
DOC_RANGE = (30, 45)


def check_span(where: str, span: str, sources: list[str], asked: list[str], docs: dict[str, str],
               errors: list[str]) -> None:
    """Span in the last source, in no other document, in none of the ``asked`` texts."""
    unknown = [s for s in sources if s not in docs]
    for source in unknown:
        errors.append(f"{where}: source {source!r} is not an ingested document id")
    if unknown or not sources:
        return
    last = sources[-1]
    if span not in docs[last]:
        errors.append(f"{where}: answer_span is not an exact substring of the last source {last!r}")
    others = sorted(doc_id for doc_id, text in docs.items() if doc_id != last and span in text)
    if others:
        errors.append(f"{where}: answer_span also occurs in {', '.join(others)}")
    for text in asked:
        if span.lower() in text.lower():
            errors.append(f"{where}: answer_span appears in the question text")


def check_sources_shape(where: str, sources: object, errors: list[str]) -> list[str]:
    if not isinstance(sources, list) or not all(isinstance(s, str) and s for s in sources):
        errors.append(f"{where}: 'sources' must be a list of non-empty strings")
        return []
    if len(set(sources)) != len(sources):
        errors.append(f"{where}: 'sources' lists a document twice")
    return sources


def check_questions(docs: dict[str, str], seen_ids: set[str], errors: list[str]) -> Counter:
    kinds: Counter = Counter()
    for lineno, row in read_jsonl(QUESTIONS, errors):
        where = f"questions.jsonl:{lineno} ({row.get('id', '?')})"
        keys = set(row)
        if keys != QUESTION_KEYS:
            errors.append(f"{where}: keys {sorted(keys)} != {sorted(QUESTION_KEYS)}")
            continue
        qid, question, span, kind, copy = row["id"], row["question"], row["answer_span"], row["kind"], row["copy"]
        if not isinstance(qid, str) or not re.fullmatch(r"s4q\d{2,3}", qid):
            errors.append(f"{where}: id must look like s4q01")
        elif qid in seen_ids:
            errors.append(f"{where}: duplicate id {qid}")
        else:
            seen_ids.add(qid)
        if not isinstance(question, str) or not question.strip():
            errors.append(f"{where}: 'question' must be a non-empty string")
            continue
        if not isinstance(span, str):
            errors.append(f"{where}: 'answer_span' must be a string")
            continue
        if not isinstance(copy, bool):
            errors.append(f"{where}: 'copy' must be true or false")
        if kind not in MIN_PER_KIND:
            errors.append(f"{where}: unknown kind {kind!r} (expected one of {', '.join(MIN_PER_KIND)})")
            continue
        kinds[kind] += 1
        sources = check_sources_shape(where, row["sources"], errors)
        if kind == "unanswerable":
            if span != "" or row["sources"] != []:
                errors.append(f"{where}: unanswerable needs answer_span \"\" and sources []")
            if copy is not False:
                errors.append(f"{where}: unanswerable needs copy false")
            continue
        if not span.strip():
            errors.append(f"{where}: {kind} question needs a non-empty answer_span")
            continue
        if span != span.strip():
            errors.append(f"{where}: answer_span has leading/trailing white space")
        if kind == "distractor" and len(sources) != 1:
            errors.append(f"{where}: distractor needs exactly one source")
        if kind == "two-document" and len(sources) < 2:
            errors.append(f"{where}: two-document needs at least two sources")
        if kind in ("copy", "explain") and not sources:
            errors.append(f"{where}: {kind} needs at least one source")
        if kind == "copy" and copy is not True:
            errors.append(f"{where}: copy question needs copy true")
        if kind == "explain" and copy is not False:
            errors.append(f"{where}: explain question needs copy false")
        check_span(where, span, sources, [question], docs, errors)
    total = sum(kinds.values())
    for kind, minimum in MIN_PER_KIND.items():
        if kinds[kind] < minimum:
            errors.append(f"questions.jsonl: {kinds[kind]} {kind} questions, need at least {minimum}")
    if total < MIN_QUESTIONS:
        errors.append(f"questions.jsonl: {total} questions, need at least {MIN_QUESTIONS}")
    return kinds


def check_followups(docs: dict[str, str], seen_ids: set[str], errors: list[str]) -> int:
    count = 0
    for lineno, row in read_jsonl(FOLLOWUPS, errors):
        where = f"followups.jsonl:{lineno} ({row.get('id', '?')})"
        keys = set(row)
        if keys != FOLLOWUP_KEYS:
            errors.append(f"{where}: keys {sorted(keys)} != {sorted(FOLLOWUP_KEYS)}")
            continue
        count += 1
        fid, first, question, span = row["id"], row["first"], row["question"], row["answer_span"]
        if not isinstance(fid, str) or not re.fullmatch(r"s4f\d{2,3}", fid):
            errors.append(f"{where}: id must look like s4f01")
        elif fid in seen_ids:
            errors.append(f"{where}: duplicate id {fid}")
        else:
            seen_ids.add(fid)
        if not all(isinstance(t, str) and t.strip() for t in (first, question)):
            errors.append(f"{where}: 'first' and 'question' must be non-empty strings")
            continue
        if first.strip() == question.strip():
            errors.append(f"{where}: the follow-up repeats the first question")
        if not isinstance(span, str) or not span.strip():
            errors.append(f"{where}: follow-up needs a non-empty answer_span")
            continue
        if span != span.strip():
            errors.append(f"{where}: answer_span has leading/trailing white space")
        sources = check_sources_shape(where, row["sources"], errors)
        if not sources:
            errors.append(f"{where}: follow-up needs at least one source")
            continue
        check_span(where, span, sources, [first, question], docs, errors)
    if count < MIN_FOLLOWUPS:
        errors.append(f"followups.jsonl: {count} follow-ups, need at least {MIN_FOLLOWUPS}")
    return count


def main() -> int:
    errors: list[str] = []
    docs = load_corpus(CORPUS, DOC_RANGE, errors)
    seen: set[str] = set()
    kinds = check_questions(docs, seen, errors)
    followups = check_followups(docs, seen, errors)
    summary = (f"{len(docs)} documents; {sum(kinds.values())} questions ("
               + ", ".join(f"{k} {kinds[k]}" for k in MIN_PER_KIND) + f"); {followups} follow-ups")
    return report("site4", summary, errors)


if __name__ == "__main__":
    sys.exit(main())
