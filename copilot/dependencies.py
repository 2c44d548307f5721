"""FastAPI dependencies: settings, the service, the worker, API-key auth."""

from __future__ import annotations

import secrets

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from copilot.config import Settings
from copilot.service import CopilotService
from copilot.worker import GenerationWorker

_bearer = HTTPBearer(auto_error=False)


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_service(request: Request) -> CopilotService:
    return request.app.state.service


def get_worker(request: Request) -> GenerationWorker:
    return request.app.state.worker


def _check_key(settings: Settings, credentials: HTTPAuthorizationCredentials | None) -> None:
    if not settings.api_keys:
        return
    if credentials is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing API key: send 'Authorization: Bearer <key>'",
                            headers={"WWW-Authenticate": "Bearer"})
    if not any(secrets.compare_digest(credentials.credentials, k.get_secret_value()) for k in settings.api_keys):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "invalid API key")


def require_api_key(settings: Settings = Depends(get_settings),
                    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """Ingest and delete: a valid key is required whenever keys are configured."""
    _check_key(settings, credentials)


def ask_auth(settings: Settings = Depends(get_settings),
             credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """Ask: a key is required only with ``require_key_for_ask``."""
    if settings.require_key_for_ask:
        _check_key(settings, credentials)
