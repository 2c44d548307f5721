"""An external model server as the target (``COPILOT_TARGET_URL``, copilot.serving.remote_target), against
real servers started here on 127.0.0.1: our own ``copilot`` app under uvicorn (the embedded
SmolLM2 target), and llama-cpp-python's own OpenAI server on the embedded Qwen2.5-Coder 0.5B
GGUF. The answer path — retrieval, the prompt, citations, quotes, "not found" — is ours either
way; only the decoding runs on the server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from answering import ask as ask_here

from copilot.answer.question import QuestionRequest
from copilot.api.app import create_app
from copilot.api.server import ServerThread, free_port
from copilot.config import Settings
from copilot.service import CopilotService
from copilot.serving.remote_target import RemoteEngine, RemoteTargetError, completion_params, remote_engine
from decoding.config import Budget, GenerationConfig, GenerationSettingError, Sampling
from decoding.logits import LogitsSettings

pytestmark = pytest.mark.slow

QUESTION = "What was the resolution of OPS-107?"
KEY = "sk-remote"


@pytest.fixture(scope="module")
def model_server(sample_service, tmp_path_factory):
    """Our own app serving the embedded target: one kind of OpenAI-compatible model server."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("model-server"), max_new_tokens=48, api_keys=[KEY],
                        _env_file=None)
    service = CopilotService(settings, sample_service.store, sample_service.models.engine)
    with ServerThread(create_app(settings, service)) as srv:
        yield srv


def _remote_service(sample_service, url: str, tmp_path, **settings) -> CopilotService:
    settings = Settings(data_dir=tmp_path, max_new_tokens=48, target_url=url, _env_file=None, **settings)
    engine = RemoteEngine(url, sample_service.models.engine.target.tokenizer, api_key=KEY, max_retries=0, timeout_s=120)
    return CopilotService(settings, sample_service.store, engine)


def test_answers_through_a_model_server_are_the_in_process_answers(sample_service, model_server, tmp_path):
    remote = _remote_service(sample_service, model_server.url + "/v1", tmp_path)
    name = remote.models.engine.target.name
    assert name == "opscopilot" or name  # the server's first model
    assert "model server" in remote.models.draft_status
    here = ask_here(sample_service, QUESTION)
    there = ask_here(remote, QUESTION)
    assert there.text == here.text and there.text
    assert [s.doc_id for s in there.sources] == [s.doc_id for s in here.sources]
    assert [q.literal for q in there.quotes] == [q.literal for q in here.quotes]
    assert there.stats["backend"].startswith("remote") and there.stats["new_tokens"] > 0


def test_the_remote_backed_api_serves_concurrent_clients_and_refuses_what_it_cannot_send(
        sample_service, model_server, tmp_path):
    remote = _remote_service(sample_service, model_server.url + "/v1", tmp_path, max_batch=4)
    with ServerThread(create_app(remote.settings, remote)) as front, \
            openai.OpenAI(base_url=front.url + "/v1", api_key="x", max_retries=0, timeout=120) as client:
        def ask(q: str) -> openai.types.chat.ChatCompletion:
            return client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": q}])

        questions = [QUESTION, "How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?"]
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(ask, questions))
        for q, a in zip(questions, answers, strict=True):
            assert a.choices[0].message.content.startswith(ask_here(sample_service, q).text)
            assert a.model_extra["sources"]
        with pytest.raises(openai.BadRequestError, match="external model server"):
            client.chat.completions.create(model="opscopilot", messages=[{"role": "user", "content": QUESTION}],
                                           extra_body={"top_k": 5})


def test_an_unreachable_or_failing_server_is_a_clear_error(sample_service, model_server, tmp_path):
    closed = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(RemoteTargetError, match="did not list its models"):
        RemoteEngine(closed, sample_service.models.engine.target.tokenizer, max_retries=0, timeout_s=5)
    engine = RemoteEngine(model_server.url + "/v1", sample_service.models.engine.target.tokenizer, model="opscopilot",
                          api_key="wrong-key", max_retries=0)
    with pytest.raises(RemoteTargetError, match="answered 40[13]"):
        list(engine.stream([1, 2, 3], GenerationConfig(budget=Budget(max_new_tokens=2))))
    with pytest.raises(GenerationSettingError, match="repetition_penalty"):
        completion_params(GenerationConfig(), LogitsSettings(repetition_penalty=1.2))
    assert completion_params(GenerationConfig(budget=Budget(max_new_tokens=5, stop_strings=("\n",)),
                                              sampling=Sampling(seed=3)), LogitsSettings()) == {
        "max_tokens": 5, "temperature": 0.0, "top_p": 1.0, "seed": 3, "stop": ["\n"]}


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory, qwen_gguf_cache):
    """llama-cpp-python's own OpenAI server on the embedded Qwen2.5-Coder 0.5B GGUF: ``(its base URL,
    the folder holding the GGUF)``."""
    from decoding.backends.embedded import QWEN_CODER_05B
    from decoding.backends.llamacpp import available, embedded_gguf

    if not available():
        pytest.skip("llama-cpp-python is not installed (scripts/setup.sh builds it)")
    cache = qwen_gguf_cache
    gguf = embedded_gguf(QWEN_CODER_05B, cache)
    port = free_port()
    log = open(tmp_path_factory.mktemp("llama-server") / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", "4096", "--n_threads", "2",
                             "--model_alias", "qwen2.5-coder-0.5b"],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail(f"llama_cpp.server did not start: {open(log.name).read()[-2000:]}")
        yield url, cache
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _llama_parts(url, cache, model, tmp_path, sample_service) -> tuple:
    settings = Settings(data_dir=tmp_path, max_new_tokens=48, target_url=url, target_model=model,
                        model_cache_dir=cache, _env_file=None)
    return settings, sample_service.store, remote_engine(settings)


def test_llama_cpps_own_server_answers_with_our_sources_and_quotes(sample_service, llama_server, tmp_path):
    from decoding.backends.embedded import QWEN_CODER_05B

    url, cache = llama_server
    service = CopilotService(*_llama_parts(url, cache, QWEN_CODER_05B.name, tmp_path, sample_service))
    assert service.models.engine.target.name == "qwen2.5-coder-0.5b" and service.style_name == "quote-lines-3"
    answer = ask_here(service, "How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?")
    assert answer.text and answer.sources and answer.finish_reason in ("eos", "length")
    assert answer.stats["ttft_ms"] > 0 and answer.stats["new_tokens"] > 0


def _cases(service: CopilotService, questions: list[str]) -> list:
    from evals.harness import Case
    from evals.questions import Question

    out = []
    for i, q in enumerate(questions):
        prompt = service.prepare(service.question(QuestionRequest(q))).prompt
        out.append(Case(Question(f"q{i}", q, "", ""), prompt.input_ids, prompt.context_ids))
    return out


def test_the_remote_exactness_eval_uses_the_servers_switch_where_it_has_one(sample_service, model_server, tmp_path,
                                                                           llama_server):
    from evals.remote_exactness import remote_exactness_markdown, run_remote_exactness

    ours = _remote_service(sample_service, model_server.url + "/v1", tmp_path)
    result = run_remote_exactness(ours.models.engine, _cases(ours, [QUESTION]), 16)
    assert result["switch"] and result["compared"] == ["off", "on"] and result["identical"] == 1
    assert "Identical: **1/1**" in remote_exactness_markdown(result)
    url, cache = llama_server
    from decoding.backends.embedded import QWEN_CODER_05B

    llama = CopilotService(*_llama_parts(url, cache, QWEN_CODER_05B.name, tmp_path, sample_service))
    result = run_remote_exactness(llama.models.engine, _cases(llama, [QUESTION]), 8)
    assert not result["switch"] and result["compared"] == ["first", "second"] and result["identical"] == 1
