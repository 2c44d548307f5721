"""What every eval set's ``validate.py`` checks the same way: its corpus reads as the ingester reads
it, and its question files are JSON Lines of objects. Each finding is appended to ``errors``."""

from __future__ import annotations

import json
from pathlib import Path

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
