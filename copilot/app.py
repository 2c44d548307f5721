"""The FastAPI application factory."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI

from copilot.config import Settings, get_settings
from copilot.routers import ask, health
from copilot.service import CopilotService
from copilot.worker import GenerationWorker

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, service: CopilotService | None = None) -> FastAPI:
    """Build the app. The service (store + models) is created at start-up unless given.

    Args:
        settings: defaults to :func:`get_settings` (environment).
        service: an already-built service (tests share one across apps).
    """
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.settings = settings
        app.state.service = service or CopilotService.from_settings(settings)
        app.state.worker = GenerationWorker(max_queue=settings.queue_size)
        log.info("OpsCopilot ready: model %s, store %s", settings.target_model,
                 settings.chroma_url or settings.data_dir)
        yield
        app.state.worker.close()

    app = FastAPI(title="OpsCopilot", version="0.1.0", lifespan=lifespan,
                  description="Question answering over operations logbooks and tickets, with citations.")
    app.include_router(health.router)
    app.include_router(ask.router)
    return app
