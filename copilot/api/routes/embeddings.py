"""OpenAI-compatible ``POST /v1/embeddings``: vectors from the store's embedding model.

The same model, normalisation and vectors as retrieval (cosine = dot product), so a client
that embeds with it (LangChain's ``OpenAIEmbeddings``, LlamaIndex) can search alongside.
"""

from __future__ import annotations

import asyncio
import base64

from fastapi import APIRouter, Depends, status

from copilot.api.dependencies import EmbedderDep, ask_auth
from copilot.api.errors import ParameterError
from copilot.api.openai_common import check_model, embedding_models
from copilot.api.openapi import error_responses
from copilot.api.schemas.embeddings import Embedding, EmbeddingList, EmbeddingRequest, EmbeddingUsage
from copilot.search.embed import InputTooLongError, embed_texts

router = APIRouter(prefix="/v1", tags=["openai"])

ERRORS = error_responses(400, 401, 403, 404)
#: Inputs per request (OpenAI's limit).
MAX_INPUTS = 2048


def _invalid_input(message: str, param: str = "input") -> ParameterError:
    return ParameterError(status.HTTP_400_BAD_REQUEST, message, param, "invalid_value")


def _texts(body: EmbeddingRequest) -> list[str]:
    """The inputs as strings; 400 naming ``input`` for none, an empty string, token ids or too many
    (OpenAI refuses empty inputs as well)."""
    given = [body.input] if isinstance(body.input, str) else body.input
    if not given:
        raise _invalid_input("input: send at least one string (the list is empty)")
    texts = [t for t in given if isinstance(t, str)]
    if len(texts) < len(given):
        raise _invalid_input("input: send a string or a list of strings (token-id input is not supported "
                             "by this server)")
    for i, text in enumerate(texts):
        if not text.strip():
            where = "input" if isinstance(body.input, str) else f"input.{i}"
            raise _invalid_input(f"{where}: an empty string has no embedding; send some text", where)
    if len(texts) > MAX_INPUTS:
        raise _invalid_input(f"input: at most {MAX_INPUTS} inputs, got {len(texts)}")
    return texts


@router.post("/embeddings", response_model=EmbeddingList, responses=ERRORS, dependencies=[Depends(ask_auth)])
async def embeddings(body: EmbeddingRequest, embedder: EmbedderDep) -> EmbeddingList:
    """Embed the input(s) (OpenAI embeddings format).

    Errors: 400 no input, an empty or blank string, token-id input, more than 2048 inputs, an
    input over the model's window, ``dimensions`` other than the model's; 404 unknown model.
    """
    check_model(body.model, embedding_models(embedder))
    texts = _texts(body)
    if body.dimensions is not None and body.dimensions != embedder.dimension:
        raise ParameterError(status.HTTP_400_BAD_REQUEST, f"dimensions: this model gives {embedder.dimension} "
                             f"dimensions, not {body.dimensions}", "dimensions", "invalid_value")

    try:
        embedded = await asyncio.to_thread(embed_texts, embedder, texts, body.truncate)
    except InputTooLongError as exc:  # 400 naming the first input over the model's window
        raise ParameterError(status.HTTP_400_BAD_REQUEST, f"input.{exc.index}: {exc.tokens} tokens; the model's window "
                             f"is {exc.window} (set truncate: true to cut it)", f"input.{exc.index}",
                             "context_length_exceeded") from exc
    counts = embedded.token_counts
    data = [Embedding(index=i, embedding=base64.b64encode(v.astype("<f4").tobytes()).decode()
                      if body.encoding_format == "base64" else v.tolist()) for i, v in enumerate(embedded.vectors)]
    return EmbeddingList(data=data, model=body.model, usage=EmbeddingUsage(prompt_tokens=sum(counts),
                                                                           total_tokens=sum(counts)))
