"""Exception handlers: every error body has ``detail``; OpenAI-compatible routes add ``error``.

The ``openai`` client reads ``error.message`` from error bodies, so ``/v1/chat/...`` and
``/v1/models`` answer ``{"error": {"message", "type", "param", "code"}, "detail": ...}``.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

OPENAI_PREFIXES = ("/v1/chat/", "/v1/models")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "invalid_request_error", 413: "invalid_request_error", 415: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error", 503: "server_error"}
_CODES = {401: "invalid_api_key", 403: "invalid_api_key", 404: "model_not_found", 413: "context_length_exceeded",
          503: "server_overloaded"}


def _openai(request: Request) -> bool:
    return request.url.path.startswith(OPENAI_PREFIXES)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        parts.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
    return "; ".join(parts) or "invalid request"


async def _http_error(request: Request, exc: HTTPException):
    if not _openai(request):
        return await http_exception_handler(request, exc)
    body = {"error": {"message": str(exc.detail), "type": _TYPES.get(exc.status_code, "server_error"),
                      "param": None, "code": _CODES.get(exc.status_code)},
            "detail": exc.detail}
    return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))


def _safe_errors(exc: RequestValidationError) -> list[dict]:
    """Pydantic errors without the offending ``input``/``ctx`` values, which may not be
    JSON-serialisable (NaN, Infinity, lone surrogates)."""
    return [{"loc": list(err.get("loc", ())), "msg": str(err.get("msg")), "type": err.get("type")}
            for err in exc.errors()]


async def _validation_error(request: Request, exc: RequestValidationError):
    if not _openai(request):
        return JSONResponse({"detail": _safe_errors(exc)}, status_code=422)
    message = _validation_message(exc)
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None},
            "detail": message}
    return JSONResponse(body, status_code=422)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
