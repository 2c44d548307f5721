"""Answers that answer (issue 30): a bare citation or an echoed header gets a labelled extract,
the model's own "not in the sources" is reported as not found with the closest entries, and a
follow-up is searched as a question that stands alone. Pure functions over real chunks."""

from __future__ import annotations

import pytest

from copilot.answer.followup import is_followup, standalone_question
from copilot.answer.prompting import DEFAULT_STYLE, FAMILY_STYLES, MODEL_STYLES, ChatTurn, model_size, style_name
from copilot.answer.shape import CLOSEST_LABEL, EXTRACT_LABEL, abstains, addition, echoes_header, only_citations
from copilot.search.retrieval import Passage
from copilot.search.sources import Source
from ingestion.documents import Chunk


def _source(n: int, header: str, lines: tuple[str, ...], title: str) -> Source:
    doc_id = f"tickets/t.json#OPS-10{n}"
    chunk = Chunk(chunk_id=f"{doc_id}#0", doc_id=doc_id, text=header + "\n" + "\n".join(lines),
                  metadata={"title": title, "source": "tickets/t.json", "doc_id": doc_id, "chunk_index": 0})
    return Source(n, (Passage(0, chunk, 1.0),), lines)


SOURCES = [
    _source(1, "[jira] OPS-101: FTS transfers to FNAL failing (2026-01-20, Resolved)",
            ("Fixed by adding the vomsdir LSC file /etc/grid-security/vomsdir/cms/voms-cms.cern.ch.lsc",),
            "FTS transfers to FNAL failing"),
    _source(2, "[elog] operations #12: dc-pool-07 offline (2026-01-19)",
            ("Restarted with dcache restart dc-pool-07Domain",), "dc-pool-07 offline"),
]


@pytest.mark.parametrize("text", ["[1]", "[1][2].", " [2] ", "[1], [2]"])
def test_a_bare_citation_gets_the_best_evidence_line_labelled(text):
    assert only_citations(text)
    added, not_found = addition(text, SOURCES)
    assert added.startswith(f"\n\n{EXTRACT_LABEL}: \"") and added.endswith("\" [1]") and not not_found
    assert SOURCES[0].highlights[0] in added  # the first source's first line, whichever source was cited


def test_an_echoed_header_gets_the_extract_and_an_answer_gets_nothing():
    header_echo = "[1] OPS-101: FTS transfers to FNAL failing [1]"
    assert echoes_header(header_echo, SOURCES) and not only_citations(header_echo)
    assert "vomsdir" in addition(header_echo, SOURCES)[0]
    answer = "Add the vomsdir LSC file /etc/grid-security/vomsdir/cms/voms-cms.cern.ch.lsc [1]."
    assert addition(answer, SOURCES) == ("", False)
    assert not echoes_header(answer, SOURCES)


@pytest.mark.parametrize("text", ["Not found in the sources.", "The sources do not mention dc-pool-19 [1].",
                                  "I could not find that in the logbooks.", "There is no information about it.",
                                  "The provided passages don't contain the command."])
def test_the_models_own_abstention_is_not_found_with_the_closest_entries(text):
    assert abstains(text)
    added, not_found = addition(text, SOURCES)
    assert not_found and added.startswith(f"\n\n{CLOSEST_LABEL} [1] FTS transfers to FNAL failing; [2] ")


def test_no_sources_no_addition():
    assert addition("[1]", []) == ("", False)


HISTORY = [ChatTurn("user", "Which command restarted dc-pool-07?"), ChatTurn("assistant", "dcache restart [1]")]


@pytest.mark.parametrize("followup, standalone", [
    ("and on dc-pool-19?", "Which command restarted dc-pool-19?"),
    ("dc-pool-19?", "Which command restarted dc-pool-19?"),
    ("what about OPS-108?", "Which command restarted OPS-108?"),  # one name for one, whatever the kinds
    ("who did it?", "who did it? (follow-up to: Which command restarted dc-pool-07?)"),
    ("exact rebuild command?", "exact rebuild command? (follow-up to: Which command restarted dc-pool-07?)"),
    ("how were the held jobs let go?", "how were the held jobs let go? (follow-up to: Which command restarted "
                                       "dc-pool-07?)"),
])
def test_a_followup_is_searched_as_a_question_that_stands_alone(followup, standalone):
    assert is_followup(followup)
    assert standalone_question(followup, HISTORY) == standalone


@pytest.mark.parametrize("first, followup, standalone", [
    ("What fault did CRAC-B2 show on 8 January?", "and CH-2 on the 20th?", "What fault did CH-2 show on 20 January?"),
    ("Why did UPS-B go onto bypass on 30 January?", "and what was off with UPS-A on the 10th?",
     "and what was off with UPS-A on the 10th?"),  # names its own subject: searched as asked
])
def test_a_followup_swaps_one_name_for_one_and_a_bare_day_for_the_day(first, followup, standalone):
    history = [ChatTurn("user", first), ChatTurn("assistant", "...")]
    assert standalone_question(followup, history) == standalone


@pytest.mark.parametrize("question", ["How was the FNAL link fixed?", "What caused the FTS outage on 20 January?"])
def test_a_question_of_its_own_is_left_as_asked(question):
    assert standalone_question(question, HISTORY) == question
    assert standalone_question("and on dc-pool-19?", []) == "and on dc-pool-19?"  # nothing to resolve against


@pytest.mark.parametrize(("model_type", "name", "style"), [
    ("qwen2", "embedded:qwen2.5-coder-1.5b-instruct", MODEL_STYLES[("qwen2", "1.5b")]),
    ("qwen2", "embedded:qwen2.5-coder-0.5b-instruct", FAMILY_STYLES["qwen2"]),  # no measured style of its own
    ("llama", "/tmp/tiny-random-llama", FAMILY_STYLES["llama"]),
    ("mistral", "/models/Mistral-7B-Instruct-v0.3-Q4_K_M.gguf", DEFAULT_STYLE),
])
def test_the_default_prompt_style_is_the_measured_best_for_the_model(model_type, name, style):
    assert style_name("default", model_type, name) == style
    assert style_name("baseline", model_type, name) == "baseline"  # a named style is taken as named


def test_model_size_reads_the_parameter_count_from_the_name():
    assert model_size("Qwen/Qwen2.5-Coder-1.5B-Instruct") == "1.5b"
    assert model_size("/models/Qwen2.5-7B-Instruct-Q4_K_M.gguf") == "7b"
    assert model_size("gpt2") == ""

