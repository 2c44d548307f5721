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

import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from evals.questions import load_questions  # noqa: E402
from evals.set_checks import load_corpus, read_jsonl  # noqa: E402
from ingestion.loaders import load_bytes  # noqa: E402

CORPUS = HERE / "corpus"
QUESTIONS = HERE / "questions.jsonl"

QUESTION_KEYS = {"id", "question", "answer_span", "sources", "kind", "copy"}
UNANSWERABLE_KEYS = QUESTION_KEYS | {"names_real"}
MIN_PER_KIND = {"buried": 4, "terse": 2, "final-fix": 3, "table": 3, "direct": 2, "unanswerable": 2}
MIN_NAMES_REAL = 1
MIN_NAMES_FAKE = 1
QUESTION_RANGE = (16, 16)
DOC_RANGE = (25, 35)
MIN_FORMATS = 5
LONG_LINES = 60
MIN_LONG = 4
#: Identifier-like tokens of a question: something with a digit in it and a letter, hyphen or
#: dot (``knsd-04``, ``KOPS-214``, ``kwn-2-13``), or a bare number of 5+ digits (a GGUS id).
IDENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")


def identifiers(question: str) -> list[str]:
    out = []
    for token in IDENT_RE.findall(question):
        token = token.strip("._/-")
        if not any(ch.isdigit() for ch in token):
            continue
        if token.isdigit():
            if len(token) >= 5:
                out.append(token)
        elif "-" in token and any(ch.isalpha() for ch in token):
            out.append(token)
    return out


def check_span(where: str, span: str, sources: list[str], question: str, docs: dict[str, str],
               errors: list[str]) -> None:
    """Span in the last source, in no other document, not in the question."""
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
    if span.lower() in question.lower():
        errors.append(f"{where}: answer_span appears in the question text")


def check_questions(docs: dict[str, str], errors: list[str]) -> tuple[Counter, int, int]:
    kinds: Counter = Counter()
    names_real = names_fake = 0
    seen: set[str] = set()
    corpus_lower = "\n".join(docs.values()).lower()
    for lineno, row in read_jsonl(QUESTIONS, errors):
        where = f"questions.jsonl:{lineno} ({row.get('id', '?')})"
        kind = row.get("kind")
        expected = UNANSWERABLE_KEYS if kind == "unanswerable" else QUESTION_KEYS
        if set(row) != expected:
            errors.append(f"{where}: keys {sorted(row)} != {sorted(expected)}")
            continue
        qid, question, span, copy = row["id"], row["question"], row["answer_span"], row["copy"]
        if not isinstance(qid, str) or not re.fullmatch(r"s6q\d{2}", qid):
            errors.append(f"{where}: id must look like s6q01")
        elif qid in seen:
            errors.append(f"{where}: duplicate id {qid}")
        else:
            seen.add(qid)
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
        sources = row["sources"]
        if not isinstance(sources, list) or not all(isinstance(s, str) and s for s in sources):
            errors.append(f"{where}: 'sources' must be a list of non-empty strings")
            continue
        if len(set(sources)) != len(sources):
            errors.append(f"{where}: 'sources' lists a document twice")
        if kind == "unanswerable":
            if span != "" or sources != []:
                errors.append(f"{where}: unanswerable needs answer_span \"\" and sources []")
            if copy is not False:
                errors.append(f"{where}: unanswerable needs copy false")
            real = row["names_real"]
            if not isinstance(real, bool):
                errors.append(f"{where}: 'names_real' must be true or false")
                continue
            idents = identifiers(question)
            present = [t for t in idents if t.lower() in corpus_lower]
            if real:
                names_real += 1
                if not present:
                    errors.append(f"{where}: names_real true but no identifier of the question occurs in the corpus")
            else:
                names_fake += 1
                if present:
                    errors.append(f"{where}: names_real false but it names {', '.join(present)}, "
                                  "which the corpus holds")
            continue
        if not span.strip():
            errors.append(f"{where}: {kind} question needs a non-empty answer_span")
            continue
        if span != span.strip():
            errors.append(f"{where}: answer_span has leading/trailing white space")
        if not sources:
            errors.append(f"{where}: {kind} needs at least one source")
            continue
        if copy is not True:
            errors.append(f"{where}: {kind} question needs copy true")
        check_span(where, span, sources, question, docs, errors)
    total = sum(kinds.values())
    for kind, minimum in MIN_PER_KIND.items():
        if kinds[kind] < minimum:
            errors.append(f"questions.jsonl: {kinds[kind]} {kind} questions, need at least {minimum}")
    lo, hi = QUESTION_RANGE
    if not lo <= total <= hi:
        errors.append(f"questions.jsonl: {total} questions, expected {lo}-{hi}")
    if names_real < MIN_NAMES_REAL:
        errors.append(f"questions.jsonl: {names_real} unanswerable questions with names_real true, "
                      f"need at least {MIN_NAMES_REAL}")
    if names_fake < MIN_NAMES_FAKE:
        errors.append(f"questions.jsonl: {names_fake} unanswerable questions with names_real false, "
                      f"need at least {MIN_NAMES_FAKE}")
    try:
        parsed = load_questions(QUESTIONS)
    except ValueError as exc:
        errors.append(f"questions.jsonl: evals.questions.load_questions rejects it ({exc})")
    else:
        for q in parsed:
            if q.answerable != (q.kind != "unanswerable"):
                errors.append(f"{q.id}: load_questions reads it as answerable={q.answerable} for kind {q.kind!r}")
    return kinds, names_real, names_fake


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
    kinds, names_real, names_fake = check_questions(docs, errors)
    longest = max((len(text.splitlines()) for text in docs.values()), default=0)
    summary = (f"{len(docs)} documents in {len(formats)} formats ({', '.join(formats)}), {long_docs} of "
               f"{LONG_LINES}+ lines (longest {longest}); {sum(kinds.values())} questions ("
               + ", ".join(f"{k} {kinds[k]}" for k in MIN_PER_KIND)
               + f"); names_real true: {names_real}, false: {names_fake}")
    if errors:
        print(f"site6 validation FAILED with {len(errors)} problem(s):", file=sys.stderr)
        for err in errors:
            print("  - " + err, file=sys.stderr)
        print(summary, file=sys.stderr)
        return 1
    print("site6 validation OK: " + summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
