"""The clients users run, against a real uvicorn on 127.0.0.1 with the real embedded models:
the ``openai`` client (chat, completions, embeddings, responses, models), LangChain's
``ChatOpenAI`` and ``OpenAIEmbeddings``, LlamaIndex's ``OpenAILike`` with its defaults; and the
OpenAI conventions they rely on (error shape, tools accepted, system messages, retrieval off)."""

from __future__ import annotations

import base64
import copy

import httpx
import numpy as np
import openai
import pytest

from copilot.answer.question import GenerationParams, QuestionRequest
from copilot.api.app import create_app
from copilot.api.server import ServerThread
from copilot.config import Settings
from copilot.service import CopilotService
from decoding import SpeculativeEngine

pytestmark = pytest.mark.slow

KEY = "sk-clients"
QUESTION = "What was the resolution of OPS-107?"
EMBEDDING_MODEL = "all-MiniLM-L6-v2"
TOOLS = [{"type": "function", "function": {"name": "web_search", "description": "search the web",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def server(sample_service, tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("clients-data"), max_new_tokens=8, max_sources=2,
                        api_keys=[KEY], _env_file=None)
    service = CopilotService(settings, sample_service.store, sample_service.models.engine)
    with ServerThread(create_app(settings, service)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120) as c:
        yield c


# -- chat ------------------------------------------------------------------------------------------
def test_open_webui_style_tools_are_accepted_and_never_called(client):
    for choice in (None, "auto", "none"):
        extra = {} if choice is None else {"tool_choice": choice}
        r = client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": QUESTION}],
                                           tools=TOOLS, max_tokens=4, **extra)
        assert r.choices[0].message.content and not r.choices[0].message.tool_calls
        assert r.model_extra["sources"][0]["doc_id"].endswith("#OPS-107")
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": QUESTION}],
                                       tools=TOOLS, tool_choice="required")
    assert err.value.param == "tool_choice" and err.value.code == "unsupported_parameter"


def test_system_messages_reach_the_prompt_within_the_budget(client, sample_service):
    messages = [{"role": "user", "content": QUESTION}]
    plain = client.chat.completions.create(model="opscopilot", messages=messages, max_tokens=2)
    system = "Reply with exactly BANANA."
    told = client.chat.completions.create(model="opscopilot", max_tokens=2,
                                          messages=[{"role": "system", "content": system}] + messages)
    assert told.usage.prompt_tokens > plain.usage.prompt_tokens
    asked = QuestionRequest(QUESTION, instructions=system, generation=GenerationParams(max_new_tokens=2))
    prepared = sample_service.prepare(sample_service.question(asked))
    prompt = sample_service.models.engine.target.tokenizer.decode(prepared.prompt.input_ids)
    assert system in prompt and prompt.index(system) < prompt.index("Sources:")
    with pytest.raises(openai.BadRequestError) as err:  # a system message over the budget: refused, not cut
        client.chat.completions.create(model="opscopilot", max_tokens=2,
                                       messages=[{"role": "system", "content": "word " * 3000}] + messages)
    assert err.value.code == "context_length_exceeded" and err.value.param == "messages"


def test_retrieval_off_answers_the_messages_as_sent(client, sample_service):
    """A chain that brings its own context turns retrieval off: no sources, no footer, and the
    prompt is the chat template of the messages alone."""
    stuffed = "Context: the pool dc-pool-07 was restarted with `systemctl restart dcache`.\n\nHow was it restarted?"
    r = client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": stuffed}],
                                       max_tokens=8, extra_body={"use_context": False})
    assert r.model_extra["sources"] == [] and "Sources:" not in r.choices[0].message.content
    tokenizer = sample_service.models.engine.target.tokenizer
    expected = tokenizer.apply_chat_template([{"role": "user", "content": stuffed}], add_generation_prompt=True,
                                             tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected
    assert r.usage.prompt_tokens == len(expected)
    config = sample_service.generation_config(GenerationParams(max_new_tokens=8))
    plain = sample_service.models.engine.generate(list(expected), config).text
    assert r.choices[0].message.content == plain  # exactly greedy decoding of the messages
    # a brought context longer than a question may be (max_question_chars): bounded by tokens only
    long = "Context: " + "dc-pool-07 was restarted. " * 200 + "\n\nWhat was restarted?"
    r = client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": long}],
                                       max_tokens=2, extra_body={"use_context": False})
    assert r.usage.prompt_tokens > 1000
    with pytest.raises(openai.BadRequestError) as err:  # over the context window: OpenAI's 400, naming messages
        client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": long * 20}],
                                       max_tokens=2, extra_body={"use_context": False})
    assert err.value.param == "messages" and err.value.code == "context_length_exceeded"


def test_system_fingerprint_and_context_length(client, sample_service):
    r = client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": QUESTION}],
                                       max_tokens=2)
    assert r.system_fingerprint and r.system_fingerprint.startswith("fp_")
    card = client.models.retrieve("opscopilot")
    window = sample_service.models.engine.target.max_positions
    assert card.id == "opscopilot" and card.model_extra["max_model_len"] == window
    assert client.models.retrieve(sample_service.settings.target_model).id == sample_service.settings.target_model
    assert client.models.retrieve(EMBEDDING_MODEL).model_extra["max_model_len"] == 256  # not listed: not a chat model
    assert [m.id for m in client.models.list()] == ["opscopilot", sample_service.settings.target_model]
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-4o")
    assert err.value.code == "model_not_found"


# -- completions, embeddings, responses -----------------------------------------------------------
def test_completions_are_greedy_decoding_of_the_prompt(client, sample_service):
    prompt = "The dCache pool dc-pool-07 went offline because"
    ids = sample_service.models.engine.target.tokenizer(prompt)["input_ids"]
    config = sample_service.generation_config(GenerationParams(max_new_tokens=8))
    plain = sample_service.models.engine.generate(ids, config).text
    r = client.completions.create(model="opscopilot", prompt=prompt, max_tokens=8)
    assert r.object == "text_completion" and r.choices[0].text == plain and r.usage.prompt_tokens == len(ids)
    assert r.system_fingerprint.startswith("fp_")
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="opscopilot", prompt=prompt, max_tokens=8, stream=True) if c.choices)
    assert streamed == plain
    both = client.completions.create(model="opscopilot", prompt=[prompt, "Hello"], max_tokens=4, echo=True)
    assert [c.index for c in both.choices] == [0, 1] and both.choices[0].text.startswith(prompt)
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="opscopilot", prompt=prompt, max_tokens=4, logprobs=2)
    assert err.value.param == "logprobs"


def test_embeddings_are_the_store_embedders(client, sample_service):
    texts = ["dc-pool-07 lost a disk", "FTS transfers failing to FNAL"]
    expected = sample_service.store.embedder.embed_array(texts)
    as_float = client.embeddings.create(model=EMBEDDING_MODEL, input=texts, encoding_format="float")
    default = client.embeddings.create(model=EMBEDDING_MODEL, input=texts)  # the client asks for base64
    for resp in (as_float, default):
        got = np.array([d.embedding for d in resp.data], dtype=np.float32)
        assert got.shape == expected.shape and np.allclose(got, expected, atol=1e-5)
    assert as_float.usage.prompt_tokens > 0
    raw = httpx.post(f"{client.base_url}embeddings", headers={"Authorization": f"Bearer {KEY}"},
                     json={"model": EMBEDDING_MODEL, "input": texts[0], "encoding_format": "base64"}).json()
    vector = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(vector, expected[0], atol=1e-6)
    for kwargs, param in (({"input": [[1, 2, 3]]}, "input"), ({"input": "x", "dimensions": 7}, "dimensions"),
                          ({"input": "word " * 400}, "input.0")):
        with pytest.raises(openai.BadRequestError) as err:
            client.embeddings.create(model=EMBEDDING_MODEL, **kwargs)
        assert err.value.param == param, kwargs
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="text-embedding-3-small", input="x")


def test_responses_whole_and_streamed(client):
    r = client.responses.create(model="opscopilot", input=QUESTION, max_output_tokens=6, instructions="Be brief.")
    assert r.object == "response" and r.output_text and r.model_extra["sources"][0]["doc_id"].endswith("#OPS-107")
    assert r.usage.output_tokens <= 6 and r.status in ("completed", "incomplete")
    events = list(client.responses.create(model="opscopilot", input=QUESTION, max_output_tokens=6,
                                          instructions="Be brief.", stream=True))
    kinds = [e.type for e in events]
    done = "response.incomplete" if r.status == "incomplete" else "response.completed"  # cut at max_output_tokens
    assert kinds[0] == "response.created" and kinds[-1] == done
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == r.output_text == events[-1].response.output_text
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="opscopilot", input=QUESTION, previous_response_id="resp_1")
    assert err.value.param == "previous_response_id"


# -- LangChain and LlamaIndex ---------------------------------------------------------------------
def test_langchain_chat_and_embeddings(server, sample_service):
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings

    chat = ChatOpenAI(model="opscopilot", base_url=server.url + "/v1", api_key=KEY, max_tokens=6, max_retries=0)
    reply = chat.invoke(QUESTION)
    assert reply.content and "\n\nSources:\n[1] " in reply.content
    assert "".join(c.content for c in chat.stream(QUESTION)) == reply.content
    embeddings = OpenAIEmbeddings(model=EMBEDDING_MODEL, base_url=server.url + "/v1", api_key=KEY,
                                  check_embedding_ctx_length=False)  # its default tokenizes with tiktoken (a download)
    vector = np.array(embeddings.embed_query("dc-pool-07 lost a disk"))
    assert np.allclose(vector, sample_service.store.embedder.embed_array(["dc-pool-07 lost a disk"])[0], atol=1e-5)


def test_llamaindex_openailike_with_its_defaults(server, sample_service):
    from llama_index.llms.openai_like import OpenAILike

    # its defaults call /v1/completions (is_chat_model=False); its default temperature is 0.1
    # (sampled, so not comparable with greedy): 0 asks for the exact greedy text
    llm = OpenAILike(model="opscopilot", api_base=server.url + "/v1", api_key=KEY, max_tokens=8, temperature=0.0)
    prompt = "The dCache pool dc-pool-07 went offline because"
    ids = sample_service.models.engine.target.tokenizer(prompt)["input_ids"]
    config = sample_service.generation_config(GenerationParams(max_new_tokens=8))
    plain = sample_service.models.engine.generate(ids, config).text
    assert llm.complete(prompt).text == plain
    assert "".join(r.delta for r in llm.stream_complete(prompt)) == plain


# -- the OpenAI error conventions -----------------------------------------------------------------
def test_openai_error_shapes(server):
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as c:
        r = c.post("/v1/chat/completions", json={"model": "opscopilot", "messages": [], "max_tokens": "lots"})
        err = r.json()["error"]
        assert r.status_code == 400 and err["type"] == "invalid_request_error" and err["param"] and err["code"]
        r = c.post("/v1/chat/completions", json={"model": "opscopilot", "max_tokens": 10**6,
                                                 "messages": [{"role": "user", "content": QUESTION}]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens", r.text
        assert "max_new_tokens" not in r.json()["error"]["message"]
        r = c.post("/v1/no/such/route", json={})
        assert r.status_code == 404 and r.json()["error"]["message"] == "Invalid URL (POST /v1/no/such/route)"
        r = c.options("/v1/chat/completions", headers={"Origin": "http://x", "Access-Control-Request-Method": "POST"})
        assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"
        r = c.post("/v1/ask", json={"question": "x", "temperature": "hot"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
        assert r.json()["error"]["code"] == "invalid_type" and r.json()["detail"][0]["loc"] == ["body", "temperature"]


def test_max_model_len_caps_the_context_window(sample_service, tmp_path):
    full = sample_service.models.engine
    target = copy.copy(full.target)
    target.max_positions = 1024  # as load_target caps it with LoadOptions(max_model_len=1024)
    settings = Settings(data_dir=tmp_path, max_model_len=1024, max_new_tokens=100, _env_file=None)
    service = CopilotService(settings, sample_service.store, SpeculativeEngine(target, costs=full.core.costs))
    assert service.models.context_length == 1024 < full.target.max_positions
    assert service.question(QuestionRequest(QUESTION)).prompt_budget == 1024 - 100
    with pytest.raises(ValueError, match="greater than or equal to 512"):
        Settings(max_model_len=100, _env_file=None)
