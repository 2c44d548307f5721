"""``/v1/alerts``: Prometheus Alertmanager's webhook notification (version 4) and the past-incident
answers kept for its alerts.

The notification's fields are Alertmanager's own
(https://prometheus.io/docs/alerting/latest/configuration/#webhook_config); fields it may add in
later versions are ignored, a missing or mistyped required one is a 400 naming it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from copilot.search.filters import Text


class AlertmanagerAlert(BaseModel):
    """One alert of a notification."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    labels: dict[Text, Text] = Field(description="alertname, instance, job, host, service, severity, ...")
    annotations: dict[Text, Text] = Field(default_factory=dict, description="summary, description, runbook_url, ...")
    startsAt: datetime
    endsAt: datetime | None = None
    generatorURL: Text = ""
    fingerprint: Text = Field(min_length=1, max_length=128, pattern=r"^[0-9A-Za-z_-]+$",
                              description="Alertmanager's id of the alert (its labels' hash)")


class AlertmanagerWebhook(BaseModel):
    """``POST /v1/alerts/alertmanager``: a webhook notification, as Alertmanager sends it."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [{
        "version": "4", "groupKey": "{}:{alertname=\"DCachePoolReadOnly\"}", "truncatedAlerts": 0,
        "status": "firing", "receiver": "opscopilot", "groupLabels": {"alertname": "DCachePoolReadOnly"},
        "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://alertmanager:9093",
        "alerts": [{"status": "firing", "labels": {"alertname": "DCachePoolReadOnly", "instance": "dc-pool-07:9100",
                                                   "service": "dcache", "severity": "critical"},
                    "annotations": {"summary": "dCache pool dc-pool-07 went read-only"},
                    "startsAt": "2026-03-02T03:12:00Z", "endsAt": "0001-01-01T00:00:00Z",
                    "generatorURL": "", "fingerprint": "5f3a9c0d1e4b2a6c"}]}]})

    version: Literal["4"] = Field(description="the webhook payload version (4 since Alertmanager 0.7)")
    groupKey: Text
    truncatedAlerts: int = 0
    status: Literal["firing", "resolved"]
    receiver: Text = ""
    groupLabels: dict[Text, Text] = Field(default_factory=dict)
    commonLabels: dict[Text, Text] = Field(default_factory=dict)
    commonAnnotations: dict[Text, Text] = Field(default_factory=dict)
    externalURL: Text = ""
    alerts: list[AlertmanagerAlert] = Field(min_length=1, max_length=1000)


class AlertsAccepted(BaseModel):
    """``POST /v1/alerts/alertmanager`` → 202: what happens to each alert of the notification."""

    answering: list[str] = Field(description="fingerprints of firing alerts whose past incidents are being looked up")
    kept: list[str] = Field(description="fingerprints already answered (a repeat notification: not recomputed)")
    resolved: list[str] = Field(description="fingerprints marked resolved")
    deferred: list[str] = Field(default_factory=list, description="firing alerts not taken now: the backlog of "
                                "answers is full (the next notification of them brings them again)")


class AlertAnswerOut(BaseModel):
    """A firing alert and the past-incident answer made for it."""

    fingerprint: str
    alertname: str
    status: Literal["firing", "resolved"]
    state: Literal["answering", "answered", "failed"] = Field(
        description="answering: in the queue; answered: `answer` is set; failed: `error` says why (the next "
        "notification of the alert tries again)")
    starts_at: datetime
    ends_at: datetime | None = None
    received: datetime = Field(description="when the notification that started the answer arrived")
    labels: dict[str, str]
    annotations: dict[str, str]
    question: str = Field(description="what was asked of the records")
    answer: dict[str, Any] | None = Field(None, description="the answer as POST /v1/ask gives it: answer, sources, "
                                          "cited, quotes, unverified, not_found (no earlier occurrence), destructive")
    answer_s: float | None = Field(None, description="seconds the answer took, the wait in the queue included")
    error: str | None = None
    forwarded: bool | None = Field(None, description="posted to the chat webhook (null: no webhook configured)")
    submitted_by: str | None = Field(None, description="the name of the key that sent the notification (alerts are "
                                     "kept per read scope: keys of one scope share them)")


class AlertAnswerPage(BaseModel):
    """``GET /v1/alerts``: newest first."""

    total: int
    offset: int
    limit: int
    alerts: list[AlertAnswerOut]
