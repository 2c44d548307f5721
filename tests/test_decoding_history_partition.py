"""The answer history partitioned by access scope (issue 23, item 6): an answer given to one
partition is never a drafting source for a request of another, and the output stays plain
greedy's whatever the partition."""

from __future__ import annotations

from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.drafters.base import DraftRequest
from decoding.drafters.ngram import AnswerHistory, NGramDrafter
from decoding.planning.policy import CostModel

P, Q, A, B, X, Y = 1, 2, 10, 11, 12, 13


def _proposal(history: AnswerHistory, partition: str, after: list[int]) -> list[int]:
    d = NGramDrafter(4, 1, history=history)
    d.begin(DraftRequest([P, Q], history_partition=partition))
    d.observe(after)
    return d.propose(4).tokens


def test_a_sequence_only_in_partition_a_is_never_proposed_for_b():
    history = AnswerHistory(4, 1)
    history.add([7, 7], [A, B, X, Y], "scope-a")  # another prompt: not skipped as "the same prompt"
    assert _proposal(history, "scope-a", [A, B]) == [X, Y]
    assert _proposal(history, "scope-b", [A, B]) == []
    assert _proposal(history, "", [A, B]) == []
    assert history.occurrences((A, B), 0, "scope-b") == [] and history.occurrences((A, B), 0, "scope-a")
    history.add([8, 8], [A, B, Y, X], "scope-b")
    assert _proposal(history, "scope-b", [A, B]) == [Y, X] and _proposal(history, "scope-a", [A, B]) == [X, Y]
    assert len(history) == 2


def test_partitions_beyond_the_cap_drop_the_least_recently_added_to():
    history = AnswerHistory(2, 1, max_partitions=2)
    for name in ("p1", "p2", "p1", "p3"):
        history.add([9], [A, B, X], name)
    assert history.occurrences((A, B), 0, "p2") == []  # dropped: p1 was added to after it
    assert history.occurrences((A, B), 0, "p1") and history.occurrences((A, B), 0, "p3")


def test_clear_forgets_every_partition():
    history = AnswerHistory(4, 1)
    history.add([7, 7], [A, B, X, Y], "scope-a")
    history.add([8, 8], [A, B, Y, X], "")
    history.clear()
    assert len(history) == 0 and history.partitions() == []
    assert _proposal(history, "scope-a", [A, B]) == [] and _proposal(history, "", [A, B]) == []


def test_the_engine_books_answers_in_their_partition_and_stays_exact(tiny_models):
    target = tiny_models.load("small")
    engine = SpeculativeEngine(target, costs=CostModel(verify_ms=(1.0,) * 12))
    tok = target.tokenizer
    first, second = tok.encode("the disk is full; restart"), tok.encode("the ticket is fixed. restart")
    out_a = engine.generate(first, GenerationConfig(budget=Budget(max_new_tokens=12, eos_token_ids=()),
                                                    speculation=Speculation(history_partition="scope-a")))
    assert out_a.token_ids == tiny_models.greedy("small", first, 12)
    ngram = tuple(out_a.token_ids[:2])
    assert engine.core.history.occurrences(ngram, 0, "scope-a")
    assert engine.core.history.occurrences(ngram, 0, "scope-b") == engine.core.history.occurrences(ngram, 0, "") == []
    out_b = engine.generate(second, GenerationConfig(budget=Budget(max_new_tokens=12, eos_token_ids=()),
                                                     speculation=Speculation(history_partition="scope-b")))
    assert out_b.token_ids == tiny_models.greedy("small", second, 12)
    assert "history" not in out_b.stats.origins  # scope-b's history held nothing to copy
