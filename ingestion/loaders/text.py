"""Plain-text fallback: the whole file is one ``text`` document keyed by the file name."""

from __future__ import annotations

from pathlib import PurePosixPath

from ingestion.loaders.base import DocumentBuilder, LoaderConfig, LoadResult


def load(text: str, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """One document with the file's text (stripped); key = the file name (e.g. ``notes.txt``)."""
    name = PurePosixPath(source).name or source
    builder = DocumentBuilder(source, "text", encoding=encoding)
    builder.add(name, text.strip(), {"title": name})
    return builder.result("text")
