"""What every eval set's ``validate.py`` checks the same way: its corpus reads as the ingester reads
it, its question files are JSON Lines of objects, and (the long-record sets site5 and site6) its
questions follow one schema (:func:`check_questions`). Each finding is appended to ``errors``;
:func:`report` prints the outcome and gives the exit code; :func:`validate_set` is the whole check
of a set with no rules of its own."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from evals.questions import load_questions
from ingestion.files import discover_files
from ingestion.loaders import load_bytes


def load_corpus(corpus: Path, doc_range: tuple[int, int], errors: list[str]) -> dict[str, str]:
    """doc_id -> ingested text, for every document under ``corpus``; a file the loaders refuse or
    warn about, a duplicate id, or a document count outside ``doc_range`` (inclusive) is a finding."""
    files, missing = discover_files([corpus])
    if missing or not corpus.is_dir():
        errors.append(f"corpus folder missing: {corpus}")
        return {}
    docs: dict[str, str] = {}
    for path in files:
        rel = path.relative_to(corpus).as_posix()
        try:
            result = load_bytes(path.read_bytes(), rel, name=path.name)
        except Exception as exc:  # noqa: BLE001 - any loader error is a finding
            errors.append(f"corpus/{rel}: not ingestible ({type(exc).__name__}: {exc})")
            continue
        for failure in result.failures:
            errors.append(f"corpus/{rel}: failed record {failure}")
        for warning in result.warnings:
            errors.append(f"corpus/{rel}: loader warning: {warning}")
        if not result.documents:
            errors.append(f"corpus/{rel}: gave no documents")
        for doc in result.documents:
            if doc.doc_id in docs:
                errors.append(f"duplicate document id {doc.doc_id!r}")
            docs[doc.doc_id] = doc.text
    lo, hi = doc_range
    if not lo <= len(docs) <= hi:
        errors.append(f"corpus has {len(docs)} documents, expected {lo}-{hi}")
    return docs


def read_jsonl(path: Path, errors: list[str]) -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line; bad lines are reported."""
    if not path.is_file():
        errors.append(f"{path.name}: missing")
        return []
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"{path.name}:{lineno}: invalid JSON ({exc.msg})")
            continue
        if not isinstance(row, dict):
            errors.append(f"{path.name}:{lineno}: not a JSON object")
            continue
        rows.append((lineno, row))
    return rows


QUESTION_KEYS = {"id", "question", "answer_span", "sources", "kind", "copy"}
UNANSWERABLE_KEYS = QUESTION_KEYS | {"names_real"}
#: Identifier-like tokens of a question: something with a digit in it and a letter, hyphen or
#: dot (``dosd-a11``, ``DOPS-440``, ``osd.41``), or a bare number of 5+ digits (a GGUS id).
IDENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")


def identifiers(question: str) -> list[str]:
    """The identifier-like tokens of ``question`` (:data:`IDENT_RE`): hyphenated names with a digit,
    and bare numbers of 5+ digits."""
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


@dataclass(frozen=True)
class QuestionRules:
    """One set's question schema (:func:`check_questions`).

    Attributes:
        id_pattern / id_example: what an id must match (a regex), and one in words.
        min_per_kind: the kinds allowed, each with its minimum count.
        question_range: questions in all (inclusive).
        min_names_real / min_names_fake: unanswerable questions with ``names_real`` true / false.
    """

    id_pattern: str
    id_example: str
    min_per_kind: dict[str, int]
    question_range: tuple[int, int]
    min_names_real: int
    min_names_fake: int = 0


@dataclass
class QuestionCounts:
    """What :func:`check_questions` counted: questions per kind, unanswerable ones by ``names_real``."""

    kinds: Counter[str] = field(default_factory=Counter)
    names_real: int = 0
    names_fake: int = 0


def check_questions(path: Path, docs: dict[str, str], rules: QuestionRules, errors: list[str]) -> QuestionCounts:
    """Every question of ``path`` against ``rules`` and the ingested ``docs`` (doc_id -> text):
    its keys, id, kind and types; an answerable one's span is in its last source only and not in
    the question (:func:`check_span`); an unanswerable one has no span or source, and when
    ``names_real`` names an identifier the corpus holds (and otherwise none); the counts per kind
    and in all; and :func:`evals.questions.load_questions` reads the file alike."""
    counts = QuestionCounts()
    seen: set[str] = set()
    corpus_lower = "\n".join(docs.values()).lower()
    for lineno, row in read_jsonl(path, errors):
        where = f"{path.name}:{lineno} ({row.get('id', '?')})"
        kind = row.get("kind")
        expected = UNANSWERABLE_KEYS if kind == "unanswerable" else QUESTION_KEYS
        if set(row) != expected:
            errors.append(f"{where}: keys {sorted(row)} != {sorted(expected)}")
            continue
        qid, question, span, copy = row["id"], row["question"], row["answer_span"], row["copy"]
        if not isinstance(qid, str) or not re.fullmatch(rules.id_pattern, qid):
            errors.append(f"{where}: id must look like {rules.id_example}")
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
        if kind not in rules.min_per_kind:
            errors.append(f"{where}: unknown kind {kind!r} (expected one of {', '.join(rules.min_per_kind)})")
            continue
        counts.kinds[kind] += 1
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
            present = [t for t in identifiers(question) if t.lower() in corpus_lower]
            if real:
                counts.names_real += 1
                if not present:
                    errors.append(f"{where}: names_real true but no identifier of the question occurs in the corpus")
            else:
                counts.names_fake += 1
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
    _check_counts(path, counts, rules, errors)
    return counts


def _check_counts(path: Path, counts: QuestionCounts, rules: QuestionRules, errors: list[str]) -> None:
    """The minimum per kind, the total and the ``names_real`` minima; then the project's loader."""
    for kind, minimum in rules.min_per_kind.items():
        if counts.kinds[kind] < minimum:
            errors.append(f"{path.name}: {counts.kinds[kind]} {kind} questions, need at least {minimum}")
    total, (lo, hi) = sum(counts.kinds.values()), rules.question_range
    if not lo <= total <= hi:
        errors.append(f"{path.name}: {total} questions, expected {lo}-{hi}")
    for label, n, minimum in (("true", counts.names_real, rules.min_names_real),
                              ("false", counts.names_fake, rules.min_names_fake)):
        if n < minimum:
            errors.append(f"{path.name}: {n} unanswerable questions with names_real {label}, need at least {minimum}")
    try:
        parsed = load_questions(path)
    except ValueError as exc:
        errors.append(f"{path.name}: evals.questions.load_questions rejects it ({exc})")
    else:
        for q in parsed:
            if q.answerable != (q.kind != "unanswerable"):
                errors.append(f"{q.id}: load_questions reads it as answerable={q.answerable} for kind {q.kind!r}")


def report(name: str, summary: str, errors: list[str]) -> int:
    """Print a set's validation outcome: ``<name> validation OK: <summary>`` on stdout, or every finding
    and the summary on stderr. Returns the exit code (0 when ``errors`` is empty, else 1)."""
    if errors:
        print(f"{name} validation FAILED with {len(errors)} problem(s):", file=sys.stderr)
        for err in errors:
            print("  - " + err, file=sys.stderr)
        print(summary, file=sys.stderr)
        return 1
    print(f"{name} validation OK: " + summary)
    return 0


def validate_set(folder: Path, rules: QuestionRules, doc_range: tuple[int, int]) -> int:
    """The whole check of a set that needs nothing beyond :func:`load_corpus` and :func:`check_questions`
    (``folder/corpus`` with ``doc_range`` documents, ``folder/questions.jsonl`` under ``rules``), reported
    under the folder's name; the exit code (0 when it passes, else 1)."""
    errors: list[str] = []
    docs = load_corpus(folder / "corpus", doc_range, errors)
    counts = check_questions(folder / "questions.jsonl", docs, rules, errors)
    summary = (f"{len(docs)} documents; {sum(counts.kinds.values())} questions ("
               + ", ".join(f"{k} {counts.kinds[k]}" for k in rules.min_per_kind)
               + f"); names_real true: {counts.names_real}")
    return report(folder.name, summary, errors)
