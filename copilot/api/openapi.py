"""The OpenAPI document's conventions: streamed responses documented, 400 (not FastAPI's 422)
for invalid requests.

Routes document their error statuses with :func:`error_responses` and, when they stream, add
:func:`streamed` to their ``responses``; :func:`install` makes the
app's ``/openapi.json`` drop FastAPI's automatic ``422`` entries, since every ``/v1`` route
answers an invalid request with a 400 in OpenAI's error format (:mod:`copilot.api.errors`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from copilot.api.schemas.errors import ErrorResponse


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses`` entries documenting the error body (:class:`ErrorResponse`) under each of ``codes``."""
    return {code: {"model": ErrorResponse} for code in codes}


def streamed(description: str, example: str) -> dict[int | str, dict[str, Any]]:
    """A ``responses`` entry documenting the ``text/event-stream`` body of ``"stream": true``."""
    return {200: {"description": f"JSON, or with \"stream\": true Server-Sent Events: {description}",
                  "content": {"text/event-stream": {"schema": {"type": "string"}, "example": example}}}}


def install(app: FastAPI) -> None:
    """Serve the OpenAPI document without FastAPI's automatic 422 responses and schemas."""
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            for operations in spec.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                spec.get("components", {}).get("schemas", {}).pop(name, None)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
