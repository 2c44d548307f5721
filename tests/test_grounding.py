"""Grounding (copilot/answer/grounding.py): entities a question names, near-duplicates ordered, "not found"."""

from __future__ import annotations

import numpy as np
import pytest
from answering import answer as answer_of

from copilot.answer.grounding import assess, not_found_answer
from copilot.answer.question import QuestionRequest
from copilot.search.entities import DateRef, DocumentText, entity_order, holds, question_entities

SE04 = DocumentText("elog#1",
                    "2026-04-03 se-04.alp.example: [ERROR] Socket timeout; fixed with ethtool -G eth0 rx 4096",
                    ("2026-04-03T09:10:00+02:00",))
SE07 = DocumentText("jira#ALP-204", "ALP-204 se-07.alp.example: [ERROR] Socket timeout; raised xrootd.sched maxt 2048",
                    ("2026-04-12T11:00:00+02:00",))


def test_question_entities():
    e = question_entities("Socket timeout on se-07 on April 12th (ALP-204), see SRM_AUTHORIZATION_FAILURE and [3021]?")
    assert e.names == ("se-07", "ALP-204", "SRM_AUTHORIZATION_FAILURE", "[3021]")
    assert e.dates == (DateRef(4, 12, None, "April 12th"),)
    e = question_entities("what broke on 2026-04-03, and on 13.04., and the 5 May 2026 one?")
    assert {(d.month, d.day, d.year) for d in e.dates} == {(4, 3, 2026), (4, 13, None), (5, 5, 2026)}
    assert not question_entities("how did we fix the pool that went read-only")
    assert question_entities("13.04 on wn-0248").names == ("wn-0248",)
    # chat shorthand shaped like a name is not one: the host is still named
    assert question_entities("whats the cmd used B4 swapping slot 19 on hdp07-atlas-2").names == ("hdp07-atlas-2",)


def test_a_slashed_day_is_a_day_first_date_not_a_name():
    e = question_entities("fts delegation for the atlas robot expired on 16/03, how was it re-delegated?")
    assert not e.names and e.dates == (DateRef(3, 16, None, "16/03"),)
    assert question_entities("on 16/03/2026").dates == (DateRef(3, 16, 2026, "16/03/2026"),)
    assert question_entities("what is in /etc/grid/03").names == ("/etc/grid/03",)
    shift = DocumentText("shift#2026-03-16", "Shift 2026-03-16 afternoon: re-delegated the robot proxy",
                         ("2026-03-16T14:00:00+01:00",))
    assert holds(shift, question_entities("expired on 16/03?")) == (["16/03"], [])


def test_a_date_matches_created_or_the_text():
    assert DateRef(4, 3).matches("2026-04-03T09:10:00+02:00") and not DateRef(4, 3, 2025).matches("2026-04-03")
    doc = DocumentText("x", "work planned for Saturday 21 March, GOCDB downtime 38412")
    assert holds(doc, question_entities("downtime on 21 March?")) == (["21 March"], [])
    assert holds(DocumentText("y", "moved LTO9 cartridges"), question_entities("LTO-9 drive?"))[0] == ["LTO-9"]


def test_near_duplicates_are_ordered_by_the_entities_they_hold():
    docs = [SE04, SE07]
    assert entity_order(docs, question_entities("Socket timeout on se-07, fix?")) == [1, 0]
    assert entity_order(docs, question_entities("Socket timeout on April 3rd, fix?")) == [0, 1]
    assert entity_order(docs, question_entities("Socket timeout, fix?")) == [0, 1]


class FixedEmbedder:
    """Question vector vs every line: cosine ``similarity`` (unit vectors)."""

    def __init__(self, similarity: float) -> None:
        self.similarity = similarity

    def embed_array(self, texts):
        s = self.similarity
        return np.array([[1.0, 0.0]] + [[s, (1 - s * s) ** 0.5]] * (len(texts) - 1))


def test_not_found_when_a_named_entity_is_in_no_source():
    g = assess("Socket timeout on se-09 on the 12th?", [SE04, SE07], ["line"], FixedEmbedder(0.9))
    assert not g.answerable and g.missing == ["se-09"] and "se-09" in g.reason


def test_not_found_on_weak_evidence_only_without_named_entities():
    assert not assess("how do we restart the ceph mds?", [SE04], ["line"], FixedEmbedder(0.2)).answerable
    assert assess("how do we restart the ceph mds?", [SE04], ["line"], FixedEmbedder(0.5)).answerable
    g = assess("what happened on se-04?", [SE04], ["line"], FixedEmbedder(0.1))
    assert g.answerable and g.entities == ["se-04"]
    assert assess("anything?", [SE04], [], None).answerable  # no embedder, no entity: nothing to refuse on


def test_not_found_answer_lists_the_closest_entries():
    g = assess("ALP-299 status?", [SE04], ["l"], None)
    text = not_found_answer(g, ["se-04 socket timeout", "other"])
    assert text.startswith("Not found") and "ALP-299" in text and "[1] se-04 socket timeout" in text and "[2]" in text


@pytest.mark.slow
def test_service_answers_not_found_without_running_the_model(sample_service):
    """A question naming a host no entry mentions: "not found" with the closest entries, no
    target pass, and the answer still carries its sources; a named host that exists answers."""
    prepared = sample_service.prepare(
        sample_service.question(QuestionRequest("Which command restarted dc-pool-99 after the RAID rebuild?")))
    assert not prepared.grounding.answerable and prepared.grounding.missing == ["dc-pool-99"]
    answer = answer_of(sample_service, prepared)
    assert answer.not_found and answer.text.startswith("Not found") and "dc-pool-99" in answer.text
    assert answer.stats.get("target_passes", 0) == 0 and answer.sources
    assert answer.cited and all(1 <= n <= len(answer.sources) for n in answer.cited)
    asked = QuestionRequest("Which command restarted dc-pool-07 after the RAID rebuild?")
    ok = sample_service.prepare(sample_service.question(asked))
    assert ok.grounding.answerable and ok.prompt.sources[0].doc_id == "logbooks/operations.elog#2"


@pytest.mark.slow
def test_elog_entry_brings_its_linked_reply(sample_service):
    """The problem entry (MID 1) names its reply (MID 2), which holds the fix: both are shown."""
    sources = sample_service.search("dc-pool-07 offline after disk failure, what was done?", max_sources=2)
    ids = [s.doc_id for s in sources]
    assert ids[0] in ("logbooks/operations.elog#1", "logbooks/operations.elog#2")
    assert {"logbooks/operations.elog#1", "logbooks/operations.elog#2"} <= set(ids) and len(ids) == 2
