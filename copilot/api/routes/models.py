"""OpenAI-compatible ``GET /v1/models`` and ``GET /v1/models/{model}``.

The chat models are the alias (``model_alias``, default ``opscopilot``) and the target's id:
naming either gives the same answers. The embedding model (``/v1/embeddings``) has a card
too (``GET /v1/models/{id}``) but is not in the list, so that chat pages (Open WebUI) do not
offer it as a chat model. Each card carries the context window (``max_model_len``, vLLM's name).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from copilot.api.dependencies import EmbedderDep, ServiceDep, SettingsDep, ask_auth
from copilot.api.openai_common import check_model, embedding_models, served_models
from copilot.api.openapi import error_responses
from copilot.api.schemas.models import ModelCard, ModelList
from copilot.config import Settings
from copilot.service import CopilotService
from ingestion.embedding import Embedder

router = APIRouter(prefix="/v1", tags=["openai"])

ERRORS = error_responses(401, 403, 404)


def _cards(request: Request, settings: Settings, service: CopilotService, embedder: Embedder) -> list[ModelCard]:
    """The chat models' cards, then the embedding model's."""
    created = int(request.app.state.started_at)
    chat = [ModelCard(id=m, created=created, max_model_len=service.models.context_length,
                      context_length=service.models.context_length) for m in served_models(settings)]
    length = getattr(embedder, "max_seq_length", None)  # loaded at start-up (warm_up)
    embedding = ModelCard(id=embedding_models(embedder)[0], created=created, max_model_len=length,
                          context_length=length)
    return chat + [embedding]


@router.get("/models", response_model=ModelList, responses=ERRORS, dependencies=[Depends(ask_auth)])
async def list_models(request: Request, settings: SettingsDep, service: ServiceDep,
                      embedder: EmbedderDep) -> ModelList:
    """The chat models this server answers as (any of them gives the same answers)."""
    return ModelList(data=_cards(request, settings, service, embedder)[:-1])


@router.get("/models/{model:path}", response_model=ModelCard, responses=ERRORS, dependencies=[Depends(ask_auth)])
async def retrieve_model(model: str, request: Request, settings: SettingsDep, service: ServiceDep,
                         embedder: EmbedderDep) -> ModelCard:
    """One model's card (ids may contain ``/``). Errors: 404 ``model_not_found``."""
    cards = {c.id: c for c in _cards(request, settings, service, embedder)}
    for alias in embedding_models(embedder):
        cards.setdefault(alias, cards[embedding_models(embedder)[0]].model_copy(update={"id": alias}))
    check_model(model, list(cards))
    return cards[model]
