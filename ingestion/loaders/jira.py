"""Jira issues, one document per issue: the shared issue model and the REST search JSON reader.

:class:`JiraIssue` is what every Jira export becomes before it is a document, so an issue
reads the same whether it came from the REST API or from Jira's CSV export
(:mod:`ingestion.loaders.jira_csv`): ``KEY: summary``, a facts line (status, priority,
resolution, assignee), labels, the description, then the comments as ``[when who] body``.

REST search results (``/rest/api/2|3/search`` JSON): reads ``issues[].key`` and
``fields.summary/description/status/priority/labels/assignee/reporter/resolution/created/
updated/components/issuetype`` and ``fields.comment.comments[]`` (author, created, body).
Null fields are normal and simply absent from the text. Descriptions and comment bodies may
be plain strings (API v2) or Atlassian Document Format trees (API v3); the latter are
flattened to text. A bare list of issues is accepted too. An issue without a usable ``key``
(missing, ``""``, blank) or with non-object ``fields`` fails alone, reported as ``issues[i]``
(see :mod:`ingestion.loaders.base`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ingestion.errors import ParseError, RecordError
from ingestion.loaders.base import DocumentBuilder, LoaderConfig, LoadResult, as_str_list, clean_str, require_key
from ingestion.timeparse import time_fields

_BLOCK_NODES = {"paragraph", "heading", "codeBlock", "blockquote", "listItem", "tableRow", "rule", "panel"}


@dataclass(frozen=True)
class JiraComment:
    """One comment: ``author`` and ``created`` as written (None when absent), ``body`` as text."""

    author: str | None
    created: str | None
    body: str


@dataclass
class JiraIssue:
    """One Jira issue, whichever export it came from.

    ``key`` is kept as written; people fields are display names; ``created``, ``updated`` and
    ``resolved`` are raw timestamps (anything :func:`ingestion.timeparse.parse_timestamp` reads;
    kept as text when it cannot).
    """

    key: str
    summary: str = ""
    description: str = ""
    jira_id: str | None = None
    status: str | None = None
    priority: str | None = None
    resolution: str | None = None
    assignee: str | None = None
    reporter: str | None = None
    issue_type: str | None = None
    project: str | None = None
    site: str | None = None
    labels: list[str] = field(default_factory=list)
    components: list[str] = field(default_factory=list)
    created: Any = None
    updated: Any = None
    resolved: Any = None
    comments: list[JiraComment] = field(default_factory=list)


def is_jira(data: Any) -> bool:
    """True for a Jira search result (dict with an ``issues`` list) or a list of issues."""
    issues = data.get("issues") if isinstance(data, dict) else data
    return isinstance(issues, list) and (
        not issues and isinstance(data, dict)
        or any(isinstance(i, dict) and "key" in i and "fields" in i for i in issues[:20])
    )


def adf_to_text(node: Any) -> str:
    """Flatten an Atlassian Document Format node (or a plain string) to text."""
    if node is None:
        return ""
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return "".join(adf_to_text(n) for n in node)
    if not isinstance(node, dict):
        return str(node)
    kind = node.get("type")
    if kind == "text":
        return str(node.get("text", ""))
    if kind == "hardBreak":
        return "\n"
    if kind in ("mention", "emoji", "status", "date"):
        attrs = node.get("attrs") or {}
        return str(attrs.get("text") or attrs.get("shortName") or attrs.get("timestamp") or "")
    if kind == "inlineCard":
        return str((node.get("attrs") or {}).get("url", ""))
    inner = adf_to_text(node.get("content") or [])
    if kind == "listItem":
        return "- " + inner.strip() + "\n"
    if kind in _BLOCK_NODES:
        return inner.rstrip("\n") + "\n"
    return inner


def _name(value: Any) -> str | None:
    """``{"name": ...}`` / ``{"displayName": ...}`` / plain value -> string."""
    if isinstance(value, dict):
        return clean_str(value.get("displayName") or value.get("name") or value.get("value") or value.get("key"))
    return clean_str(value)


def load_data(data: Any, source: str, config: LoaderConfig, *, encoding: str | None = None) -> LoadResult:
    """Build documents from already-parsed Jira JSON, one per issue.

    An issue that is not an object, lacks a non-blank ``key`` or has non-object ``fields``
    is a failed record (``issues[i]``); the other issues are still returned.

    Raises:
        ParseError: the JSON holds no ``issues`` list.
    """
    issues = data.get("issues") if isinstance(data, dict) else data
    if not isinstance(issues, list):
        raise ParseError("Jira JSON without an 'issues' list")
    builder = DocumentBuilder(source, "jira", encoding=encoding)
    for position, issue in enumerate(issues):
        with builder.record(f"issues[{position}]"):
            add_issue(builder, _from_json(issue), config)
    return builder.result("jira")


def _from_json(issue: Any) -> JiraIssue:
    """The :class:`JiraIssue` of one REST issue object.

    Raises:
        RecordError: not an object, no usable ``key``, or non-object ``fields``.
    """
    if not isinstance(issue, dict):
        raise RecordError(f"expected an issue object, got {type(issue).__name__}")
    key = require_key(issue.get("key"), "'key'")
    fields = issue.get("fields") or {}
    if not isinstance(fields, dict):
        raise RecordError(f"{key}: 'fields' is not an object")
    comment_block = fields.get("comment") or {}
    raw_comments = comment_block.get("comments") if isinstance(comment_block, dict) else comment_block
    comments = [JiraComment(_name(c.get("author")), clean_str(c.get("created")), adf_to_text(c.get("body")).strip())
                for c in raw_comments or [] if isinstance(c, dict)]
    return JiraIssue(
        key=key, summary=clean_str(fields.get("summary")) or "",
        description=adf_to_text(fields.get("description")).strip(), jira_id=clean_str(issue.get("id")),
        status=_name(fields.get("status")), priority=_name(fields.get("priority")),
        resolution=_name(fields.get("resolution")), assignee=_name(fields.get("assignee")),
        reporter=_name(fields.get("reporter")), issue_type=_name(fields.get("issuetype")),
        project=_name(fields.get("project")), site=_name(fields.get("site")),
        labels=as_str_list(fields.get("labels")),
        components=as_str_list([_name(c) for c in fields.get("components") or []]),
        created=fields.get("created"), updated=fields.get("updated"), resolved=fields.get("resolutiondate"),
        comments=comments)


def add_issue(builder: DocumentBuilder, issue: JiraIssue, config: LoaderConfig) -> None:
    """Add ``issue``'s document to ``builder`` (text layout: see the module docstring).

    Raises:
        RecordError: the key is empty or blank.
    """
    key = issue.key
    meta: dict[str, Any] = {
        "ticket_key": key, "jira_id": issue.jira_id, "title": issue.summary or key, "status": issue.status,
        "priority": issue.priority, "resolution": issue.resolution, "assignee": issue.assignee,
        "reporter": issue.reporter, "issue_type": issue.issue_type, "project": issue.project,
        "labels": issue.labels, "components": issue.components, "site": issue.site,
    }
    meta["author"] = meta["reporter"] or meta["assignee"]
    meta.update(time_fields("created", issue.created, config.tz))
    meta.update(time_fields("updated", issue.updated, config.tz))
    meta.update(time_fields("resolved", issue.resolved, config.tz))
    rendered = [f"[{c.created or ''} {c.author or 'unknown'}] {c.body}".replace("[ ", "[")
                for c in issue.comments if c.body]
    meta["n_comments"] = len(rendered)
    facts = " · ".join(f"{label}: {meta[k]}" for label, k in (
        ("Status", "status"), ("Priority", "priority"), ("Resolution", "resolution"),
        ("Assignee", "assignee")) if meta.get(k))
    parts = [f"{key}: {issue.summary}".rstrip(": ")]
    if facts:
        parts.append(facts)
    if issue.labels:
        parts.append("Labels: " + ", ".join(issue.labels))
    if issue.description:
        parts.append("\n" + issue.description)
    if rendered:
        parts.append("\nComments:\n" + "\n".join(rendered))
    builder.add(key, "\n".join(parts), meta)
