"""The document types the loaders emit, in one table: a new format adds one row here (and its loader).

Every list of document types derives from :data:`FORMATS`: the filter and scope values
(:data:`DOC_TYPES`, checked by the API's ``doc_types`` filters and the key scopes) and the label a
chunk's header line gives the type (:data:`TYPE_LABELS`, :mod:`ingestion.chunking`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DocFormat:
    """One document type: its ``doc_type`` metadata value, the label chunk headers show, what it holds."""

    doc_type: str
    label: str
    holds: str


FORMATS: tuple[DocFormat, ...] = (
    DocFormat("elog", "ELOG", "ELOG logbook entries (native .elog files; replies linked)"),
    DocFormat("shiftlog", "Shift log", "shift logs, one document per shift"),
    DocFormat("postmortem", "Post-mortem", "Markdown post-mortems with YAML front matter"),
    DocFormat("jira", "Jira", "Jira issues with their comments (REST JSON or Jira's CSV export)"),
    DocFormat("csv_ticket", "Ticket", "CSV ticket exports (GGUS-style and generic)"),
    DocFormat("jsonl", "Record", "JSON Lines or JSON lists of {id, text} records"),
    DocFormat("text", "Document", "plain text and Markdown without front matter"),
)
#: The document types a loader may emit.
DOC_TYPES: tuple[str, ...] = tuple(f.doc_type for f in FORMATS)
#: The label of each type in a chunk's header line.
TYPE_LABELS: dict[str, str] = {f.doc_type: f.label for f in FORMATS}
