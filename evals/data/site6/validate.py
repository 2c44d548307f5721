#!/usr/bin/env python3
"""Check the site6 (KALLISTO-T2) held-out evaluation set against the text the ingester builds.

Run from anywhere (with the project's environment, e.g. ``.venv/bin/python``)::

    python evals/data/site6/validate.py

It ingests ``corpus/`` with the project's own loaders (no store, no embedding, no server) and
checks ``questions.jsonl``:

- every line is a JSON object with exactly the expected keys and value types (answerable kinds:
  ``id, question, answer_span, sources, kind, copy``; ``unanswerable`` additionally
  ``names_real``); ids are unique and follow ``s6qNN``; the file also parses with
  :func:`evals.questions.load_questions`;
- every source id exists among the ingested documents;
- every non-empty ``answer_span`` is an exact substring of the text of the LAST listed source and
  occurs in no other document of the corpus; it is not contained (case-insensitively) in the
  question;
- ``unanswerable`` questions have ``answer_span == ""``, ``sources == []``, ``copy`` false and a
  boolean ``names_real``; at least 1 has ``names_real: true`` and at least 1 ``names_real: false``;
  the true ones name at least one identifier (host, ticket, change id) that occurs in the corpus,
  while the false ones name no identifier that occurs in the corpus; every other kind has a
  non-empty span, at least one source and ``copy`` true;
- per-kind minimum counts, exactly 16 questions, and that the corpus loads without failed records
  or loader warnings, has 25-35 documents in at least 5 formats, and at least 4 long records
  (60+ lines as ingested).

Exits 0 when everything passes, 1 with one line per problem otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from evals.set_checks import QuestionRules, check_questions, load_corpus, report  # noqa: E402
from ingestion.loaders import load_bytes  # noqa: E402

CORPUS = HERE / "corpus"
QUESTIONS = HERE / "questions.jsonl"

RULES = QuestionRules(r"s6q\d{2}", "s6q01",
                      {"buried": 4, "terse": 2, "final-fix": 3, "table": 3, "direct": 2, "unanswerable": 2},
                      question_range=(16, 16), min_names_real=1, min_names_fake=1)
DOC_RANGE = (25, 35)
MIN_FORMATS = 5
LONG_LINES = 60
MIN_LONG = 4


def check_shape(docs: dict[str, str], errors: list[str]) -> tuple[list[str], int]:
    """The corpus mixes formats (as the loaders name them) and holds long records."""
    formats: set[str] = set()
    for path in sorted(p for p in CORPUS.rglob("*") if p.is_file()):
        rel = path.relative_to(CORPUS).as_posix()
        try:
            formats.add(load_bytes(path.read_bytes(), rel, name=path.name).format)
        except Exception:  # noqa: BLE001 - load_corpus has reported it already
            continue
    if len(formats) < MIN_FORMATS:
        errors.append(f"corpus: {len(formats)} formats ({', '.join(sorted(formats))}), need at least {MIN_FORMATS}")
    long_docs = sum(1 for text in docs.values() if len(text.splitlines()) >= LONG_LINES)
    if long_docs < MIN_LONG:
        errors.append(f"corpus: {long_docs} documents of {LONG_LINES}+ lines, need at least {MIN_LONG}")
    return sorted(formats), long_docs


def main() -> int:
    errors: list[str] = []
    docs = load_corpus(CORPUS, DOC_RANGE, errors)
    formats, long_docs = check_shape(docs, errors)
    counts = check_questions(QUESTIONS, docs, RULES, errors)
    longest = max((len(text.splitlines()) for text in docs.values()), default=0)
    summary = (f"{len(docs)} documents in {len(formats)} formats ({', '.join(formats)}), {long_docs} of "
               f"{LONG_LINES}+ lines (longest {longest}); {sum(counts.kinds.values())} questions ("
               + ", ".join(f"{k} {counts.kinds[k]}" for k in RULES.min_per_kind)
               + f"); names_real true: {counts.names_real}, false: {counts.names_fake}")
    return report("site6", summary, errors)


if __name__ == "__main__":
    sys.exit(main())
