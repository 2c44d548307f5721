"""Chat prompts with numbered sources inside a token budget.

Budget: ``max_prompt_tokens`` (capped by the target's context window minus
``max_new_tokens``) holds the system instructions, the question, the sources and the
conversation history, **in that order of priority**: sources are added in rank order
while they fit (a source that does not fit whole is shown by its evidence lines), then
history fills what is left, newest turn first (the oldest are dropped). Citation
markers in earlier assistant turns are removed: they pointed at another turn's sources. (By
default a follow-up shows its earlier turns with their own sources instead, numbered across the
conversation: :mod:`copilot.answer.conversation`; this bare-text history is its fallback.)
Every retrieved chunk — also those cut for the budget — seeds the n-gram drafter.

How a source is shown (:class:`PromptStyle`) was tuned by measurement per model family
(``copilot eval answers --prompt-style A,B``; :data:`FAMILY_STYLES`; the tables are in
``evals/results/prompt_styles.md`` and ``evals/results/models/prompt-styles-qwen2.md``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, cast

from transformers import PreTrainedTokenizerBase

from copilot.answer.citations import strip_citations
from copilot.search.sources import Source

NO_CONTEXT_ANSWER = ("I found no logbook entries or tickets to answer from: the document store is empty or "
                     "nothing matched.")


def no_context_answer(store_empty: bool, filtered: bool, scoped: bool) -> str:
    """The answer when retrieval found no source, saying why: the store is empty, the filters
    (``filtered``) matched nothing, or nothing within the key's read scope (``scoped``) matched."""
    lead = "I found no logbook entries or tickets to answer from: "
    if store_empty:
        return lead + "the document store is empty."
    scope = " that your API key may read" if scoped else ""
    if filtered:
        return lead + f"no entry{scope} matches the filters you gave."
    if scoped:
        return lead + "no entry that your API key may read matched."
    return NO_CONTEXT_ANSWER


class PromptTooLongError(ValueError):
    """The question (with the instructions) alone exceeds the prompt budget."""


@dataclass(frozen=True)
class PromptStyle:
    """How the prompt presents the sources (the knobs ``copilot eval answers`` compares).

    Attributes:
        system: the system instructions.
        passages: ``"chunks"`` (each source's matched chunks, whole), ``"highlights"`` (its
            header and evidence lines only: a much shorter prompt), ``"numbered-lines"`` (the
            same, each line ending with ``[n]``) or ``"evidence-first"`` (its evidence lines,
            then the header).
        max_sources: sources retrieved for the prompt when neither the request nor the
            settings name ``max_sources``.
        best_last: list the best source last, next to the question (else first).
        answer_hint: appended to the question (e.g. a length hint); empty for none.
    """

    system: str
    passages: Literal["chunks", "highlights", "evidence-first", "numbered-lines"] = "chunks"
    max_sources: int = 5
    best_last: bool = False
    answer_hint: str = ""


SYSTEM_LONG = (
    "You are OpsCopilot, an assistant for a computing operations team. Answer the question "
    "using only the numbered passages from the team's logbooks and tickets. Quote commands, "
    "error messages, paths, host names and ticket ids exactly as written, and cite the "
    "passages you used as [n]. If the passages do not contain the answer, say so."
)
SYSTEM_SHORT = (
    "You answer questions from an operations team's logbooks and tickets. Use only the numbered "
    "sources. Quote commands, errors and paths exactly. Cite sources as [n]."
)
SYSTEM_QUOTE = (
    "You answer questions from an operations team's logbooks and tickets. Reply with the line from the "
    "sources that answers the question, copied exactly, followed by its source number like [1]. Then add "
    "at most one short sentence."
)
#: The quote instructions with an abstention phrase the service recognises (``answer_shape.abstains``).
SYSTEM_QUOTE_ABSTAIN = SYSTEM_QUOTE + (
    " If no source answers the question, reply exactly: Not found in the sources.")

SYSTEM_QUOTE_CODE = (
    "You answer an operations team's questions from its logbooks and tickets. Use only the numbered sources. "
    "Copy commands, error messages, paths, host names and values exactly as the sources write them, in backticks. "
    "Cite the source of each fact as [n]."
)
ANSWER_HINT = "Answer in one or two sentences and cite the source."

#: Named styles compared by the answers eval; ``DEFAULT_STYLE`` is the measured best.
PROMPT_STYLES: dict[str, PromptStyle] = {
    "baseline": PromptStyle(SYSTEM_LONG, "chunks", 5),
    "chunks-3": PromptStyle(SYSTEM_LONG, "chunks", 3),
    "highlights-5": PromptStyle(SYSTEM_LONG, "highlights", 5),
    "highlights-3": PromptStyle(SYSTEM_LONG, "highlights", 3),
    "highlights-3-short": PromptStyle(SYSTEM_SHORT, "highlights", 3,
                                      answer_hint="Answer in one or two sentences and cite the source."),
    "highlights-3-short-last": PromptStyle(SYSTEM_SHORT, "highlights", 3, best_last=True,
                                           answer_hint="Answer in one or two sentences and cite the source."),
    "quote-3": PromptStyle(SYSTEM_QUOTE, "highlights", 3),
    "quote-3-last": PromptStyle(SYSTEM_QUOTE, "highlights", 3, best_last=True),
    "quote-5": PromptStyle(SYSTEM_QUOTE, "highlights", 5),
    "evidence-first-3": PromptStyle(SYSTEM_QUOTE, "evidence-first", 3),
    "evidence-first-3-short": PromptStyle(SYSTEM_SHORT, "evidence-first", 3,
                                          answer_hint="Answer in one or two sentences and cite the source."),
    "code-highlights-3": PromptStyle(SYSTEM_QUOTE_CODE, "highlights", 3, answer_hint=ANSWER_HINT),
    "code-chunks-3": PromptStyle(SYSTEM_QUOTE_CODE, "chunks", 3, answer_hint=ANSWER_HINT),
    "code-evidence-first-3": PromptStyle(SYSTEM_QUOTE_CODE, "evidence-first", 3, answer_hint=ANSWER_HINT),
    "quote-lines-3": PromptStyle(SYSTEM_QUOTE, "numbered-lines", 3),
    "quote-lines-3-abstain": PromptStyle(SYSTEM_QUOTE_ABSTAIN, "numbered-lines", 3),
    "code-lines-3": PromptStyle(SYSTEM_QUOTE_CODE, "numbered-lines", 3, answer_hint=ANSWER_HINT),
}
DEFAULT_STYLE = "highlights-3-short"
#: The measured best style per model family (``config.model_type``); others get :data:`DEFAULT_STYLE`.
FAMILY_STYLES: dict[str, str] = {"llama": "highlights-3-short", "qwen2": "quote-lines-3"}
#: The measured best style per model, by family and the size its name gives (``…-1.5b-…``),
#: chosen with ``copilot eval answers --prompt-style A,B,…`` on the sample and site2 sets.
MODEL_STYLES: dict[tuple[str, str], str] = {("qwen2", "1.5b"): "quote-lines-3"}
_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])")


def model_size(name: str) -> str:
    """The parameter count a model's id or path names (``"1.5b"`` for ``Qwen2.5-Coder-1.5B-Instruct``),
    ``""`` when it names none."""
    sizes = _SIZE.findall(Path(name).name if name else "")
    return f"{sizes[-1]}b" if sizes else ""


def style_name(setting: str, model_type: str | None, model_name: str = "") -> str:
    """The style a ``prompt_style`` setting names: itself, or for ``"default"`` the measured best
    for the target (:data:`MODEL_STYLES` by family and size, else :data:`FAMILY_STYLES`).

    Raises:
        KeyError: an unknown style name.
    """
    if setting == "default":
        family = model_type or ""
        name = MODEL_STYLES.get((family, model_size(model_name)), FAMILY_STYLES.get(family, DEFAULT_STYLE))
    else:
        name = setting
    if name not in PROMPT_STYLES:
        raise KeyError(f"unknown prompt style {name!r}; known: {', '.join(PROMPT_STYLES)}")
    return name


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
        sources: the sources shown to the model, numbered as cited (``[n]`` = ``sources[n-1]``).
        context_ids: token ids of every retrieved chunk (shown or not) for the n-gram drafter.
        history_turns: how many history messages fit (the most recent ones).
        turn_sources: the sources retrieved for this question as shown, numbered as cited; the
            same as ``sources`` unless earlier turns are shown with their own sources
            (:mod:`copilot.answer.conversation`), whose sources then come first in ``sources``.
    """

    input_ids: list[int]
    sources: list[Source]
    context_ids: list[list[int]]
    history_turns: int
    turn_sources: list[Source] = field(default_factory=list)


def format_source(source: Source, passages: str = "chunks") -> str:
    """``[n] header`` then the source's matched chunks (``"chunks"``) or its evidence lines
    (``"highlights"``; ``"numbered-lines"``: each line ends with ``[n]``, so a model that copies
    the line copies its citation too); ``"evidence-first"``: ``[n]`` then its evidence lines, best first, and
    the header last (a small model that copies the start of a source copies the evidence)."""
    if passages == "evidence-first" and source.highlights:
        lines = "\n".join(source.highlights)
        return f"[{source.n}] {lines}\n(from {source.header})"
    if passages == "numbered-lines" and source.highlights:
        body = "\n".join(f"- {h} [{source.n}]" for h in source.highlights)
    elif passages in ("highlights", "evidence-first") and source.highlights:
        body = "\n".join(f"- {h}" for h in source.highlights)
    else:
        body = source.body()
    return f"[{source.n}] {source.header}\n{body.strip()}"


def system_message(style: PromptStyle, instructions: str = "") -> str:
    """OpsCopilot's instructions, then the client's own (its system message), if any."""
    return f"{style.system}\n\n{instructions}" if instructions else style.system


def user_message(style: PromptStyle, blocks: list[str], question: str) -> str:
    """A question's user message: its formatted sources (``blocks``, best first) and the question."""
    shown = list(reversed(blocks)) if style.best_last else blocks
    context = "\n\n".join(shown) if shown else "(no sources)"
    ask = f"{question}\n{style.answer_hint}" if style.answer_hint else question
    return f"Sources:\n\n{context}\n\nQuestion: {ask}"


def template_ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> list[int]:
    """``messages`` chat-templated with the generation prompt: the token ids the target reads."""
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = out["input_ids"] if isinstance(out, Mapping) else out  # a BatchEncoding in transformers 5
    # tokenize=True without return_tensors gives int ids; transformers types the result for every mode at once
    return list(cast("list[int]", ids))


def _render(tokenizer: PreTrainedTokenizerBase, style: PromptStyle, blocks: list[str],
            history: list[ChatTurn], question: str, instructions: str = "") -> list[int]:
    """Chat-template the prompt; ``blocks`` are the formatted sources, best first."""
    messages = [{"role": "system", "content": system_message(style, instructions)}]
    messages += [{"role": t.role, "content": t.content} for t in history]
    messages.append({"role": "user", "content": user_message(style, blocks, question)})
    return template_ids(tokenizer, messages)


def bare_prompt_tokens(tokenizer: PreTrainedTokenizerBase, question: str, style: PromptStyle | None = None,
                       instructions: str = "") -> int:
    """Tokens of the prompt with the instructions and the question only (no sources, no history)."""
    return len(_render(tokenizer, style or PROMPT_STYLES[DEFAULT_STYLE], [], [], question, instructions))


def clean_history(history: list[ChatTurn]) -> list[ChatTurn]:
    """Earlier turns without the citation markers of earlier answers (other numbering)."""
    return [ChatTurn(t.role, strip_citations(t.content) if t.role == "assistant" else t.content) for t in history]


def build_prompt(tokenizer: PreTrainedTokenizerBase, question: str, sources: list[Source], budget_tokens: int,
                 history: list[ChatTurn] | None = None, style: PromptStyle | None = None,
                 instructions: str = "") -> BuiltPrompt:
    """Fit instructions (OpsCopilot's, then ``instructions``: the client's system message),
    question, sources and then history into ``budget_tokens``.

    Sources are added in rank order while they fit; one
    that does not fit whole is tried as its evidence lines; a later, shorter one may
    still fit. They are renumbered 1..n in rank order. History turns are then added
    newest first while they fit.

    Raises:
        PromptTooLongError: the question with the instructions alone exceeds the budget, or
            leaves no room for even the evidence lines of one source.
    """
    style = style or PROMPT_STYLES[DEFAULT_STYLE]
    history = clean_history(list(history or []))
    bare = len(_render(tokenizer, style, [], [], question, instructions))
    if bare > budget_tokens:
        raise PromptTooLongError(f"the question needs {bare} prompt tokens; the budget is {budget_tokens}")
    chosen, blocks = fit_sources(tokenizer, style, sources, question, budget_tokens, instructions)
    if sources and not chosen:
        raise PromptTooLongError(f"no source fits next to the question within the prompt budget of {budget_tokens} "
                                 f"tokens (the question needs {bare}); shorten the question")
    kept: list[ChatTurn] = []
    for turn in reversed(history):
        if len(_render(tokenizer, style, blocks, [turn] + kept, question, instructions)) > budget_tokens:
            break
        kept.insert(0, turn)
    ids = _render(tokenizer, style, blocks, kept, question, instructions)
    return BuiltPrompt(ids, chosen, context_ids(tokenizer, sources), len(kept), chosen)


def context_ids(tokenizer: PreTrainedTokenizerBase, sources: list[Source]) -> list[list[int]]:
    """Token ids of every retrieved chunk of ``sources`` (shown or not), for the n-gram drafter."""
    return [tokenizer(p.chunk.text, add_special_tokens=False)["input_ids"] for s in sources for p in s.passages]


@dataclass(frozen=True)
class Numbering:
    """How :func:`fit_sources` numbers the sources of one question of a conversation: a source
    already shown earlier (``seen``, by document id) keeps its number; new ones are numbered
    from ``first_n`` in rank order."""

    seen: Mapping[str, Source] = field(default_factory=dict)
    first_n: int = 1


def fit_sources(tokenizer: PreTrainedTokenizerBase, style: PromptStyle, sources: list[Source], question: str,
                budget_tokens: int, instructions: str = "",
                numbering: Numbering = Numbering()) -> tuple[list[Source], list[str]]:
    """The sources shown with ``question``, and their formatted blocks, fitted into ``budget_tokens``
    as if the question were asked alone, numbered by ``numbering``.

    Sources are taken in rank order while they fit; one that does not fit whole is tried as its
    evidence lines; a later, shorter one may still fit.
    """
    seen, first_n = numbering.seen, numbering.first_n
    chosen: list[Source] = []
    blocks: list[str] = []
    for source in sources:
        earlier = seen.get(source.doc_id)
        n = earlier.n if earlier is not None else first_n + sum(c.doc_id not in seen for c in chosen)
        candidate = replace(source, n=n)
        for mode in dict.fromkeys([style.passages, "highlights"]):  # whole, else its evidence lines
            block = format_source(candidate, mode)
            if len(_render(tokenizer, style, blocks + [block], [], question, instructions)) <= budget_tokens:
                chosen.append(candidate)
                blocks.append(block)
                break
    return chosen, blocks



def chat_prompt(tokenizer: PreTrainedTokenizerBase, question: str, budget_tokens: int,
                history: list[ChatTurn] | None = None, instructions: str = "") -> BuiltPrompt:
    """The messages as sent, chat-templated, without sources (retrieval off): the client's
    system message (if any), then history newest first while it fits ``budget_tokens``, then
    ``question``.

    Raises:
        PromptTooLongError: the system message and the question alone exceed the budget.
    """
    system = [{"role": "system", "content": instructions}] if instructions else []
    last = [{"role": "user", "content": question}]
    history = list(history or [])

    def render(turns: list[ChatTurn]) -> list[int]:
        return template_ids(tokenizer, system + [{"role": t.role, "content": t.content} for t in turns] + last)

    bare = len(render([]))
    if bare > budget_tokens:
        raise PromptTooLongError(f"the messages need {bare} prompt tokens; the budget is {budget_tokens}")
    kept: list[ChatTurn] = []
    for turn in reversed(history):
        if len(render([turn] + kept)) > budget_tokens:
            break
        kept.insert(0, turn)
    return BuiltPrompt(render(kept), [], [], len(kept))


def completion_prompt(tokenizer: PreTrainedTokenizerBase, text: str, budget_tokens: int) -> BuiltPrompt:
    """``text`` as the whole prompt (no chat template, no sources), as ``/v1/completions`` takes it.

    Raises:
        PromptTooLongError: ``text`` is over ``budget_tokens`` tokens.
    """
    ids = list(tokenizer(text)["input_ids"])
    if len(ids) > budget_tokens:
        raise PromptTooLongError(f"the prompt has {len(ids)} tokens; the budget is {budget_tokens}")
    return BuiltPrompt(ids, [], [], 0)
