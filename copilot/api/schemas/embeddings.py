"""Pydantic models of OpenAI's embeddings API (``POST /v1/embeddings``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from copilot.api.schemas.common import Bool, Int
from copilot.search.filters import Text


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings``: the store's own embedding model (the vectors retrieval uses).

    Inputs longer than the model's window (``max_model_len`` in ``/v1/models``) are a 400
    naming them, as OpenAI's API answers, unless ``truncate`` is set.
    """

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [
        {"model": "all-MiniLM-L6-v2", "input": ["dc-pool-07 lost a disk", "FTS transfers failing"]}]})

    model: Text = Field(min_length=1, description="the embedding model's id (see /v1/models)")
    input: Text | list[Text] | list[int] | list[list[int]] = Field(
        description="a string or up to 2048 strings (token-id input is not supported)")
    encoding_format: Literal["float", "base64"] = Field("float", description="base64: little-endian float32 bytes")
    dimensions: Int | None = Field(None, ge=1, description="only the model's own dimension")
    user: Text | None = Field(None, description="logged with the request")
    truncate: Bool = Field(False, description="OpsCopilot extension: cut over-long inputs to the model's window")


class Embedding(BaseModel):
    """One input's vector."""

    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="the L2-normalised vector, or its base64 float32 bytes")


class EmbeddingUsage(BaseModel):
    """Tokens of the inputs in the embedding model's tokenizer (after truncation)."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    """``POST /v1/embeddings``: one vector per input, in input order."""

    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
