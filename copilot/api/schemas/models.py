"""``GET /v1/models``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ModelCard(BaseModel):
    """A served model; ``max_model_len`` (vLLM's name) and ``context_length`` give its context
    window in tokens."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "opscopilot"
    max_model_len: int | None = Field(None, description="context window (tokens)")
    context_length: int | None = Field(None, description="the same, under LM Studio's and OpenRouter's name")


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelCard]
