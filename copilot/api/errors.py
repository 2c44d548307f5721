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
from collections.abc import Sequence
from pathlib import Path

import fastapi
from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic_core import ErrorDetails
from starlette.exceptions import HTTPException
from starlette.responses import Response

from copilot.redact import PathRedactor

API_PREFIX = "/v1/"

_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}
_CODES = {400: "invalid_value", 401: "invalid_api_key", 403: "permission_denied", 404: "not_found",
          405: "method_not_allowed", 413: "context_length_exceeded", 500: "server_error", 503: "server_overloaded"}
#: Where a request parameter sits in FastAPI's ``loc`` (left out of ``param``).
_SECTIONS = ("body", "query", "path", "header", "cookie")
#: Longest message an error echoes (a client's value quoted in it is cut).
MAX_MESSAGE = 2000
#: A location part that is a field name (pydantic also puts validator and type names there).
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Union-member tags pydantic writes that look like field names.
_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none", "bytes"})


class ParameterError(fastapi.HTTPException):
    """An HTTP error about one request parameter, named in ``error.param`` (with ``error.code``,
    e.g. ``unsupported_parameter``, ``invalid_value`` or ``model_not_found``); a
    ``fastapi.HTTPException``, so the routes' ``except HTTPException`` catch it too."""

    def __init__(self, status_code: int, detail: str, param: str | None, code: str | None = None) -> None:
        super().__init__(status_code, detail)
        self.param = param
        self.code = code


def _api(request: Request) -> bool:
    """Whether the request is for ``/v1`` (behind a proxy, after the ASGI ``root_path``)."""
    path: str = request.scope.get("path", "")
    root: str = request.scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):]
    return path == API_PREFIX.rstrip("/") or path.startswith(API_PREFIX)


def _clean(value: object) -> str | int:
    """A location part or message safe to encode as UTF-8 JSON: lone surrogates (from a
    field name or dict key the client sent) are written as backslash escapes."""
    if isinstance(value, int):
        return value
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


def param_name(loc: Sequence[int | str]) -> str | None:
    """The parameter a validation error's ``loc`` names, as the client wrote it: ``body`` and
    pydantic's validator or type names (``function-after[...]``, ``str``, ``list[...]``) left
    out, e.g. ``("body", "stop", "function-after[_valid_unicode(), str]")`` → ``stop``,
    ``("query", "limit")`` → ``limit``; ``None`` for the body as a whole (malformed JSON)."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if i == 0 and part in _SECTIONS:
            continue
        if i == 1 and loc[0] == "body" and isinstance(part, int) and len(loc) == 2:
            return None  # a JSON decode error's character offset
        if isinstance(part, int):
            parts.append(str(part))
        elif _FIELD.fullmatch(str(part)) and str(part) not in _TYPE_TAGS:
            parts.append(str(part))
        elif parts:
            break
    return ".".join(parts) or None


def _tagged(loc: Sequence[int | str]) -> int | None:
    """Index of the first validator or union-member tag in ``loc`` (``None`` without one)."""
    for i, part in enumerate(loc):
        if i and not isinstance(part, int) and (not _FIELD.fullmatch(str(part)) or str(part) in _TYPE_TAGS):
            return i
    return None


def relevant_errors(errors: Sequence[ErrorDetails]) -> list[ErrorDetails]:
    """``errors`` with a union's failed alternatives reduced to the one that got furthest.

    A value that fails every member of a union (``stop: str | list[str]`` given a lone
    surrogate) gets one error per member, under the same field; the one with the longest
    ``loc`` (it matched deepest), preferring a value error over a type error, is kept: the
    surrogate, not "Input should be a valid list"."""
    best: dict[tuple[int | str, ...], ErrorDetails] = {}
    out: list[ErrorDetails] = []
    for err in errors:
        loc = tuple(err.get("loc", ()))
        at = _tagged(loc)
        if at is None:
            out.append(err)
            continue
        key = loc[:at]
        rank = (len(loc), not str(err.get("type", "")).endswith("_type"))
        if key not in best:
            out.append(err)
            best[key] = err
        elif rank > (len(best[key].get("loc", ())), not str(best[key].get("type", "")).endswith("_type")):
            out[out.index(best[key])] = err
            best[key] = err
    return out


#: Messages for a number or flag of the wrong JSON type (strict request fields), and the
#: JSON kind of the value sent.
_STRICT_MESSAGES = {"int_type": "must be an integer", "bool_type": "must be true or false",
                    "float_type": "must be a number", "finite_number": "must be a finite number"}
_JSON_KINDS = ((bool, "a boolean"), (str, "a string"), (int, "an integer"), (float, "a number"), (list, "an array"),
               (dict, "an object"), (type(None), "null"))


def _message(err: ErrorDetails) -> str:
    """One error's message, without pydantic's ``Value error,`` prefix; a strict number or flag
    given another JSON type says which (``max_tokens must be an integer, got a string``)."""
    kind = str(err.get("type", ""))
    loc = param_name(err.get("loc", ()))
    if kind in _STRICT_MESSAGES and loc:
        got = "" if kind == "finite_number" else next(
            (f", got {name}" for t, name in _JSON_KINDS if isinstance(err.get("input"), t)), "")
        return f"{loc} {_STRICT_MESSAGES[kind]}{got}"
    msg = str(_clean(err.get("msg"))).removeprefix("Value error, ")
    return f"{loc}: {msg}" if loc else msg


def _code(error_type: str) -> str:
    if error_type == "missing":
        return "missing_required_parameter"
    if error_type.endswith(("_type", "_parsing")) or error_type in ("model_attributes_type", "is_instance_of"):
        return "invalid_type"
    return "invalid_value"


def _safe_errors(exc: RequestValidationError) -> list[dict[str, object]]:
    """Pydantic errors without the offending ``input``/``ctx`` values, which may not be
    JSON-serialisable (NaN, Infinity, lone surrogates), and with ``loc`` naming only the
    section and the fields (no validator or type names)."""
    out: list[dict[str, object]] = []
    for err in relevant_errors(list(exc.errors())):
        loc = list(err.get("loc", ()))
        param = param_name(loc)
        clean: list[str | int] = [loc[0]] if loc and loc[0] in _SECTIONS else []
        clean += [int(p) if p.isdigit() else _clean(p) for p in param.split(".")] if param else []
        out.append({"loc": clean, "msg": str(_clean(err.get("msg"))).removeprefix("Value error, "),
                    "type": err.get("type")})
    return out


def validation_message(errors: Sequence[ErrorDetails]) -> str:
    """Pydantic errors as one line: ``field: message; ...`` (no input values, no URLs; one
    error per union, see :func:`relevant_errors`)."""
    return "; ".join(_message(err) for err in relevant_errors(list(errors))) or "invalid request"


def error_body(message: str, status_code: int, param: str | None = None, code: str | None = None,
               detail: object = None) -> dict[str, object]:
    """An OpenAI-format error body (``type`` and a default ``code`` from the status; ``detail``
    defaults to the message, which is cut at :data:`MAX_MESSAGE` characters)."""
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + "…"
    kind = _TYPES.get(status_code, "server_error" if status_code >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code or _CODES.get(status_code)},
            "detail": message if detail is None else detail}


def server_paths(request: Request) -> PathRedactor:
    """The redactor of this server's folders (data dir, model cache, ingest root, uploads, the
    home folder), built once per app: no error message shows where the server keeps its files."""
    redactor = getattr(request.app.state, "error_paths", None)
    if redactor is None:
        settings = getattr(request.app.state, "settings", None)
        named: dict[str, Path | None] = {"<home>": Path.home()}
        relative: dict[str, Path | None] = {}
        if settings is not None:
            named.update({"<data dir>": settings.data_dir, "<model cache>": settings.model_cache_dir})
            relative.update({"<ingest root>": settings.ingest_root, "<uploads>": settings.uploads_dir})
        redactor = request.app.state.error_paths = PathRedactor.of(relative=relative, named=named)
    return redactor


async def _http_error(request: Request, exc: HTTPException) -> Response:
    if not _api(request):
        return await http_exception_handler(request, exc)
    status_code = 400 if exc.status_code == 422 else exc.status_code
    message = server_paths(request).text(str(_clean(exc.detail)))
    if exc.status_code == 404 and exc.detail == "Not Found":  # no such route
        message = f"Invalid URL ({request.method} {request.url.path})"
    body = error_body(message, status_code, getattr(exc, "param", None), getattr(exc, "code", None))
    return JSONResponse(body, status_code=status_code, headers=getattr(exc, "headers", None))


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    if not _api(request):
        return await request_validation_exception_handler(request, exc)
    errors = relevant_errors(list(exc.errors()))
    loc = errors[0].get("loc", ()) if errors else ()
    kind = str(errors[0].get("type", "")) if errors else ""
    body = error_body(validation_message(list(exc.errors())), 400, param_name(loc), _code(kind), _safe_errors(exc))
    return JSONResponse(body, status_code=400)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app`` (through FastAPI's decorator: Starlette types a handler as
    taking any ``Exception``, which a handler of one exception class is not)."""
    app.exception_handler(HTTPException)(_http_error)
    app.exception_handler(RequestValidationError)(_validation_error)
