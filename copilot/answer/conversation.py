"""A conversation's earlier turns shown as the model saw them, so that a follow-up's prompt
starts with the previous turn's prompt token for token and its KV cache is reused
(:mod:`decoding.kv.prefix_cache`).

Without this, a follow-up's prompt is ``[instructions][Q1][A1][sources 2 + Q2]`` while the first
turn's was ``[instructions][sources 1 + Q1]``: they share only the instructions, less than one
prefill chunk, so nothing is reused and the model no longer sees the sources it answered from.
Here every earlier question keeps its user message as it was sent to the model (its sources and
the question as searched), followed by the answer the client sends back:

    [instructions][sources 1 + Q1][A1][sources 2 + Q2] …

Sources are numbered across the conversation: a document shown in an earlier turn keeps its
number, new documents take the next numbers. So ``[n]`` means the same document in every turn,
and the answers' citations are kept. Each turn shows all of its own sources with the evidence
lines for its own question, so the last message is what the question alone would show, next to
it (measured: showing a document again only by its new evidence lines left the answer line
turns away from the question, and the 1.5B quoted it less often; evals/results/README.md).

Each turn's sources are fitted as if its question were asked alone (:func:`copilot.answer.prompting.fit_sources`),
so a turn's message depends only on the turns before it, never on what comes after: the service
re-derives the earlier turns by searching their questions again (:meth:`copilot.service.CopilotService.prepare`),
and a store that did not change gives the same message. Earlier turns are then kept newest first
while the whole prompt fits the budget; numbering starts at the oldest turn kept.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from transformers import PreTrainedTokenizerBase

from copilot.answer.prompting import (
    BuiltPrompt,
    Numbering,
    PromptStyle,
    context_ids,
    fit_sources,
    system_message,
    template_ids,
    user_message,
)
from copilot.search.sources import Source


@dataclass(frozen=True)
class EarlierTurn:
    """One earlier question and its answer.

    Attributes:
        question: the question as it was searched and shown (after the follow-up rewrite).
        sources: the sources its search returns, best first.
        answer: the answer as the client sent it back (citations kept).
    """

    question: str
    sources: tuple[Source, ...]
    answer: str


def _turn_messages(tokenizer: PreTrainedTokenizerBase, style: PromptStyle, turns: list[EarlierTurn],
                   question: str, sources: list[Source], budget_tokens: int,
                   instructions: str) -> tuple[list[dict[str, str]], dict[str, Source], list[Source]]:
    """The user and assistant messages of ``turns`` and then ``question``'s user message, numbered
    across them; also every shown source by document id, and ``question``'s own sources."""
    seen: dict[str, Source] = {}
    messages: list[dict[str, str]] = []
    chosen: list[Source] = []
    for turn_question, turn_sources, answer in [(t.question, list(t.sources), t.answer) for t in turns] + [
            (question, sources, None)]:
        chosen, blocks = fit_sources(tokenizer, style, turn_sources, turn_question, budget_tokens, instructions,
                                     Numbering(dict(seen), len(seen) + 1))
        for source in chosen:
            earlier = seen.get(source.doc_id)
            if earlier is None:
                seen[source.doc_id] = source
            else:  # shown again: its evidence lines for this question join the ones shown before
                new = tuple(h for h in source.highlights if h not in earlier.highlights)
                seen[source.doc_id] = replace(earlier, highlights=earlier.highlights + new)
        messages.append({"role": "user", "content": user_message(style, blocks, turn_question)})
        if answer is not None:
            messages.append({"role": "assistant", "content": answer})
    return messages, seen, chosen


def build_conversation_prompt(tokenizer: PreTrainedTokenizerBase, question: str, sources: list[Source],
                              budget_tokens: int, turns: list[EarlierTurn], style: PromptStyle,
                              instructions: str = "") -> BuiltPrompt | None:
    """The prompt of ``question`` (with its retrieved ``sources``, best first) after the earlier
    ``turns`` (oldest first), each shown with its own sources, within ``budget_tokens``.

    Returns:
        The prompt with the most recent turns that fit (``sources`` lists every source shown,
        numbered 1..n across the conversation; ``turn_sources`` the question's own), or ``None``
        when not even the last turn fits beside the question or no source fits at all (the
        caller then builds the prompt with earlier turns as bare text,
        :func:`copilot.answer.prompting.build_prompt`).
    """
    system = [{"role": "system", "content": system_message(style, instructions)}]
    for first in range(len(turns)):
        messages, seen, chosen = _turn_messages(tokenizer, style, turns[first:], question, sources,
                                                budget_tokens, instructions)
        if sources and not chosen:
            return None
        ids = template_ids(tokenizer, system + messages)
        if len(ids) <= budget_tokens:
            shown = sorted(seen.values(), key=lambda s: s.n)
            return BuiltPrompt(ids, shown, context_ids(tokenizer, sources), len(messages) - 1, chosen)
    return None
