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


class ParameterError(HTTPException):
    """An HTTP error about one request parameter: the OpenAI-compatible routes name it in
    ``error.param`` (and ``error.code``, e.g. ``unsupported_parameter``)."""

    def __init__(self, status_code: int, detail: str, param: str, code: str | None = None) -> None:
        super().__init__(status_code, detail)
        self.param = param
        self.code = code


def _openai(request: Request) -> bool:
    return request.url.path.startswith(OPENAI_PREFIXES)


def _clean(value: object) -> str | int:
    """A location part or message safe to encode as UTF-8 JSON: lone surrogates (from a
    field name or dict key the client sent) are written as backslash escapes."""
    if isinstance(value, int):
        return value
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


def _loc(err: dict) -> str:
    return ".".join(str(_clean(x)) for x in err.get("loc", ()) if x != "body")


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = _loc(err)
        msg = _clean(err.get("msg"))
        parts.append(f"{loc}: {msg}" if loc else str(msg))
    return "; ".join(parts) or "invalid request"


async def _http_error(request: Request, exc: HTTPException):
    if not _openai(request):
        return await http_exception_handler(request, exc)
    message = str(_clean(exc.detail))
    body = {"error": {"message": message, "type": _TYPES.get(exc.status_code, "server_error"),
                      "param": getattr(exc, "param", None),
                      "code": getattr(exc, "code", None) or _CODES.get(exc.status_code)},
            "detail": message}
    return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))


def _safe_errors(exc: RequestValidationError) -> list[dict]:
    """Pydantic errors without the offending ``input``/``ctx`` values, which may not be
    JSON-serialisable (NaN, Infinity, lone surrogates)."""
    return [{"loc": [_clean(x) for x in err.get("loc", ())], "msg": _clean(err.get("msg")), "type": err.get("type")}
            for err in exc.errors()]


async def _validation_error(request: Request, exc: RequestValidationError):
    if not _openai(request):
        return JSONResponse({"detail": _safe_errors(exc)}, status_code=422)
    message = _validation_message(exc)
    first = exc.errors()[0] if exc.errors() else {}
    param = _loc(first) or None
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None},
            "detail": message}
    return JSONResponse(body, status_code=422)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
