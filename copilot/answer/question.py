"""A question as the service answers it: every request parameter, checked and resolved once.

A route (``/v1/ask``, the OpenAI routes), the CLI or an eval writes its request as a
:class:`QuestionRequest` (every knob under its own name, unset ones ``None``) and turns it into a
:class:`Question` with :meth:`copilot.service.CopilotService.question`, which validates it
(once) and resolves the defaults (once); from there it travels unchanged through the
scheduler (:class:`copilot.serving.question_job.QuestionJob`) to
:meth:`~copilot.service.CopilotService.prepare` and the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from copilot.access import FULL_ACCESS, Access
from copilot.answer.prompting import ChatTurn
from decoding import GenerationConfig
from decoding.config import SpeculationMode
from decoding.logits import LogitsSettings
from ingestion.documents import SearchFilter

#: How a question is answered:
#: ``rag`` — retrieve, show the sources, cite them, check the answer's literals (the product);
#: ``chat`` — the messages as sent, no retrieval (``use_context: false`` on chat);
#: ``completion`` — ``text`` is the whole prompt, no chat template (``/v1/completions``).
Mode = Literal["rag", "chat", "completion"]


@dataclass(frozen=True)
class GenerationParams:
    """A request's generation knobs as the client set them, under the names of
    :class:`decoding.config.Sampling`, :class:`~decoding.config.Budget` and
    :class:`~decoding.config.Speculation` (``speculation`` is ``Speculation.mode``).

    ``None`` = unset: :meth:`copilot.service.CopilotService.generation_config` applies the
    server's setting (``max_new_tokens``, ``num_speculative_tokens``, ``loop_span``), else the
    engine's default. Values are checked there, not here.
    """

    max_new_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop_strings: tuple[str, ...] = ()
    speculation: SpeculationMode | None = None
    num_speculative_tokens: int | None = None
    loop_span: int | None = None
    repetition_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    min_new_tokens: int | None = None
    bad_words_ids: tuple[tuple[int, ...], ...] | None = None
    suppress_tokens: tuple[int, ...] | None = None
    logit_bias: Mapping[str, float] | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None


@dataclass(frozen=True)
class QuestionRequest:
    """A question as a route, the CLI or an eval asks it, before any check or default.

    Attributes:
        text: the question; for ``completion`` the whole prompt.
        mode: see :data:`Mode`.
        max_sources: source documents to retrieve and show (``None``: the ``max_sources``
            setting, else the prompt style's).
        flt: retrieval filter as the user gave it.
        history: earlier turns, oldest first.
        instructions: the client's system message(s).
        access: what the caller may read.
        generation: the generation knobs.
        problem: words of the problem an earlier occurrence must name (an alert's
            question): see :func:`copilot.answer.grounding.assess`.
    """

    text: str
    mode: Mode = "rag"
    max_sources: int | None = None
    flt: SearchFilter | None = None
    history: tuple[ChatTurn, ...] = ()
    instructions: str = ""
    access: Access = FULL_ACCESS
    generation: GenerationParams = field(default_factory=GenerationParams)
    problem: tuple[str, ...] = ()


@dataclass(frozen=True)
class Question:
    """One checked request.

    Attributes:
        text: the question (stripped); for ``completion`` the whole prompt.
        config: the engine's settings; ``config.budget.max_new_tokens`` is the answer budget in
            tokens (within ``max_new_tokens_cap``), ``config.sampling.top_k`` sampling top-k.
        max_sources: source documents to retrieve and show (``rag`` only).
        mode: see :data:`Mode`.
        flt: retrieval filter (document type, dates, source) as the user gave it.
        access: what the caller may read: retrieval is narrowed to it
            (:meth:`copilot.access.Access.restrict`), and ``config.speculation.history_partition`` is its
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
        problem: as :attr:`QuestionRequest.problem`.
    """

    text: str
    config: GenerationConfig
    max_sources: int
    mode: Mode
    flt: SearchFilter | None
    history: tuple[ChatTurn, ...]
    instructions: str
    prompt_budget: int
    logits: LogitsSettings | None
    access: Access
    problem: tuple[str, ...] = ()

    @property
    def retrieves(self) -> bool:
        """Whether sources are retrieved, cited and checked (``rag``)."""
        return self.mode == "rag"
