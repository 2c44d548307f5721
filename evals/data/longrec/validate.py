#!/usr/bin/env python3
"""Check the longrec (HARRIER-T2) tuning set against the text the ingester builds.

Run from anywhere (with the project's environment, e.g. ``.venv/bin/python``)::

    python evals/data/longrec/validate.py

It ingests ``corpus/`` with the project's own loaders (no store, no embedding, no server) and
checks ``questions.jsonl``:

- every line is a JSON object with exactly the keys ``id, question, answer_span, sources, kind,
  copy`` (plus ``names_real`` for, and only for, ``unanswerable`` questions); ids are unique and
  follow ``lrqNN``;
- every source id exists among the ingested documents;
- every non-empty ``answer_span`` is an exact substring of the text of the LAST listed source and
  occurs in no other document of the corpus; it is not contained (case-insensitively) in the
  question and has no leading/trailing white space;
- ``unanswerable`` questions have ``answer_span == ""``, ``sources == []``, ``copy`` false and a
  boolean ``names_real``; at least 4 have ``names_real`` true. A ``names_real: true`` question
  names something of the corpus (one of its host / ticket / osd tokens occurs in some document);
  a ``names_real: false`` one names nothing of it (none of its tokens occurs in any document);
- every answerable kind has a non-empty span, at least one source and ``copy`` true;
- per kind: ``buried`` spans lie in a document of 60+ lines, on line 20 or later;
  ``terse`` spans are in a shift-log document; ``final-fix`` sources show an earlier attempt that
  was reverted or did not hold (a revert marker in the source texts); ``table`` spans occur
  exactly once in their document;
- per-kind minimum counts, 36-44 questions, and that the corpus loads without failed records or
  loader warnings and has 20-30 documents.

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

QUESTION_KEYS = {"id", "question", "answer_span", "sources", "kind", "copy"}
UNANSWERABLE_KEYS = QUESTION_KEYS | {"names_real"}
MIN_PER_KIND = {"buried": 8, "terse": 5, "final-fix": 6, "table": 6, "copy": 4, "unanswerable": 8}
MIN_NAMES_REAL = 4
QUESTION_RANGE = (36, 44)
DOC_RANGE = (20, 30)
BURIED_MIN_LINES = 60
BURIED_MIN_LINE_NO = 20
#: Words that show an earlier attempt was undone or did not last, for ``final-fix`` sources.
REVERT_RE = re.compile(r"rolled back|roll(?:ed)? it back|revert|did ?n[o']t hold|didn't hold|superseded|undone|"
                       r"not hold", re.IGNORECASE)
#: Things a question can name: hosts (xrd-gw03, wn-b029, ceph-osd07), tickets (HAR-431, GGUS 170240),
#: OSDs (osd.17), switch ports (Et49/1).
NAME_RE = re.compile(r"\b(?:[a-z]+(?:-[a-z]+)*-[a-z]*\d+[a-z\d]*|[A-Z]+-\d+|osd\.\d+|\d{6,}|Et\d+(?:/\d+)?)\b",
                     re.IGNORECASE)


def check_span(where: str, span: str, sources: list[str], question: str, docs: dict[str, str],
               errors: list[str]) -> bool:
    """Span in the last source, in no other document, not in the question. True when the sources exist."""
    unknown = [s for s in sources if s not in docs]
    for source in unknown:
        errors.append(f"{where}: source {source!r} is not an ingested document id")
    if unknown or not sources:
        return False
    last = sources[-1]
    if span not in docs[last]:
        errors.append(f"{where}: answer_span is not an exact substring of the last source {last!r}")
    others = sorted(doc_id for doc_id, text in docs.items() if doc_id != last and span in text)
    if others:
        errors.append(f"{where}: answer_span also occurs in {', '.join(others)}")
    if span.lower() in question.lower():
        errors.append(f"{where}: answer_span appears in the question text")
    return True


def check_kind_rules(where: str, kind: str, span: str, sources: list[str], docs: dict[str, str],
                     errors: list[str]) -> None:
    """The per-kind shape rules (see the module docstring); sources are known to exist."""
    last = sources[-1]
    text = docs[last]
    if span not in text:
        return  # already reported
    if kind == "buried":
        lines = text.splitlines()
        line_no = text[: text.index(span)].count("\n") + 1
        if len(lines) < BURIED_MIN_LINES:
            errors.append(f"{where}: buried span's document has {len(lines)} lines, need {BURIED_MIN_LINES}+")
        if line_no < BURIED_MIN_LINE_NO:
            errors.append(f"{where}: buried span is on line {line_no}, need line {BURIED_MIN_LINE_NO} or later")
    elif kind == "terse":
        if not last.startswith("shiftlogs/"):
            errors.append(f"{where}: terse question's answer must be in a shift-log document, not {last!r}")
    elif kind == "final-fix":
        if not any(REVERT_RE.search(docs[s]) for s in sources):
            errors.append(f"{where}: final-fix sources show no reverted / superseded attempt")
    elif kind == "table":
        if text.count(span) != 1:
            errors.append(f"{where}: table span occurs {text.count(span)} times in {last!r}, need exactly once")


def check_names_real(where: str, question: str, names_real: object, docs: dict[str, str],
                     errors: list[str]) -> None:
    if not isinstance(names_real, bool):
        errors.append(f"{where}: unanswerable needs 'names_real' true or false")
        return
    names = {m.group(0) for m in NAME_RE.finditer(question)}
    corpus = "\n".join(docs.values()).lower()
    present = sorted(n for n in names if n.lower() in corpus)
    if names_real and not present:
        errors.append(f"{where}: names_real true but none of {sorted(names) or 'its words'} occurs in the corpus")
    if not names_real and present:
        errors.append(f"{where}: names_real false but {', '.join(present)} occurs in the corpus")


def check_questions(docs: dict[str, str], errors: list[str]) -> tuple[Counter, int]:
    kinds: Counter = Counter()
    seen: set[str] = set()
    names_real = 0
    for lineno, row in read_jsonl(QUESTIONS, errors):
        where = f"questions.jsonl:{lineno} ({row.get('id', '?')})"
        keys = set(row)
        expected = UNANSWERABLE_KEYS if row.get("kind") == "unanswerable" else QUESTION_KEYS
        if keys != expected:
            errors.append(f"{where}: keys {sorted(keys)} != {sorted(expected)}")
            continue
        qid, question, span, kind, copy = row["id"], row["question"], row["answer_span"], row["kind"], row["copy"]
        if not isinstance(qid, str) or not re.fullmatch(r"lrq\d{2,3}", qid):
            errors.append(f"{where}: id must look like lrq01")
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
            check_names_real(where, question, row["names_real"], docs, errors)
            names_real += row["names_real"] is True
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
        if check_span(where, span, sources, question, docs, errors):
            check_kind_rules(where, kind, span, sources, docs, errors)
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
    return kinds, names_real


def main() -> int:
    errors: list[str] = []
    docs = load_corpus(CORPUS, DOC_RANGE, errors)
    kinds, names_real = check_questions(docs, errors)
    summary = (f"{len(docs)} documents; {sum(kinds.values())} questions ("
               + ", ".join(f"{k} {kinds[k]}" for k in MIN_PER_KIND)
               + f"; {names_real} unanswerable name a real host/ticket)")
    return report("longrec", summary, errors)


if __name__ == "__main__":
    sys.exit(main())
