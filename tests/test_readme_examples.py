"""The README's own example questions are answered right (issue 30, item 5): each question the
README asks (``copilot ask "..."``, ``{"question": "..."}``) is read from the README itself and
asked through the service over the sample corpus with the default target on this machine (the
one ``copilot serve`` loads: the Qwen2.5-Coder 1.5B on llama.cpp where it is built); the answer
must show the expected document and state the literal an operator needs (in the model's words or
its labelled extract)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from copilot.answer.assembly import AnswerAssembler
from copilot.answer.question import GenerationParams, QuestionRequest
from copilot.config import Settings, default_target
from copilot.service import CopilotService

README = Path(__file__).resolve().parents[1] / "README.md"
#: What a right answer to each README question holds: the document, the literal.
EXPECTED = {
    "Which command restarted dc-pool-07?": ("logbooks/operations.elog#2", "systemctl restart dcache@dc-pool-07Domain"),
    "How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?":
        ("logbooks/operations.elog#4", "/etc/grid-security/vomsdir/cms/voms-cms-auth.cern.ch.lsc"),
}


def readme_questions() -> list[str]:
    text = README.read_text(encoding="utf-8")
    asked = re.findall(r'copilot ask "([^"]+)"', text) + re.findall(r'"question": "([^"]+)"', text)
    return list(dict.fromkeys(asked))


def test_every_readme_question_has_an_expected_answer():
    assert set(readme_questions()) == set(EXPECTED), "a README example question without an expected answer"


@pytest.fixture(scope="module")
def default_service(sample_service, tmp_path_factory):
    """The sample store (as ``sample_service`` ingested it) answered by the default target."""
    from decoding import SpeculativeEngine
    from decoding.backends.models import LoadOptions, load_target

    name = default_target("cpu")
    target = load_target(name,
                         LoadOptions(device="cpu", cache_dir=Settings(_env_file=None).model_cache_dir, n_seq_max=2))
    settings = Settings(data_dir=tmp_path_factory.mktemp("readme"), target_model=name, _env_file=None)
    return CopilotService(settings, sample_service.store, SpeculativeEngine(target))


@pytest.mark.slow
@pytest.mark.parametrize("question", sorted(EXPECTED))
def test_the_readme_examples_are_answered_with_the_source_and_the_literal(default_service, question):
    doc_id, literal = EXPECTED[question]
    asked = QuestionRequest(question, generation=GenerationParams(max_new_tokens=64))
    prepared = default_service.prepare(default_service.question(asked))
    assembler = AnswerAssembler(prepared)
    for event in default_service.stream(prepared):
        assembler.add(event)
    answer = assembler.answer()
    assert doc_id in [s.doc_id for s in answer.sources], [s.doc_id for s in answer.sources]
    assert literal in answer.text, answer.text
    assert not answer.not_found
