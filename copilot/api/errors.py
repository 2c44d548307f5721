"""Exception handlers: OpenAI-format error bodies on every ``/v1/*`` route.

Every error under ``/v1/`` answers ``{"error": {"message", "type", "param", "code"}, "detail": ...}``
as OpenAI's API does (the ``openai`` client reads ``error.message``, ``error.param`` and
``error.code``), and ``detail`` as FastAPI writes it (a string, or the list of validation
errors) for clients written against earlier releases. A request that fails validation is a
**400** there (OpenAI and vLLM; FastAPI's default is 422), with ``param`` naming the first
offending field as the client spelled it (``stop``, ``messages.0.content``) and ``code``
``missing_required_parameter``, ``invalid_type`` or ``invalid_value``. An unknown ``/v1``
route is OpenAI's 404 ``Invalid URL (POST /v1/...)``. Other paths keep FastAPI's bodies.
"""

from __future__ import annotations

import re

import fastapi
from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

API_PREFIX = "/v1/"

_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}
_CODES = {401: "invalid_api_key", 403: "invalid_api_key", 405: "method_not_allowed",
          413: "context_length_exceeded", 503: "server_overloaded"}
#: A location part that is a field name (pydantic also puts validator and type names there).
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ParameterError(fastapi.HTTPException):
    """An HTTP error about one request parameter, named in ``error.param`` (with ``error.code``,
    e.g. ``unsupported_parameter``, ``invalid_value`` or ``model_not_found``); a
    ``fastapi.HTTPException``, so the routes' ``except HTTPException`` catch it too."""

    def __init__(self, status_code: int, detail: str, param: str | None, code: str | None = None) -> None:
        super().__init__(status_code, detail)
        self.param = param
        self.code = code


def _api(request: Request) -> bool:
    return request.url.path.startswith(API_PREFIX)


def _clean(value: object) -> str | int:
    """A location part or message safe to encode as UTF-8 JSON: lone surrogates (from a
    field name or dict key the client sent) are written as backslash escapes."""
    if isinstance(value, int):
        return value
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


def param_name(loc: tuple | list) -> str | None:
    """The parameter a validation error's ``loc`` names, as the client wrote it: ``body`` and
    pydantic's validator or type names (``function-after[...]``, ``str``, ``list[...]``) left
    out, e.g. ``("body", "stop", "function-after[_valid_unicode(), str]")`` → ``stop``."""
    parts: list[str] = []
    for part in loc:
        if part == "body":
            continue
        if isinstance(part, int):
            parts.append(str(part))
        elif _FIELD.fullmatch(str(part)) and str(part) not in ("str", "int", "float", "bool", "list", "dict"):
            parts.append(str(part))
        elif parts:
            break
    return ".".join(parts) or None


def _code(error_type: str) -> str:
    if error_type == "missing":
        return "missing_required_parameter"
    if error_type.endswith(("_type", "_parsing")) or error_type in ("model_attributes_type", "is_instance_of"):
        return "invalid_type"
    return "invalid_value"


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = param_name(err.get("loc", ()))
        msg = _clean(err.get("msg"))
        parts.append(f"{loc}: {msg}" if loc else str(msg))
    return "; ".join(parts) or "invalid request"


def _safe_errors(exc: RequestValidationError) -> list[dict]:
    """Pydantic errors without the offending ``input``/``ctx`` values, which may not be
    JSON-serialisable (NaN, Infinity, lone surrogates)."""
    return [{"loc": [_clean(x) for x in err.get("loc", ())], "msg": _clean(err.get("msg")), "type": err.get("type")}
            for err in exc.errors()]


def error_body(message: str, status_code: int, param: str | None = None, code: str | None = None,
               detail: object = None) -> dict:
    """An OpenAI-format error body (``type`` from the status; ``detail`` defaults to the message)."""
    kind = _TYPES.get(status_code, "server_error" if status_code >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code or _CODES.get(status_code)},
            "detail": message if detail is None else detail}


async def _http_error(request: Request, exc: HTTPException):
    if not _api(request):
        return await http_exception_handler(request, exc)
    status_code = 400 if exc.status_code == 422 else exc.status_code
    message = str(_clean(exc.detail))
    if exc.status_code == 404 and exc.detail == "Not Found":  # no such route
        message = f"Invalid URL ({request.method} {request.url.path})"
    body = error_body(message, status_code, getattr(exc, "param", None), getattr(exc, "code", None))
    return JSONResponse(body, status_code=status_code, headers=getattr(exc, "headers", None))


async def _validation_error(request: Request, exc: RequestValidationError):
    if not _api(request):
        return await request_validation_exception_handler(request, exc)
    first = exc.errors()[0] if exc.errors() else {}
    body = error_body(_validation_message(exc), 400, param_name(first.get("loc", ())),
                      _code(str(first.get("type", ""))), _safe_errors(exc))
    return JSONResponse(body, status_code=400)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
