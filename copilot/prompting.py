"""Chat prompts with numbered passages inside a token budget.

Budget: ``max_prompt_tokens`` (capped by the target's context window minus
``max_new_tokens``) holds the system instructions, the question, as much recent
history as fits after the question, and the passages in rank order while they fit.
Every retrieved passage — also those cut for the budget — seeds the n-gram drafter.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from copilot.retrieval import Passage

SYSTEM_PROMPT = (
    "You are OpsCopilot, an assistant for a computing operations team. Answer the question "
    "using only the numbered passages from the team's logbooks and tickets. Quote commands, "
    "error messages, paths, host names and ticket ids exactly as written, and cite the "
    "passages you used as [n]. If the passages do not contain the answer, say so."
)
NO_CONTEXT_ANSWER = "I found no logbook entries or tickets to answer from: the document store is empty or nothing matched."


class PromptTooLongError(ValueError):
    """The question (with the instructions) alone exceeds the prompt budget."""


@dataclass(frozen=True)
class ChatTurn:
    """One earlier message of a conversation (``role`` is ``"user"`` or ``"assistant"``)."""

    role: str
    content: str


@dataclass
class BuiltPrompt:
    """A prompt ready for the engine.

    Attributes:
        input_ids: the chat-templated prompt token ids.
        passages: the passages included, numbered as cited.
        context_ids: token ids of every retrieved passage (included or not) for the drafter.
        history_turns: how many history turns fit.
    """

    input_ids: list[int]
    passages: list[Passage]
    context_ids: list[list[int]]
    history_turns: int


def format_passage(p: Passage) -> str:
    """``[n]`` then the chunk text (which starts with its document's header: kind, key, title, date)."""
    return f"[{p.n}] {p.chunk.text.strip()}"


def _render(tokenizer: PreTrainedTokenizerBase, passages: list[Passage], history: list[ChatTurn], question: str) -> list[int]:
    context = "\n\n".join(format_passage(p) for p in passages) if passages else "(no passages)"
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    messages += [{"role": t.role, "content": t.content} for t in history]
    messages.append({"role": "user", "content": f"Passages:\n\n{context}\n\nQuestion: {question}"})
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
    return list(ids)


def bare_prompt_tokens(tokenizer: PreTrainedTokenizerBase, question: str) -> int:
    """Tokens of the prompt with the instructions and the question only (no passages, no history)."""
    return len(_render(tokenizer, [], [], question))


def build_prompt(tokenizer: PreTrainedTokenizerBase, question: str, passages: list[Passage], budget_tokens: int,
                 history: list[ChatTurn] | None = None) -> BuiltPrompt:
    """Fit instructions, question, history and passages into ``budget_tokens``.

    Passages are added in rank order while they fit (a passage that does not fit is
    skipped, a shorter later one may still fit) and renumbered 1..n in prompt order.

    Raises:
        PromptTooLongError: the question with the instructions alone exceeds the budget.
    """
    history = list(history or [])
    bare = _render(tokenizer, [], [], question)
    if len(bare) > budget_tokens:
        raise PromptTooLongError(
            f"the question needs {len(bare)} prompt tokens; the budget is {budget_tokens}")
    # Most recent history first, while it fits next to the bare question.
    kept: list[ChatTurn] = []
    for turn in reversed(history):
        if len(_render(tokenizer, [], [turn] + kept, question)) > budget_tokens:
            break
        kept.insert(0, turn)
    used = len(_render(tokenizer, [], kept, question))
    chosen: list[Passage] = []
    for p in passages:
        cost = len(tokenizer(format_passage(p) + "\n\n", add_special_tokens=False)["input_ids"])
        if used + cost <= budget_tokens:
            chosen.append(p)
            used += cost
    numbered = [Passage(i + 1, p.chunk, p.score) for i, p in enumerate(chosen)]
    ids = _render(tokenizer, numbered, kept, question)
    while len(ids) > budget_tokens and numbered:  # token estimate was off at a boundary
        numbered.pop()
        ids = _render(tokenizer, numbered, kept, question)
    context_ids = [tokenizer(p.chunk.text, add_special_tokens=False)["input_ids"] for p in passages]
    return BuiltPrompt(ids, numbered, context_ids, len(kept))
