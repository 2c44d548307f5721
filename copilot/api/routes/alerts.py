"""``POST /v1/alerts/alertmanager`` (Prometheus Alertmanager's webhook receiver), ``GET /v1/alerts``.

Point an Alertmanager receiver at ``/v1/alerts/alertmanager`` (``webhook_configs``, with the key
in ``http_config.authorization.credentials``). For each firing alert OpsCopilot asks its records
"what fixed it when this happened before, and when was that?" (:mod:`copilot.alerts`) and keeps the answer,
listed here and on the page; a chat webhook gets it too when ``alerts_webhook_url`` is set.
The notification is answered 202 at once; the answers follow in the background.

A key is needed whenever keys are configured (``public_reads`` does not open this route), and
its scope is the answer's: only documents it may read are searched and shown. Alerts are kept per
read scope: a key sees, replaces and resolves only the alerts sent with keys of its own scope
(whatever their names); a key that may read everything sees all of them.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from fastapi import APIRouter, HTTPException, Query, Request, status

from copilot.alerts.question import Alert
from copilot.alerts.receiver import Caller
from copilot.alerts.table import AlertRow
from copilot.api.dependencies import AlertsDep, KeyAccess, ReadAccess, SettingsDep
from copilot.api.openapi import error_responses
from copilot.api.schemas.alerts import AlertAnswerOut, AlertAnswerPage, AlertmanagerWebhook, AlertsAccepted
from copilot.search.filters import Text

router = APIRouter(prefix="/v1/alerts", tags=["alerts"])


def _iso(value: datetime | None) -> str | None:
    """Alertmanager's time as ISO 8601; its zero time (``0001-01-01``: still firing) is None."""
    return None if value is None or value.year <= 1 else value.isoformat()


@router.post("/alertmanager", status_code=status.HTTP_202_ACCEPTED, response_model=AlertsAccepted,
             responses=error_responses(400, 401, 403))
async def alertmanager(body: AlertmanagerWebhook, request: Request, alerts: AlertsDep, settings: SettingsDep,
                       access: KeyAccess) -> AlertsAccepted:
    """Take a notification: each firing alert not answered yet is answered in the background
    (poll ``GET /v1/alerts/{fingerprint}``); a repeat of an answered alert is kept, not
    recomputed; a resolved alert is marked resolved. Errors: 400 a malformed notification
    (``error.param`` names the field)."""
    caller = Caller(access, request.headers.get("authorization") or (request.client.host if request.client else ""),
                    settings.public_url or str(request.base_url), access.name)
    receipt = await alerts.receive([Alert(a.fingerprint, a.status, a.labels, a.annotations, a.startsAt.isoformat(),
                                          _iso(a.endsAt), a.generatorURL) for a in body.alerts], caller)
    return AlertsAccepted(answering=receipt.answering, kept=receipt.kept, resolved=receipt.resolved,
                          deferred=receipt.deferred)


def _out(row: AlertRow) -> AlertAnswerOut:
    record = row.record
    return AlertAnswerOut(fingerprint=row.fingerprint, alertname=record.get("alertname", ""),
                          status=record.get("status", "firing"), state=row.state,
                          starts_at=datetime.fromisoformat(row.starts_at),
                          ends_at=datetime.fromisoformat(record["ends_at"]) if record.get("ends_at") else None,
                          received=datetime.fromtimestamp(row.received).astimezone(),
                          labels=record.get("labels", {}), annotations=record.get("annotations", {}),
                          question=record.get("question", ""), answer=record.get("answer"),
                          answer_s=record.get("answer_s"),
                          error=record.get("error") or record.get("forward_error"), forwarded=record.get("forwarded"),
                          submitted_by=row.submitted_by)


@router.get("", response_model=AlertAnswerPage, responses=error_responses(401, 403))
async def list_alerts(alerts: AlertsDep, access: ReadAccess,
                      offset: int = Query(0, ge=0, le=2**63 - 1), limit: int = Query(50, ge=1, le=1000)
                      ) -> AlertAnswerPage:
    """The kept alerts and their answers, newest first: those sent with keys of the caller's read
    scope (a key that may read everything sees all)."""
    scope = None if access.reads_all else access.partition
    rows, total = await asyncio.to_thread(alerts.table.page, offset, limit, scope)
    return AlertAnswerPage(total=total, offset=offset, limit=limit, alerts=[_out(r) for r in rows])


@router.get("/{fingerprint}", response_model=AlertAnswerOut, responses=error_responses(401, 403, 404))
async def get_alert(fingerprint: Text, alerts: AlertsDep, access: ReadAccess) -> AlertAnswerOut:
    """One kept alert and its answer (404 if unknown, or sent with a key of another read scope)."""
    row = await asyncio.to_thread(alerts.table.find, fingerprint, None if access.reads_all else access.partition)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no alert with fingerprint {fingerprint!r}")
    return _out(row)
