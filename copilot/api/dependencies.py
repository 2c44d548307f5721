"""FastAPI dependencies: settings, the service, the batch scheduler, metrics, ingest jobs, API-key auth."""

from __future__ import annotations

import secrets

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from copilot.api.jobs import IngestJobManager
from copilot.api.metrics import Metrics
from copilot.api.scheduler import BatchScheduler
from copilot.config import Settings
from copilot.service import CopilotService

_bearer = HTTPBearer(auto_error=False, description="an API key from COPILOT_API_KEYS")


def get_settings(request: Request) -> Settings:
    """The app's settings."""
    return request.app.state.settings


def get_service(request: Request) -> CopilotService:
    """The app's service (store, retriever, engine)."""
    return request.app.state.service


def get_scheduler(request: Request) -> BatchScheduler:
    """The batch scheduler (questions queue for it; it owns the model)."""
    return request.app.state.scheduler


def get_metrics(request: Request) -> Metrics:
    """The app's Prometheus metrics."""
    return request.app.state.metrics


def get_ingest_jobs(request: Request) -> IngestJobManager:
    """The ingest job manager."""
    return request.app.state.ingest_jobs


def _check_key(settings: Settings, request: Request, credentials: HTTPAuthorizationCredentials | None) -> None:
    """401 without a usable ``Authorization: Bearer`` header, 403 for a key that is not configured."""
    if not settings.api_keys:
        return
    if credentials is None:
        header = request.headers.get("authorization")
        reason = ("missing API key: send 'Authorization: Bearer <key>'" if not header
                  else "malformed Authorization header: expected 'Bearer <key>'")
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, reason, headers={"WWW-Authenticate": "Bearer"})
    given = credentials.credentials.encode()
    if not any(secrets.compare_digest(given, k.get_secret_value().encode()) for k in settings.api_keys):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "invalid API key")


def require_api_key(request: Request, settings: Settings = Depends(get_settings),
                    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """Ingest and delete: a valid key is required whenever keys are configured.

    Raises:
        HTTPException: 401 (no or malformed key) or 403 (unknown key).
    """
    _check_key(settings, request, credentials)


def read_auth(request: Request, settings: Settings = Depends(get_settings),
              credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """Reading stored content (``GET /v1/documents``, ``/v1/search``): a key is required when keys
    are configured, unless ``public_reads``.

    Raises:
        HTTPException: 401 or 403 as :func:`require_api_key`.
    """
    if not settings.public_reads:
        _check_key(settings, request, credentials)


def ask_auth(request: Request, settings: Settings = Depends(get_settings),
             credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """Ask, chat and the model list: answers quote stored content, so they are reads: a key is
    required when keys are configured, unless ``public_reads`` (and then still with
    ``require_key_for_ask``).

    Raises:
        HTTPException: 401 or 403 as :func:`require_api_key`.
    """
    if settings.require_key_for_ask or not settings.public_reads:
        _check_key(settings, request, credentials)
