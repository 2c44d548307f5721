"""Test helper: answer a question in one call (check, retrieve, prompt, decode), as the CLI
and the evals do with :meth:`~copilot.service.CopilotService.prepare` and
:meth:`~copilot.service.CopilotService.stream` folded by an :class:`AnswerAssembler`."""

from __future__ import annotations

from copilot.answer.assembly import Answer, AnswerAssembler
from copilot.answer.events import Prepared
from copilot.answer.question import GenerationParams, QuestionRequest
from copilot.service import CopilotService


def answer(service: CopilotService, prepared: Prepared) -> Answer:
    """Decode a prepared question to completion."""
    assembler = AnswerAssembler(prepared)
    for event in service.stream(prepared):
        assembler.add(event)
    return assembler.answer()


def ask(service: CopilotService, text: str, max_new_tokens: int | None = None) -> Answer:
    """Check ``text`` (with the answer budget ``max_new_tokens``: default the setting), retrieve, prompt
    and decode."""
    asked = QuestionRequest(text, generation=GenerationParams(max_new_tokens=max_new_tokens))
    return answer(service, service.prepare(service.question(asked)))
