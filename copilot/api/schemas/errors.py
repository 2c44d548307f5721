"""The error body every route answers with."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    """OpenAI's error object: ``message`` says why; ``param`` names the request field at fault."""

    message: str
    type: str = Field(description="invalid_request_error | authentication_error | permission_error | "
                      "rate_limit_error | server_error")
    param: str | None = None
    code: str | None = Field(None, description="e.g. invalid_value, missing_required_parameter, "
                             "unsupported_parameter, model_not_found, invalid_api_key, permission_denied, "
                             "server_overloaded")


class ErrorResponse(BaseModel):
    """Every 4xx/5xx body under ``/v1``: OpenAI's ``error`` object, and ``detail`` as FastAPI
    writes it (the message, or the list of validation errors)."""

    error: ErrorBody
    detail: Any = Field(description="the message, or for a 400 validation error the list of errors")
