"""The FastAPI application factory."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from copilot.alerts.forward import ChatWebhook
from copilot.alerts.receiver import AlertReceiver
from copilot.alerts.table import AlertTable
from copilot.api import errors, logs, openapi
from copilot.api.limits import BodyLimitMiddleware
from copilot.api.mcp import mount_mcp
from copilot.api.metrics import Metrics, MetricsMiddleware
from copilot.api.routes import (
    alerts,
    ask,
    chat,
    completions,
    documents,
    embeddings,
    feedback,
    health,
    index,
    ingest,
    metrics,
    models,
    responses,
    search,
    ui,
)
from copilot.api.schemas.ask import ask_fields
from copilot.api.server import bound_port
from copilot.config import Settings, get_settings
from copilot.feedback.ratings import FeedbackTable
from copilot.service import CopilotService
from copilot.serving.ingest_jobs import IngestJobManager, JobQueueConfig
from copilot.serving.question_job import QuestionQueue
from copilot.serving.reindex_runner import ReindexRunner
from copilot.serving.scheduler import BatchScheduler, make_batch
from copilot.serving.source_watch import start_source_watch

log = logging.getLogger(__name__)


def default_replica_id(port: int) -> str:
    """``host:port/pid``: the host name, the port this process serves on and its process id, so
    that no two live processes share a name (two replicas on one host, a restart on the same
    port, several workers on one port). A replica never interrupts a job whose owner still
    renews its lease, so a restarted replica finds its old jobs ``interrupted`` once their
    lease expires (:class:`copilot.serving.job_table.JobTable`)."""
    return f"{socket.gethostname()}:{port}/{os.getpid()}"


def create_app(settings: Settings | None = None, service: CopilotService | None = None) -> FastAPI:
    """Build the app. The service (store + models) is created at start-up unless given.

    Args:
        settings: defaults to :func:`get_settings` (environment and config file).
        service: an already-built service (tests share one across apps); it is not closed
            at shutdown.
    Routes: ``/`` (the page), ``/v1/ask``, ``/v1/search``, ``/v1/ingest``, ``/v1/documents``,
    ``/v1/feedback``, ``/v1/index``, ``/v1/alerts``; OpenAI's ``/v1/chat/completions``, ``/v1/completions``,
    ``/v1/responses``, ``/v1/embeddings``, ``/v1/models``; the MCP server at ``/mcp``; ``/healthz``, ``/readyz``,
    ``/metrics`` (see ``/docs``).
    At start-up the root logger gets one handler in ``log_format``
    (see :func:`copilot.api.logs.configure`). The replica id is ``settings.replica_id``, else
    :func:`default_replica_id` of the port the server bound (``app.state.bound_port``, set by
    :mod:`copilot.api.server`), else of ``settings.port``.
    """
    settings = settings or get_settings()
    app_metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        logs.configure(settings.log_format)  # here, after uvicorn configured its own loggers
        app.state.settings = settings
        app.state.metrics = app_metrics
        app.state.started_at = time.time()
        if service is None:
            app.state.service = await asyncio.to_thread(CopilotService.from_settings, settings)
            await asyncio.to_thread(app.state.service.warm_up)
        else:
            app.state.service = service
        app.state.scheduler = BatchScheduler(lambda: make_batch(app.state.service.models.engine), settings.max_batch,
                                             settings.queue_size, settings.retry_after_s)
        app_metrics.bind_queue(lambda: app.state.scheduler.depth, lambda: app.state.scheduler.batch_size,
                               lambda: app.state.scheduler.capacity, lambda: len(app.state.scheduler.reservations))
        replica_id = settings.replica_id or default_replica_id(bound_port(app) or settings.port)
        jobs_config = JobQueueConfig(replica_id, ingest_root=settings.ingest_root, lease_s=settings.job_lease_s)
        app.state.ingest_jobs = await asyncio.to_thread(
            IngestJobManager, app.state.service.store, settings.uploads_dir, jobs_config,
            on_finish=lambda job: app_metrics.ingest_jobs.labels(job.status).inc())
        app.state.feedback = await asyncio.to_thread(FeedbackTable, app.state.service.store.db)
        app.state.reindex = ReindexRunner(app.state.service.store)
        webhook = (ChatWebhook(settings.alerts_webhook_url, settings.alerts_webhook_style)
                   if settings.alerts_webhook_url else None)
        alert_table = await asyncio.to_thread(AlertTable, app.state.service.store.db, settings.alerts_keep)
        app.state.alerts = AlertReceiver(alert_table, lambda: QuestionQueue(app.state.service, app.state.scheduler,
                                                                            app_metrics), ask_fields, webhook,
                                         settings.alerts_concurrency, settings.alerts_backlog)
        app.state.source_watch = start_source_watch(settings, app.state.service.store, app_metrics.registry)
        log.info("OpsCopilot ready: model %s, store %s, replica %s", settings.target_model,
                 app.state.service.store.db.location, app.state.ingest_jobs.replica_id)
        try:
            async with mcp_server.session_manager.run():
                yield
        finally:
            await app.state.alerts.close()
            if app.state.source_watch is not None:  # COPILOT_WATCH_PATHS
                await asyncio.to_thread(app.state.source_watch.stop)
            app.state.ingest_jobs.close()
            app.state.scheduler.close()
            if service is None:  # built here: nothing of it may outlive the app (a thread in torch aborts the exit)
                app.state.service.models.stop_background()

    app = FastAPI(title="OpsCopilot", version="0.1.0", lifespan=lifespan,
                  description="Question answering over operations logbooks and tickets, with citations.")
    errors.install(app)
    openapi.install(app)
    _add_middleware(app, settings, app_metrics)
    mcp_server = app.state.mcp = mount_mcp(app, settings)
    for router in (health.router, metrics.router, ask.router, search.router, models.router, chat.router,
                   completions.router, embeddings.router, responses.router, ingest.router, documents.router,
                   index.router, feedback.router, alerts.router, ui.router):
        app.include_router(router)
    return app


def _add_middleware(app: FastAPI, settings: Settings, app_metrics: Metrics) -> None:
    """Outermost first: request ids (``X-Request-Id`` on every response, in every log line),
    metrics (413s and CORS answers are counted too), CORS (only with ``cors_origins``), body limits."""
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes,
                       max_upload_bytes=settings.max_upload_bytes, upload_paths=("/v1/ingest",))
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                           allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
                           allow_headers=["Authorization", "Content-Type", logs.HEADER],
                           expose_headers=[logs.HEADER, "Retry-After"], max_age=600)
    app.add_middleware(MetricsMiddleware, metrics=app_metrics)
    app.add_middleware(logs.RequestIdMiddleware)
