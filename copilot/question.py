"""A question as the service answers it: every request parameter, checked and resolved once.

A route (``/v1/ask``, the OpenAI routes) or the CLI turns its request into a
:class:`Question` with :meth:`copilot.service.CopilotService.question`, which validates it
(once) and resolves the defaults (once); from there it travels unchanged through the
scheduler (:class:`copilot.api.generation.QuestionJob`) to
:meth:`~copilot.service.CopilotService.prepare` and the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from copilot.access import FULL_ACCESS, Access
from copilot.prompting import ChatTurn
from decoding import GenerationConfig
from decoding.logits import LogitsSettings
from ingestion.documents import SearchFilter

#: How a question is answered:
#: ``rag`` — retrieve, show the sources, cite them, check the answer's literals (the product);
#: ``chat`` — the messages as sent, no retrieval (``use_context: false`` on chat);
#: ``completion`` — ``text`` is the whole prompt, no chat template (``/v1/completions``).
Mode = Literal["rag", "chat", "completion"]


@dataclass(frozen=True)
class Question:
    """One checked request.

    Attributes:
        text: the question (stripped); for ``completion`` the whole prompt.
        config: the engine's settings; ``config.max_new_tokens`` is the answer budget in
            tokens (within ``max_new_tokens_cap``), ``config.top_k`` sampling top-k.
        max_sources: source documents to retrieve and show (``rag`` only).
        mode: see :data:`Mode`.
        flt: retrieval filter (document type, dates, source) as the user gave it.
        access: what the caller may read: retrieval is narrowed to it
            (:meth:`copilot.access.Access.restrict`), and ``config.history_partition`` is its
            :attr:`~copilot.access.Access.partition`.
        history: earlier turns, oldest first.
        instructions: the client's system message(s), added after OpsCopilot's own
            instructions (``rag``) or sent as the system message (``chat``); counted in the
            prompt budget.
        prompt_budget: prompt tokens allowed: for ``rag`` ``max_prompt_tokens`` capped by the
            context window minus the answer budget; otherwise the context window minus the
            answer budget.
        logits: ``config``'s effective logits settings on the target, resolved once
            (:meth:`decoding.engine.SpeculativeEngine.resolve`) and handed to the engine.
    """

    text: str
    config: GenerationConfig
    max_sources: int
    mode: Mode = "rag"
    flt: SearchFilter | None = None
    history: tuple[ChatTurn, ...] = ()
    instructions: str = ""
    prompt_budget: int = 2048
    logits: LogitsSettings | None = None
    access: Access = FULL_ACCESS

    @property
    def retrieves(self) -> bool:
        """Whether sources are retrieved, cited and checked (``rag``)."""
        return self.mode == "rag"
