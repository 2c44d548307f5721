"""What the OpenAI-compatible routes share (``/v1/chat/completions``, ``/v1/completions``,
``/v1/responses``, ``/v1/embeddings``, ``/v1/models``): the model names a client may send, the
chat question a request asks, the sources footer of a message's content, and the error event of a
refused stream. No route imports another.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

from fastapi import HTTPException, status

from copilot.access import FULL_ACCESS, Access
from copilot.answer.assembly import Answer
from copilot.answer.prompting import ChatTurn
from copilot.answer.question import Question, QuestionRequest
from copilot.api import generation
from copilot.api.errors import ParameterError, error_body
from copilot.api.footer import DESTRUCTIVE_HEADING, FOOTER_HEADING, UNVERIFIED_HEADING, strip_sources_footer
from copilot.api.schemas.chat import ChatCompletionRequest
from copilot.api.schemas.sources import SourceOut, trust_fields
from copilot.config import Settings
from copilot.service import CopilotService
from ingestion.embedding import Embedder

log = logging.getLogger(__name__)

def served_models(settings: Settings) -> list[str]:
    """Chat model ids a client may name: the alias and the target model's id."""
    return list(dict.fromkeys([settings.model_alias, settings.target_model]))


def embedding_models(embedder: Embedder) -> list[str]:
    """Embedding model ids a client may name: the embedder's id and its last path part."""
    name = embedder.model_name
    return list(dict.fromkeys([name, name.rstrip("/").rsplit("/", 1)[-1]]))


def check_model(name: str, known: list[str]) -> None:
    """Raises a 404 ``model_not_found`` naming ``model`` unless ``name`` is one of ``known``."""
    if name not in known:
        raise ParameterError(status.HTTP_404_NOT_FOUND, f"the model {name!r} does not exist; use one of {known}",
                             "model", "model_not_found")


def sources_footer(sources: list[SourceOut], unverified: Sequence[Mapping[str, object]] = (),
                   destructive: Sequence[Mapping[str, object]] = ()) -> str:
    """The footer listing ``sources`` for a message's content (empty without sources): a blank
    line, ``Sources:``, then ``[n] title — source, date`` per source (title, else key, else
    document id; the date when known); then, when the answer states literals found in no
    source, a line ``Not in the sources — check before running: `a`, `b```; then, when the
    answer (``destructive``: its marks, :mod:`copilot.search.destructive`) or a source's evidence holds
    a destructive command, a line ``⚠ Destructive — do not run: `rm -rf /` [2], …`` (chat
    clients show the content only, so the warning must be in it)."""
    if not sources:
        return ""
    lines = []
    for s in sources:
        title = " ".join((s.title or s.key or s.doc_id).split())
        where = s.source + (f", {s.created[:10]}" if s.created else "")
        lines.append(f"[{s.n}] {title} — {where}")
    footer = FOOTER_HEADING + "\n".join(lines)
    literals = list(dict.fromkeys(u["literal"] for u in unverified))
    if literals:
        footer += UNVERIFIED_HEADING + ", ".join(f"`{x}`" for x in literals)
    marked = {f"`{m['command']}`": None for m in destructive}
    marked |= {f"`{m.command}` [{s.n}]": None for s in sources for m in s.destructive}
    if marked:
        footer += DESTRUCTIVE_HEADING + ", ".join(marked)
    return footer


def answer_footer(sources: list[SourceOut], answer: Answer, settings: Settings) -> str:
    """The :func:`sources_footer` of an answer (its unverified literals and destructive commands),
    or empty with ``openai_sources_footer`` off."""
    if not settings.openai_sources_footer:
        return ""
    trust = trust_fields(answer)
    return sources_footer(sources, trust["unverified"], trust["destructive"])


def _texts(body: ChatCompletionRequest) -> list[str]:
    """Every message's text; a non-text part is a 400 naming its message."""
    texts = []
    for i, message in enumerate(body.messages):
        try:
            texts.append(message.text())
        except ValueError as exc:
            raise ParameterError(status.HTTP_400_BAD_REQUEST, f"messages.{i}.content: {exc}",
                                 f"messages.{i}.content", "invalid_value") from exc
    return texts


def chat_question(body: ChatCompletionRequest, service: CopilotService, names: dict[str, str],
                  access: Access = FULL_ACCESS) -> Question:
    """The checked question of a chat request: the last message, the earlier user and assistant
    turns as history (sources footers removed), system messages as instructions.

    Args:
        names: the client's parameter names for errors (see :func:`copilot.api.generation.question`).
        access: what the caller may read (retrieval, so the sources and their footer; the
            answer-history partition).

    Raises:
        HTTPException: 400 naming the parameter (a prompt over the budget included), 404 unknown model.
    """
    refused = body.unsupported()
    if refused is not None:
        raise ParameterError(status.HTTP_400_BAD_REQUEST, str(refused), refused.param, "unsupported_parameter")
    check_model(body.model, served_models(service.settings))
    texts = _texts(body)
    history = [ChatTurn(m.role, strip_sources_footer(t) if m.role == "assistant" else t)
               for m, t in zip(body.messages[:-1], texts) if m.role in ("user", "assistant")]
    if body.user or body.metadata:
        log.info("chat request from user %r, metadata %s", body.user, body.metadata)
    asked = QuestionRequest(texts[-1], mode="rag" if body.use_context else "chat", max_sources=body.max_sources,
                            flt=body.filters.to_search_filter() if body.filters else None, history=tuple(history),
                            instructions=body.instructions(), access=access,
                            generation=body.generation_params(body.max_new_tokens))
    return generation.question(service, asked, names)


def error_event(exc: HTTPException) -> dict[str, str]:
    """An SSE event carrying an OpenAI error object (a refusal after the stream began)."""
    return {"data": json.dumps(error_body(str(exc.detail), exc.status_code, getattr(exc, "param", None),
                                          getattr(exc, "code", None)))}
