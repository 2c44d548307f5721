"""Alertmanager's notifications in, past-incident answers out.

For each firing alert of a notification, :class:`AlertReceiver` keeps a row by fingerprint
(:class:`~copilot.alerts.table.AlertTable`) and answers the alert's question
(:func:`~copilot.alerts.question.alert_question`) through the same use case as ``POST /v1/ask``
(:func:`copilot.serving.use_cases.ask`: the batch scheduler, the checks, the caller's scope), in
the background: Alertmanager gets its answer at once and does not resend. A repeat notification
of an occurrence already answered (or being answered) is not recomputed; a resolved alert is
marked so. The answer then goes to the chat webhook, when one is configured.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

from copilot.access import Access
from copilot.alerts.forward import ChatWebhook, document_url
from copilot.alerts.question import Alert, alert_problem, alert_question, searchable
from copilot.alerts.table import AlertTable, State
from copilot.answer.assembly import Answer
from copilot.answer.question import QuestionRequest
from copilot.serving import use_cases
from copilot.serving.question_job import QuestionQueue
from copilot.serving.scheduler import QueueFullError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Receipt:
    """What a notification started: fingerprints answering now, kept (already answered), resolved,
    and deferred (the backlog of answers is full: not stored, the next notification brings them)."""

    answering: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Claimed:
    """An answer under way: the row it may finish (scope, fingerprint, claim id)."""

    scope: str
    fingerprint: str
    claim: str


@dataclass(frozen=True)
class Caller:
    """Who sent a notification: its access (the answer sees only what it may read), its
    credentials (the reservation key) and the server's base URL as it called it (the links)."""

    access: Access
    credentials: str
    base_url: str
    name: str | None = None


class AlertReceiver:
    """Answers firing alerts in the background and keeps the answers.

    Args:
        table: where the answers are kept.
        questions: the question queue (read when an answer starts: the scheduler lives in the app).
        render: an answer as the JSON ``POST /v1/ask`` gives (kept, and posted to the webhook).
        webhook: the chat channel the answers go to (None: none).
        concurrency: alerts answered at once; the others wait their turn here, so that a burst of
            alerts (a whole rack going down) never fills the generation queue operators' questions share.
        backlog: answers waiting or under way at most; the firing alerts past it are deferred (not
            stored: Alertmanager's next notification of them brings them again).
        queue_wait_s: how long an answer waits out a full generation queue (seconds) before it fails.
    """

    def __init__(self, table: AlertTable, questions: Callable[[], QuestionQueue],
                 render: Callable[[Answer], dict[str, Any]], webhook: ChatWebhook | None = None,
                 concurrency: int = 2, backlog: int = 64, queue_wait_s: float = 600.0) -> None:
        self.table = table
        self.questions = questions
        self.render = render
        self.webhook = webhook
        self.backlog = backlog
        self.queue_wait_s = queue_wait_s
        self._turns = asyncio.Semaphore(concurrency)
        self._tasks: dict[asyncio.Task[None], _Claimed] = {}

    async def receive(self, alerts: Sequence[Alert], caller: Caller) -> Receipt:
        """Start answering the firing alerts not answered yet; mark the resolved ones (on the event
        loop). An alert is the caller's scope's: another scope's alert of the same fingerprint is
        another row. A fingerprint repeated within the notification counts once."""
        receipt, scope, seen = Receipt(), caller.access.partition, set()
        for alert in alerts:
            if alert.fingerprint in seen:
                continue
            seen.add(alert.fingerprint)
            if alert.status == "resolved":
                if await asyncio.to_thread(self.table.resolve, scope, alert.fingerprint, alert.ends_at):
                    receipt.resolved.append(alert.fingerprint)
                continue
            if len(self._tasks) >= self.backlog:
                receipt.deferred.append(alert.fingerprint)
                continue
            question = alert_question(alert)
            record = {"alertname": alert.name, "status": "firing", "labels": dict(alert.labels),
                      "annotations": dict(alert.annotations), "question": question, "ends_at": None,
                      "generator_url": alert.generator_url}
            claim = await asyncio.to_thread(self.table.claim, scope, alert.fingerprint, alert.starts_at, caller.name,
                                            record)
            if claim is None:
                receipt.kept.append(alert.fingerprint)
                continue
            claimed = _Claimed(scope, alert.fingerprint, claim)
            task = asyncio.create_task(self._answer(alert, question, caller, claimed))
            self._tasks[task] = claimed
            task.add_done_callback(lambda t: self._tasks.pop(t, None))
            receipt.answering.append(alert.fingerprint)
        if receipt.deferred:
            log.warning("%d firing alert(s) deferred: %d answers are waiting or under way (the backlog)",
                        len(receipt.deferred), len(self._tasks))
        return receipt

    async def _answer(self, alert: Alert, question: str, caller: Caller, claimed: _Claimed) -> None:
        """Answer one alert and keep the answer (or the error); then post it to the webhook."""
        if not searchable(alert):
            await self._finish(claimed, "failed", error="the alert names nothing to search the records by "
                               "(no alertname, summary, description or host label)")
            return
        try:
            async with self._turns:
                started = time.perf_counter()
                async for attempt in AsyncRetrying(retry=retry_if_exception_type(QueueFullError), reraise=True,
                                                   stop=stop_after_delay(self.queue_wait_s),
                                                   wait=wait_exponential(multiplier=1, max=30)):
                    with attempt:
                        asked = QuestionRequest(question, access=caller.access, problem=alert_problem(alert))
                        answer = await use_cases.ask(self.questions(), asked, endpoint="alerts",
                                                     caller=caller.credentials)
            fields = self.render(answer)
        except Exception as exc:  # kept as the alert's error; the next notification tries again
            log.warning("alert %s (%s): no answer: %s", alert.name, alert.fingerprint, exc)
            await self._finish(claimed, "failed", error=str(exc) or repr(exc))
            return
        forwarded = None if self.webhook is None else False
        if not await self._finish(claimed, "answered", answer=fields, forwarded=forwarded,
                                  answer_s=round(time.perf_counter() - started, 3)):
            return  # claimed again since: this answer is void
        log.info("alert %s (%s) answered: %d sources, not_found=%s", alert.name, alert.fingerprint,
                 len(fields.get("sources", [])), fields.get("not_found"))
        if self.webhook is not None:
            await self._forward(alert, fields, caller.base_url, claimed)

    async def _finish(self, claimed: _Claimed, state: State, **fields: Any) -> bool:
        """:meth:`AlertTable.finish` off the event loop."""
        return await asyncio.to_thread(self.table.finish, claimed.scope, claimed.fingerprint, claimed.claim, state,
                                       **fields)

    async def _forward(self, alert: Alert, fields: dict[str, Any], base_url: str, claimed: _Claimed) -> None:
        """Post an answer to the webhook and record whether it went."""
        assert self.webhook is not None
        text = self.webhook.message(alert, fields, lambda doc_id: document_url(base_url, doc_id))
        try:
            await self.webhook.post(text)
        except httpx.HTTPError as exc:
            log.warning("alert %s (%s): the chat webhook refused the answer: %s", alert.name, alert.fingerprint, exc)
            await self._finish(claimed, "answered", forward_error=str(exc))
            return
        await self._finish(claimed, "answered", forwarded=True)

    async def close(self) -> None:
        """Cancel the answers under way (at shutdown) and mark their alerts failed ("interrupted"),
        so that the next notification of each, after a restart, answers it again."""
        pending = dict(self._tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for claimed in pending.values():
            await self._finish(claimed, "failed", error="interrupted: the server stopped before answering")
