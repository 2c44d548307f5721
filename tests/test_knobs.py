"""Every knob is named once, from the request model to where it is used (issue 31).

``max_sources``, ``max_new_tokens``, ``temperature`` and ``speculation`` are walked from the
request (``POST /v1/ask``'s :class:`AskRequest`, the OpenAI chat request) through the real
route, :func:`copilot.api.generation.question`, :meth:`CopilotService.question` and the
scheduler to where each is used: ``max_sources`` to the retrieval call, the others to the
:class:`~decoding.config.GenerationConfig` the engine receives. Each keeps its name at every
hop (``speculation`` is the engine config's ``speculation.mode``) and arrives unchanged; an
unset one takes its default from the settings, in one place. No model is loaded: a recording
engine stands in (a tiny tokenizer with a chat template), over the light store.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from fastapi.testclient import TestClient
from interleaved import StreamOnly

from copilot.answer.question import GenerationParams, Question, QuestionRequest
from copilot.api import generation
from copilot.api.app import create_app
from copilot.api.schemas.ask import AskRequest
from copilot.api.schemas.chat import ChatCompletionRequest
from copilot.config import Settings
from copilot.search.searcher import Searcher
from copilot.service import CopilotService
from decoding.config import Budget, GenerationConfig, Sampling, Speculation
from decoding.engine import GenerationResult, StreamEvent
from decoding.stats import GenerationStats

QUESTION = "How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?"
#: A value per knob that no default has, so that arriving unchanged is visible.
SET = {"max_sources": 3, "max_new_tokens": 7, "temperature": 0.25, "speculation": "table"}
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


class _Target:
    """What the service reads of a target: its tokenizer and context window."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.max_positions = 32768
        self.name, self.model_type, self.backend = "tiny", None, "torch"


class RecordingEngine(StreamOnly):
    """Engine stand-in: records each config it resolves and decodes; answers ``max_new_tokens`` tokens."""

    def __init__(self, target: _Target) -> None:
        self.target = target
        self.decoded: list = []

    def resolve(self, config):
        return None

    def stream(self, prompt_ids, config, contexts=(), cancel=None, settings=None):
        self.decoded.append(config)
        n = config.budget.max_new_tokens
        stats = GenerationStats(prompt_tokens=len(prompt_ids), new_tokens=n, finish_reason="length")
        yield StreamEvent(" ok" * n, [42] * n, GenerationResult([42] * n, " ok" * n, "length", stats))


@pytest.fixture
def walk(tiny_models, light_store, tmp_path):
    """``(path, body) -> (question, retrieval max_sources, engine config)`` through the real app."""
    tokenizer = tiny_models.tokenizer("big")
    tokenizer.chat_template = CHAT_TEMPLATE
    settings = Settings(data_dir=tmp_path, max_new_tokens=40, max_sources=5, min_support=0.0, _env_file=None)
    engine = RecordingEngine(_Target(tokenizer))
    service = CopilotService(settings, light_store, engine)
    seen: dict = {"questions": [], "retrieved": []}
    ask_service, search = service.question, service.searcher.search

    def question(request: QuestionRequest) -> Question:
        seen["questions"].append(ask_service(request))
        return seen["questions"][-1]

    def retrieval(*args, **kwargs):
        seen["retrieved"].append(inspect.signature(search).bind(*args, **kwargs).arguments["max_sources"])
        return search(*args, **kwargs)

    service.question, service.searcher.search = question, retrieval

    def run(path: str, body: dict):
        with TestClient(create_app(settings, service)) as client:
            r = client.post(path, json=body)
        assert r.status_code == 200, r.text
        assert len(seen["questions"]) == 1 and len(engine.decoded) == 1, "the model must have answered"
        return seen["questions"].pop(), seen["retrieved"][0], engine.decoded.pop()

    return run


def _fields(kind) -> set[str]:
    if hasattr(kind, "model_fields"):
        return set(kind.model_fields) | {n for n, v in vars(kind).items() if isinstance(v, property)}
    return {f.name for f in dataclasses.fields(kind)}


#: Each knob's hops, by the name it has there: request model → QuestionRequest (and its
#: GenerationParams) → Question / the engine's config (its group, then the field).
HOPS = {"max_sources": [(QuestionRequest, "max_sources"), (Question, "max_sources")],
        "max_new_tokens": [(GenerationParams, "max_new_tokens"), (Budget, "max_new_tokens")],
        "temperature": [(GenerationParams, "temperature"), (Sampling, "temperature")],
        "speculation": [(GenerationParams, "speculation"), (GenerationConfig, "speculation"), (Speculation, "mode")]}


@pytest.mark.parametrize("request_model", [AskRequest, ChatCompletionRequest])
def test_each_knob_has_one_name_at_every_hop(request_model):
    for knob, hops in HOPS.items():
        assert knob in _fields(request_model), (request_model.__name__, knob)
        for kind, name in hops:
            assert name in _fields(kind), (kind.__name__, name)
    assert "max_sources" in inspect.signature(Searcher.search).parameters  # the retrieval call


def test_no_knob_travels_through_keyword_arguments():
    for function in (generation.question, CopilotService.question, CopilotService.generation_config):
        kinds = {p.kind for p in inspect.signature(function).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds, function.__qualname__


def _arrived(question, retrieved, config) -> dict:
    return {"max_sources": (question.max_sources, retrieved),
            "max_new_tokens": (config.budget.max_new_tokens,), "temperature": (config.sampling.temperature,),
            "speculation": (config.speculation.mode,)}


def test_ask_knobs_arrive_unchanged(walk):
    question, retrieved, config = walk("/v1/ask", {"question": QUESTION, **SET, "seed": 1})
    assert config == question.config  # the engine decodes the checked question's config
    for knob, values in _arrived(question, retrieved, config).items():
        assert all(v == SET[knob] for v in values), (knob, values)


def test_chat_knobs_arrive_unchanged(walk):
    body = {"model": "opscopilot", "messages": [{"role": "user", "content": QUESTION}], "seed": 1,
            "max_completion_tokens": SET["max_new_tokens"],
            **{k: v for k, v in SET.items() if k != "max_new_tokens"}}
    question, retrieved, config = walk("/v1/chat/completions", body)
    assert ChatCompletionRequest(**body).max_new_tokens == SET["max_new_tokens"]  # OpenAI's name, read once
    assert config == question.config
    for knob, values in _arrived(question, retrieved, config).items():
        assert all(v == SET[knob] for v in values), (knob, values)


def test_unset_knobs_take_the_settings_defaults_once(walk):
    question, retrieved, config = walk("/v1/ask", {"question": QUESTION})
    arrived = _arrived(question, retrieved, config)
    assert arrived["max_sources"] == (5, 5)  # the max_sources setting
    assert arrived["max_new_tokens"] == (40,)  # the max_new_tokens setting
    assert arrived["temperature"] == (Sampling().temperature,) and arrived["speculation"] == (Speculation().mode,)
