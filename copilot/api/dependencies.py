"""FastAPI dependencies: settings, the service, the batch scheduler, metrics, ingest jobs, and
the caller's :class:`~copilot.access.Access` from its API key.

Every auth dependency returns the caller's access (routes that filter by it take it as a
parameter): without configured keys everyone has :data:`~copilot.access.FULL_ACCESS`; with
keys, a missing or malformed ``Authorization: Bearer`` header is a 401 and an unknown key a
403, unless the route is open to anonymous readers (``public_reads``): a request without an
``Authorization`` header then gets the keys file's ``public`` scope (default: read
everything); one with a wrong key is still a 403.

Routes take them through the ``Annotated`` aliases at the end (``service: ServiceDep``), as
the FastAPI full-stack template does.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import State

from copilot.access import FULL_ACCESS, Access, KeyRing
from copilot.alerts.receiver import AlertReceiver
from copilot.api.errors import ParameterError
from copilot.api.metrics import Metrics
from copilot.config import Settings
from copilot.feedback.ratings import FeedbackTable
from copilot.service import CopilotService
from copilot.serving.ingest_jobs import IngestJobManager
from copilot.serving.question_job import QuestionQueue
from copilot.serving.reindex_runner import ReindexRunner
from ingestion.embedding import Embedder
from ingestion.stores.chunk_store import ChunkStore

log = logging.getLogger(__name__)
_bearer = HTTPBearer(auto_error=False, description="an API key from COPILOT_API_KEYS or the keys file")


def get_settings(request: Request) -> Settings:
    """The app's settings."""
    settings: Settings = request.app.state.settings  # starlette's State holds untyped attributes
    return settings


def get_service(request: Request) -> CopilotService:
    """The app's service (store, retriever, engine)."""
    service: CopilotService = request.app.state.service
    return service


def get_store(request: Request) -> ChunkStore:
    """The service's chunk store (reading stored documents)."""
    return get_service(request).store


def get_embedder(request: Request) -> Embedder:
    """The store's embedding model."""
    return get_service(request).store.embedder


def get_metrics(request: Request) -> Metrics:
    """The app's Prometheus metrics."""
    metrics: Metrics = request.app.state.metrics
    return metrics


def get_questions(request: Request) -> QuestionQueue:
    """Where questions are queued and answered (the service, the scheduler, the metrics)."""
    state = request.app.state
    return QuestionQueue(state.service, state.scheduler, state.metrics)


def get_feedback(request: Request) -> FeedbackTable:
    """The answer ratings (👍/👎) kept in the store's database."""
    feedback: FeedbackTable = request.app.state.feedback
    return feedback


def get_ingest_jobs(request: Request) -> IngestJobManager:
    """The ingest job manager."""
    jobs: IngestJobManager = request.app.state.ingest_jobs
    return jobs


def app_keyring(state: State, settings: Settings) -> KeyRing:
    """The app's keys (the flat ``api_keys`` and the keys file's), built on first use and kept in ``state``."""
    ring = getattr(state, "keyring", None)
    if ring is None:
        ring = state.keyring = KeyRing.build([k.get_secret_value() for k in settings.api_keys], settings.keys)
    return ring


def get_keyring(request: Request, settings: Settings = Depends(get_settings)) -> KeyRing:
    """The app's keys (:func:`app_keyring`)."""
    return app_keyring(request.app.state, settings)


def _access(ring: KeyRing, request: Request, credentials: HTTPAuthorizationCredentials | None,
            anonymous_ok: bool) -> Access:
    """The caller's access: 401 without a usable ``Authorization: Bearer`` header, 403 for a key
    that is not configured; an anonymous caller (no ``Authorization`` header at all) gets the
    public scope where ``anonymous_ok``. A mistyped key is a 403 there too, never the public scope."""
    if not ring.enabled:
        return FULL_ACCESS
    access = ring.lookup(credentials.credentials) if credentials is not None else None
    if access is not None:
        return access
    if anonymous_ok and request.headers.get("authorization") is None:
        return ring.public
    if credentials is None:
        header = request.headers.get("authorization")
        reason = ("missing API key: send 'Authorization: Bearer <key>'" if not header
                  else "malformed Authorization header: expected 'Bearer <key>'")
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, reason, headers={"WWW-Authenticate": "Bearer"})
    raise ParameterError(status.HTTP_403_FORBIDDEN, "invalid API key", None, "invalid_api_key")


def caller_access(request: Request, settings: Settings, ask: bool) -> Access:
    """The caller's access from its ``Authorization: Bearer`` header, by the rules of the read
    routes (``ask``: those of ``/v1/ask``, see :func:`ask_auth`), for an app mounted beside the
    routes (the MCP endpoint, :mod:`copilot.api.mcp`).

    Raises:
        HTTPException: 401 (no or malformed key) or 403 (unknown key).
    """
    scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
    credentials = (HTTPAuthorizationCredentials(scheme=scheme, credentials=token.strip())
                   if scheme.lower() == "bearer" and token.strip() else None)
    anonymous_ok = settings.public_reads and not (ask and settings.require_key_for_ask)
    return _access(app_keyring(request.app.state, settings), request, credentials, anonymous_ok)


def require_api_key(request: Request, ring: KeyRing = Depends(get_keyring),
                    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Access:
    """A valid key whenever keys are configured (ingest jobs, feedback lists): its access.

    Raises:
        HTTPException: 401 (no or malformed key) or 403 (unknown key).
    """
    return _access(ring, request, credentials, anonymous_ok=False)


def read_auth(request: Request, settings: Settings = Depends(get_settings), ring: KeyRing = Depends(get_keyring),
              credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Access:
    """Reading stored content (``/v1/documents``, ``/v1/search``): a key is required when keys
    are configured, unless ``public_reads``.

    Raises:
        HTTPException: 401 or 403 as :func:`require_api_key`.
    """
    return _access(ring, request, credentials, anonymous_ok=settings.public_reads)


def ask_auth(request: Request, settings: Settings = Depends(get_settings), ring: KeyRing = Depends(get_keyring),
             credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Access:
    """Ask, chat and the model list: answers quote stored content, so they are reads: a key is
    required when keys are configured, unless ``public_reads`` (and then still with
    ``require_key_for_ask``).

    Raises:
        HTTPException: 401 or 403 as :func:`require_api_key`.
    """
    anonymous_ok = settings.public_reads and not settings.require_key_for_ask
    return _access(ring, request, credentials, anonymous_ok=anonymous_ok)


def _with_right(access: Access, allowed: bool, action: str) -> Access:
    """``access``, or a 403 naming the key and the ``action`` it may not do."""
    if not allowed:
        log.info("refused: API key %r may not %s", access.name, action)
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"the API key {access.name!r} may not {action}")
    return access


def ingest_access(access: Access = Depends(require_api_key)) -> Access:
    """Ingest: a key with the ``ingest`` right (every key when none is configured).

    Raises:
        HTTPException: 401/403 as :func:`require_api_key`; 403 for a key without the right.
    """
    return _with_right(access, access.can_ingest, "ingest")


def delete_access(access: Access = Depends(require_api_key)) -> Access:
    """Delete: a key with the ``delete`` right (every key when none is configured).

    Raises:
        HTTPException: 401/403 as :func:`require_api_key`; 403 for a key without the right.
    """
    return _with_right(access, access.can_delete, "delete")


def admin_access(access: Access = Depends(require_api_key)) -> Access:
    """Store-wide maintenance (rebuilding the dense index): a key with the ``ingest`` and ``delete``
    rights and no read restriction (every key when none is configured).

    Raises:
        HTTPException: 401/403 as :func:`require_api_key`; 403 for any other key.
    """
    return _with_right(access, access.can_ingest and access.can_delete and access.reads_all,
                       "maintain the whole store (that needs the ingest and delete rights and no read scope)")


def get_alerts(request: Request) -> AlertReceiver:
    """The Alertmanager receiver and its kept answers."""
    receiver: AlertReceiver = request.app.state.alerts
    return receiver


def get_reindex(request: Request) -> ReindexRunner:
    """The dense-index rebuild runner."""
    runner: ReindexRunner = request.app.state.reindex
    return runner


SettingsDep = Annotated[Settings, Depends(get_settings)]
ServiceDep = Annotated[CopilotService, Depends(get_service)]
StoreDep = Annotated[ChunkStore, Depends(get_store)]
EmbedderDep = Annotated[Embedder, Depends(get_embedder)]
QuestionsDep = Annotated[QuestionQueue, Depends(get_questions)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
FeedbackDep = Annotated[FeedbackTable, Depends(get_feedback)]
IngestJobsDep = Annotated[IngestJobManager, Depends(get_ingest_jobs)]
#: The caller's access, by what the route does (see the auth dependencies above).
AskAccess = Annotated[Access, Depends(ask_auth)]
ReadAccess = Annotated[Access, Depends(read_auth)]
KeyAccess = Annotated[Access, Depends(require_api_key)]
IngestAccess = Annotated[Access, Depends(ingest_access)]
DeleteAccess = Annotated[Access, Depends(delete_access)]
AdminAccess = Annotated[Access, Depends(admin_access)]
ReindexDep = Annotated[ReindexRunner, Depends(get_reindex)]
AlertsDep = Annotated[AlertReceiver, Depends(get_alerts)]
