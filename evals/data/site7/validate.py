#!/usr/bin/env python3
"""Check the site7 (BIOBIO-T2) held-out evaluation set against the text the ingester builds.

Run from anywhere (with the project's environment, e.g. ``.venv/bin/python``)::

    python evals/data/site7/validate.py

It ingests ``corpus/`` with the project's own loaders (no store, no embedding, no server) and
checks ``questions.jsonl``:

- every line is a JSON object with exactly the expected keys and value types (answerable kinds:
  ``id, question, answer_span, sources, kind, copy``; ``unanswerable`` additionally
  ``names_real``); ids are unique and follow ``s7qNN``; the file also parses with
  :func:`evals.questions.load_questions`;
- every source id exists among the ingested documents;
- every non-empty ``answer_span`` is an exact substring of the text of the LAST listed source and
  occurs in no other document of the corpus; it is not contained (case-insensitively) in the
  question;
- ``unanswerable`` questions have ``answer_span == ""``, ``sources == []``, ``copy`` false and a
  boolean ``names_real``; at least 2 have ``names_real: true``, and those name at least one
  identifier (host, ticket, change id) that occurs in the corpus, while the ``names_real: false``
  ones name no identifier that occurs in the corpus; every other kind has a non-empty span, at
  least one source and ``copy`` true;
- per-kind minimum counts, 14-18 questions in all, and that the corpus loads without failed
  records or loader warnings and has 28-40 documents.

Exits 0 when everything passes, 1 with one line per problem otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from evals.set_checks import QuestionRules, validate_set  # noqa: E402

RULES = QuestionRules(r"s7q\d{2,3}", "s7q01",
                      {"buried": 4, "terse": 2, "final-fix": 3, "table": 2, "copy": 2, "unanswerable": 3},
                      question_range=(14, 18), min_names_real=2)
DOC_RANGE = (28, 40)


def main() -> int:
    return validate_set(HERE, RULES, DOC_RANGE)


if __name__ == "__main__":
    sys.exit(main())
