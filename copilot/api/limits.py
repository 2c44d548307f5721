"""Request body size limits, enforced without reading unbounded bodies.

:class:`BodyLimitMiddleware` is a pure ASGI middleware. A request whose ``Content-Length``
exceeds the limit gets 413 before the app sees it; otherwise ``receive`` is wrapped to
count the streamed bytes (chunked bodies included) and raises :class:`BodyTooLargeError`
(an ``HTTPException``, so FastAPI renders it as a 413 with the reason) the moment the
count passes the limit. Multipart bodies sent to an upload path get the upload limit,
everything else the JSON limit.
"""

from __future__ import annotations

import json

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from copilot.api.errors import error_body


class BodyTooLargeError(HTTPException):
    """The request body passed its size limit (HTTP 413)."""

    def __init__(self, limit: int, what: str, size: int | None = None) -> None:
        got = f"{size} bytes" if size is not None else f"more than {limit} bytes"
        super().__init__(413, f"{what} too large: {got}; the limit is {limit} bytes")
        self.limit = limit


class BodyLimitMiddleware:
    """Reject request bodies over ``max_body_bytes`` (``max_upload_bytes`` for multipart uploads).

    Args:
        app: the wrapped ASGI app.
        max_body_bytes: limit for every body except multipart uploads (bytes).
        max_upload_bytes: limit for ``multipart/form-data`` bodies sent to ``upload_paths`` (bytes).
        upload_paths: request paths (exact) that accept uploads.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int, max_upload_bytes: int,
                 upload_paths: tuple[str, ...] = ()) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max_upload_bytes
        self.upload_paths = upload_paths

    def limit_for(self, scope: Scope, headers: Headers) -> tuple[int, str]:
        """The limit (bytes) and a name for the body of this request."""
        content_type = headers.get("content-type", "")
        if scope.get("path") in self.upload_paths and content_type.lower().startswith("multipart/form-data"):
            return self.max_upload_bytes, "upload"
        return self.max_body_bytes, "request body"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        limit, what = self.limit_for(scope, headers)
        length = headers.get("content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await _send_error(send, 400, f"invalid Content-Length header: {length[:40]!r}")
                return
            if declared > limit:
                await _send_error(send, 413, BodyTooLargeError(limit, what, declared).detail)
                return

        received = 0
        response_started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLargeError(limit, what)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLargeError as exc:  # raised where no exception handler turned it into a response
            if response_started:
                raise
            await _send_error(send, 413, exc.detail)


async def _send_error(send: Send, status: int, detail: str) -> None:
    code = "request_too_large" if status == 413 else "invalid_value"
    body = json.dumps(error_body(detail, status, None, code)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
