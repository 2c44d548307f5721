"""``GET /healthz`` and ``GET /readyz``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class HealthResponse(BaseModel):
    """``GET /healthz``: the process is up."""

    status: Literal["ok"]


class ReadyResponse(BaseModel):
    """``GET /readyz``: whether the model is loaded and the store answers, and which draft model runs."""

    status: Literal["ready", "not ready"]
    model_loaded: bool
    store_reachable: bool
    chunks: int | None = None
    detail: str | None = None
    draft_model: str | None = Field(None, description="the draft model in use, or why none (building, refused "
                                    "by its calibration, not configured)")
    dense_index: Literal["ok", "degraded"] | None = Field(
        None, description="degraded: the dense index is damaged or being rebuilt, search is lexical only (still "
        "ready); the reason is in dense_index_detail")
    dense_index_detail: str | None = None
    cpu: str | None = Field(None, description="the CPU and the instruction sets llama.cpp's kernels use on it")
