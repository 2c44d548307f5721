"""A conversation's earlier turns shown as the model saw them (:mod:`copilot.answer.conversation`): the
previous prompt is a prefix of the follow-up's, sources are numbered across the conversation, and
the budget drops the oldest turns first."""

from __future__ import annotations

import pytest

from copilot.answer.assembly import AnswerAssembler
from copilot.answer.conversation import EarlierTurn, build_conversation_prompt
from copilot.answer.prompting import PROMPT_STYLES, ChatTurn, Numbering, build_prompt, fit_sources
from copilot.answer.question import GenerationParams, QuestionRequest
from copilot.search.retrieval import Passage
from copilot.search.sources import Source
from copilot.service import CopilotService
from ingestion.documents import Chunk

STYLE = PROMPT_STYLES["quote-lines-3"]
FIRST = "Why did both FTS3 servers stop scheduling transfers on 27 January?"
FOLLOWUP = "which commit reverted it?"
#: An 8-token answer budget: the follow-up prompts are compared, not the answers.
BUDGET_8 = GenerationParams(max_new_tokens=8)


def _source(doc: str, *lines: str) -> Source:
    chunk = Chunk(f"{doc}#0", doc, f"[elog] {doc} | title {doc}\n" + "\n".join(lines), {"title": f"title {doc}"})
    return Source(0, (Passage(0, chunk, 1.0),), tuple(lines))


A = _source("a", "dcache restarted with systemctl restart dcache@door", "door back at 10:02")
B = _source("b", "FTS config reverted to commit b2d4e60", "transfers resumed")
C = _source("c", "pool dc-pool-07 drained", "pool dc-pool-07 back")


@pytest.fixture(scope="module")
def tokenizer(embedded_target):
    return embedded_target.tokenizer


def _text(tokenizer, prompt) -> str:
    return tokenizer.decode(prompt.input_ids)


def test_the_first_turns_prompt_is_a_prefix_of_the_follow_ups(tokenizer):
    first = build_prompt(tokenizer, "how was the door restarted?", [A, B], 2048, style=STYLE)
    turn = EarlierTurn("how was the door restarted?", (A, B), "systemctl restart dcache@door [1]")
    follow = build_conversation_prompt(tokenizer, "and the pool?", [C, A], 2048, [turn], STYLE)
    assert follow is not None
    assert follow.input_ids[:len(first.input_ids)] == first.input_ids
    assert "systemctl restart dcache@door [1]" in _text(tokenizer, follow)  # the answer keeps its citation
    assert follow.history_turns == 2


def test_sources_are_numbered_across_the_conversation(tokenizer):
    turn = EarlierTurn("how was the door restarted?", (A, B), "[1]")
    follow = build_conversation_prompt(tokenizer, "and the pool?", [C, A], 2048, [turn], STYLE)
    assert [(s.n, s.doc_id) for s in follow.sources] == [(1, "a"), (2, "b"), (3, "c")]
    assert [(s.n, s.doc_id) for s in follow.turn_sources] == [(3, "c"), (1, "a")]  # A keeps its number
    text = _text(tokenizer, follow)
    assert text.count("- door back at 10:02 [1]") == 2  # shown again, next to the follow-up, as [1]
    assert "- pool dc-pool-07 drained [3]" in text


def test_a_source_shown_before_keeps_its_number(tokenizer):
    seen = {"a": Source(1, A.passages, ("door back at 10:02",))}
    chosen, blocks = fit_sources(tokenizer, STYLE, [C, A, B], "q", 2048, numbering=Numbering(seen, 2))
    assert [(s.n, s.doc_id) for s in chosen] == [(2, "c"), (1, "a"), (3, "b")]
    assert blocks[1].startswith("[1] ") and "systemctl restart dcache@door [1]" in blocks[1]


def test_the_budget_drops_the_oldest_turns_first(tokenizer):
    turns = [EarlierTurn(f"question {i}?", (_source(f"d{i}", f"line {i} " * 40),), f"answer {i}") for i in range(4)]
    whole = build_conversation_prompt(tokenizer, "last?", [C], 4096, turns, STYLE)
    assert whole is not None and whole.history_turns == 8
    budget = len(whole.input_ids) - 60  # one turn short
    cut = build_conversation_prompt(tokenizer, "last?", [C], budget, turns, STYLE)
    assert cut is not None and cut.history_turns == 6 and len(cut.input_ids) <= budget
    text = _text(tokenizer, cut)
    assert "question 0?" not in text and "question 3?" in text
    assert [s.n for s in cut.sources] == [1, 2, 3, 4]  # numbered from the oldest turn kept
    alone = build_prompt(tokenizer, "last?", [C], 2048, style=STYLE)
    assert build_conversation_prompt(tokenizer, "last?", [C], len(alone.input_ids) + 5, turns, STYLE) is None


@pytest.mark.slow
def test_the_service_shows_earlier_turns_with_their_sources(sample_service):
    service = sample_service
    first = service.prepare(service.question(QuestionRequest(FIRST, generation=BUDGET_8)))
    answer = AnswerAssembler(first)
    for event in service.stream(first):
        answer.add(event)
    history = (ChatTurn("user", FIRST), ChatTurn("assistant", answer.answer().text))
    follow = service.prepare(service.question(QuestionRequest(FOLLOWUP, history=history, generation=BUDGET_8)))
    assert follow.prompt.input_ids[:len(first.prompt.input_ids)] == first.prompt.input_ids
    assert [s.n for s in follow.prompt.sources] == list(range(1, len(follow.prompt.sources) + 1))
    shown = {s.doc_id: s.n for s in follow.prompt.sources}
    assert all(shown[s.doc_id] == s.n for s in follow.prompt.turn_sources)
    assert follow.grounding.answerable


@pytest.mark.slow
def test_with_no_conversation_turns_earlier_turns_are_bare_text(sample_service):
    service = CopilotService(sample_service.settings.model_copy(update={"conversation_turns": 0}),
                             sample_service.store, sample_service.models.engine)
    history = (ChatTurn("user", FIRST), ChatTurn("assistant", "It was reverted [2]."))
    follow = service.prepare(service.question(QuestionRequest(FOLLOWUP, history=history, generation=BUDGET_8)))
    text = service.models.engine.target.tokenizer.decode(follow.prompt.input_ids)
    assert "It was reverted." in text and text.count("Sources:") == 1
    assert follow.prompt.sources == follow.prompt.turn_sources


@pytest.mark.slow
def test_an_earlier_question_no_longer_valid_falls_back_to_bare_history(sample_service):
    service = sample_service
    too_long = "x" * (service.settings.max_question_chars + 1)
    history = (ChatTurn("user", too_long), ChatTurn("assistant", "It was reverted [2]."))
    follow = service.prepare(service.question(QuestionRequest(FIRST, history=history, generation=BUDGET_8)))
    text = service.models.engine.target.tokenizer.decode(follow.prompt.input_ids)
    assert text.count("Sources:") == 1 and follow.prompt.sources == follow.prompt.turn_sources
