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
from copilot.alerts.question import Alert, alert_problem, alert_question
from copilot.alerts.table import AlertTable
from copilot.answer.assembly import Answer
from copilot.answer.question import QuestionRequest
from copilot.serving import use_cases
from copilot.serving.question_job import QuestionQueue
from copilot.serving.scheduler import QueueFullError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Receipt:
    """What a notification started: fingerprints answering now, kept (already answered) and resolved."""

    answering: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)


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
        queue_wait_s: how long an answer waits out a full generation queue (seconds) before it fails.
    """

    def __init__(self, table: AlertTable, questions: Callable[[], QuestionQueue],
                 render: Callable[[Answer], dict[str, Any]], webhook: ChatWebhook | None = None,
                 concurrency: int = 2, queue_wait_s: float = 600.0) -> None:
        self.table = table
        self.questions = questions
        self.render = render
        self.webhook = webhook
        self.queue_wait_s = queue_wait_s
        self._turns = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()

    async def receive(self, alerts: Sequence[Alert], caller: Caller) -> Receipt:
        """Start answering the firing alerts not answered yet; mark the resolved ones (on the event loop)."""
        receipt = Receipt()
        for alert in alerts:
            if alert.status == "resolved":
                if await asyncio.to_thread(self.table.resolve, alert.fingerprint, alert.ends_at):
                    receipt.resolved.append(alert.fingerprint)
                continue
            question = alert_question(alert)
            record = {"alertname": alert.name, "status": "firing", "labels": dict(alert.labels),
                      "annotations": dict(alert.annotations), "question": question, "ends_at": None,
                      "generator_url": alert.generator_url}
            claimed = await asyncio.to_thread(self.table.claim, alert.fingerprint, alert.starts_at, caller.name,
                                              record)
            if not claimed:
                receipt.kept.append(alert.fingerprint)
                continue
            task = asyncio.create_task(self._answer(alert, question, caller))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            receipt.answering.append(alert.fingerprint)
        return receipt

    async def _answer(self, alert: Alert, question: str, caller: Caller) -> None:
        """Answer one alert and keep the answer (or the error); then post it to the webhook."""
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
            await asyncio.to_thread(self.table.finish, alert.fingerprint, "failed", error=str(exc) or repr(exc))
            return
        forwarded = None if self.webhook is None else False
        await asyncio.to_thread(self.table.finish, alert.fingerprint, "answered", answer=fields, forwarded=forwarded,
                                answer_s=round(time.perf_counter() - started, 3))
        log.info("alert %s (%s) answered: %d sources, not_found=%s", alert.name, alert.fingerprint,
                 len(fields.get("sources", [])), fields.get("not_found"))
        if self.webhook is not None:
            await self._forward(alert, fields, caller.base_url)

    async def _forward(self, alert: Alert, fields: dict[str, Any], base_url: str) -> None:
        """Post an answer to the webhook and record whether it went."""
        assert self.webhook is not None
        text = self.webhook.message(alert, fields, lambda doc_id: document_url(base_url, doc_id))
        try:
            await self.webhook.post(text)
        except httpx.HTTPError as exc:
            log.warning("alert %s (%s): the chat webhook refused the answer: %s", alert.name, alert.fingerprint, exc)
            await asyncio.to_thread(self.table.finish, alert.fingerprint, "answered", forward_error=str(exc))
            return
        await asyncio.to_thread(self.table.finish, alert.fingerprint, "answered", forwarded=True)

    async def close(self) -> None:
        """Cancel the answers under way (at shutdown); their rows stay ``answering`` until they
        are stale (:attr:`AlertTable.stale_s`), when the next notification answers them again."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
