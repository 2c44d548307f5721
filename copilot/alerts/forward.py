"""Posting a past-incident answer to a chat channel: the incoming-webhook body Mattermost and Slack
accept (``{"text": ...}``), with the citations as links to the documents.

Mattermost renders Markdown links (``[title](url)``), Slack its own (``<url|title>``); the style
is a setting. Connection failures are retried by httpx's transport (twice); an error status is
the caller's to record, never retried (the channel said no).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal
from urllib.parse import quote

import httpx

from copilot.alerts.question import Alert, alert_host

LinkStyle = Literal["markdown", "slack"]


def document_url(base_url: str, doc_id: str) -> str:
    """The API URL of a stored document (``GET /v1/documents/{id}``) under ``base_url``."""
    return f"{base_url.rstrip('/')}/v1/documents/{quote(doc_id, safe='')}"


_MARKUP = str.maketrans({c: " " for c in "[]()<>|*_~`"})


def _plain(text: str) -> str:
    """A label's value as plain text in the channel: no link, emphasis or mention markup (an alert's
    labels are whoever wrote the rule's, not the channel's: ``@channel`` would page everyone)."""
    return " ".join(text.translate(_MARKUP).replace("@", "@\u200b").split())


@dataclass(frozen=True)
class ChatWebhook:
    """A chat channel's incoming webhook.

    Attributes:
        url: the webhook URL (Mattermost ``/hooks/…``, Slack ``hooks.slack.com/services/…``).
        style: how links are written (``markdown``: Mattermost; ``slack``: Slack's ``<url|text>``).
        timeout_s: one post in all (seconds).
    """

    url: str
    style: LinkStyle = "markdown"
    timeout_s: float = 10.0

    def link(self, url: str, text: str) -> str:
        """``text`` linked to ``url`` in the channel's style."""
        text = " ".join(text.split()).replace("]", ")").replace("|", "/").replace(">", ")")
        return f"<{url}|{text}>" if self.style == "slack" else f"[{text}]({url})"

    def message(self, alert: Alert, answer: dict[str, Any], doc_url: Callable[[str], str]) -> str:
        """The message for an alert's answer (the fields of ``POST /v1/ask``'s response): what
        fired where, the answer, its sources as links, "no earlier occurrence" when the records
        hold none, the literals found in no source (``unverified``: the alert's own text may have
        put them there) and the destructive commands never to run as written."""
        where = alert_host(alert.labels)
        head = f"🔔 {_plain(alert.name)}" + (f" on {_plain(where)}" if where else "") + \
            f" (firing since {_plain(alert.starts_at)})"
        lines = [head]
        if answer.get("not_found"):
            lines.append("No earlier occurrence found in the records.")
        lines.append(answer.get("answer", "").strip())
        sources = answer.get("sources", [])
        if sources:
            links = [f"[{s['n']}] " + self.link(doc_url(s["doc_id"]), s.get("title") or s["doc_id"]) for s in sources]
            lines.append("Sources: " + " · ".join(links))
        unverified = list(dict.fromkeys(u["literal"] for u in answer.get("unverified", [])))
        if unverified:
            lines.append("Not in the sources — check before running: " + ", ".join(f"`{u}`" for u in unverified))
        commands = list(dict.fromkeys(d["command"] for d in answer.get("destructive", [])))
        if commands:
            lines.append("⚠ Destructive — do not run as written: " + ", ".join(f"`{c}`" for c in commands))
        return "\n".join(line for line in lines if line)

    async def post(self, text: str) -> None:
        """Post ``text`` to the channel.

        Raises:
            httpx.HTTPError: the channel could not be reached (after two retries), or answered
                an error status.
        """
        transport = httpx.AsyncHTTPTransport(retries=2)
        async with httpx.AsyncClient(transport=transport, timeout=self.timeout_s) as client:
            response = await client.post(self.url, json={"text": text})
            response.raise_for_status()
