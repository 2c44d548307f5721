"""Request ids and log formatting for the server.

Every request gets an id (:class:`RequestIdMiddleware`): the client's ``X-Request-Id`` when
it sent a sane one, else a new one. It is echoed in the response's ``X-Request-Id`` header
and kept in a context variable while the request is handled, so every log line written
meanwhile, by any logger (uvicorn's access log included), carries it
(:class:`RequestIdFilter`). :func:`configure` installs one handler on the root logger, in
plain text or one JSON object per line (``COPILOT_LOG_FORMAT=json``).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import traceback
import uuid
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import TextIO

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

#: The id of the request being handled ("-" outside a request).
request_id_var: ContextVar[str] = ContextVar("copilot_request_id", default="-")

HEADER = "X-Request-Id"
#: A client's id is kept when it is 1-128 characters of letters, digits and ``-_.:/+=@``.
_SANE = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


def new_request_id() -> str:
    """A fresh request id (32 hex digits)."""
    return uuid.uuid4().hex


def sane_request_id(value: str | None) -> str | None:
    """``value`` if it is an id safe to echo and log (see ``_SANE``), else None."""
    return value if value is not None and _SANE.fullmatch(value) else None


class RequestIdMiddleware:
    """Pure ASGI middleware: give each HTTP request an id, set :data:`request_id_var` while it
    runs and add ``X-Request-Id`` to its response.

    It sits outside every other middleware of the app, so 413s, CORS answers and errors carry
    the id too; an exception that escapes the app before the response started is logged (with
    the id) and answered here with a 500 that names the id.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = None
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                given = sane_request_id(value.decode("latin-1"))
                break
        request_id = given or new_request_id()
        token = request_id_var.set(request_id)
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                MutableHeaders(scope=message)[HEADER] = request_id
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise
            await _send_500(send, scope, request_id)
        finally:
            request_id_var.reset(token)


async def _send_500(send: Send, scope: Scope, request_id: str) -> None:
    message = f"internal server error (request id {request_id})"
    body: dict[str, object] = {"detail": message}
    if str(scope.get("path", "")).startswith(("/v1/chat/", "/v1/models")):
        body["error"] = {"message": message, "type": "server_error", "param": None, "code": None}
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": 500,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            (HEADER.lower().encode(), request_id.encode())]})
    await send({"type": "http.response.body", "body": data})


class RequestIdFilter(logging.Filter):
    """Adds ``record.request_id`` (the current request's id, or ``-``) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Annotate ``record``; never drops it."""
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC ISO 8601), ``level``, ``logger``, ``message``,
    ``request_id``, and ``exception`` (the formatted traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        out = {"time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
               "level": record.levelname, "logger": record.name, "message": record.getMessage(),
               "request_id": getattr(record, "request_id", request_id_var.get())}
        if record.exc_info:
            out["exception"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = record.stack_info
        return json.dumps(out, ensure_ascii=True, default=str)


class _StderrHandler(logging.StreamHandler[TextIO]):
    """A stream handler writing to whatever ``sys.stderr`` is at the time of each record
    (test runners swap it), marked so :func:`configure` can replace it."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:  # noqa: D401 - property
        """The current ``sys.stderr``."""
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


#: Loggers that uvicorn configures with their own handlers; made to go through the root's.
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def configure(log_format: str = "text") -> logging.Handler:
    """Send every log record through one root handler in ``log_format`` (``text`` or ``json``),
    each annotated with its request id.

    Idempotent: a handler installed by an earlier call, and plain ``StreamHandler``s that
    ``logging.basicConfig`` or uvicorn put on the root and uvicorn's loggers, are replaced,
    so no line is written twice; other handlers (files, test capture) are left alone. The
    root level is raised to INFO only when nothing configured it (still the default WARNING
    with no handler).

    Returns:
        The installed handler.
    """
    root = logging.getLogger()
    unconfigured = not root.handlers and root.level == logging.WARNING
    for handler in list(root.handlers):
        if type(handler) in (_StderrHandler, logging.StreamHandler):
            root.removeHandler(handler)
    handler = _StderrHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    if unconfigured:
        root.setLevel(logging.INFO)
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        for h in list(logger.handlers):
            if type(h) in (_StderrHandler, logging.StreamHandler):
                logger.removeHandler(h)
        logger.propagate = True
    return handler
