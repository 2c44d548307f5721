"""The llama.cpp backend of the target seam, on the embedded Qwen2.5-Coder-0.5B GGUF (the CPU
default's family) and SmolLM2's: its plain greedy equals llama-cpp-python's own
``Llama.generate(temp=0)``, every drafting mode equals that greedy solo and batched, a
verification pass's logits are bitwise those of one-token steps (the build and settings that
make it so: ``scripts/setup.sh``), and bad input is refused with a reason.

Skipped when llama-cpp-python is not installed (``scripts/setup.sh`` builds it)."""

from __future__ import annotations

import pytest
import torch

from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.backends.embedded import QWEN_CODER_05B, SMOLLM2_135M
from decoding.backends.llamacpp import N_BATCH, available
from decoding.core import EngineConfig
from decoding.logits import effective_settings
from evals.exactness import library_greedy, library_prompt_logits, seam_greedy

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not available(), reason="llama-cpp-python is not installed "
                                                   "(scripts/setup.sh builds it)")]

PASSAGES = ["[1] ELOG | MID 2 | Re: dc-pool-07 offline\n- Restarted the pool domain: systemctl restart "
            "dcache@dc-pool-07Domain.service\n- \\s dc-pool-07 pool enable",
            "[2] GGUS 171234 | FNAL transfers fail with SRM_AUTHORIZATION_FAILURE\n- Fix: the vomsdir LSC file "
            "/etc/grid-security/vomsdir/cms/voms-cms-auth.cern.ch.lsc was outdated; replaced it and restarted "
            "the SRM."]
QUESTIONS = ["Which command restarted the dc-pool-07 domain? Quote it in backticks and cite the source.",
             "How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?",
             "What was done about dc-pool-07? Answer in one sentence."]


@pytest.fixture(scope="module")
def qwen(qwen_gguf_cache):
    from decoding.backends.models import LoadOptions, load_target

    torch.set_num_threads(2)
    return load_target(QWEN_CODER_05B.name, LoadOptions(backend="llama.cpp", cache_dir=qwen_gguf_cache, n_seq_max=6))


@pytest.fixture(scope="module")
def qwen_engine(qwen):
    return SpeculativeEngine(qwen, config=EngineConfig(num_speculative_tokens=8))


@pytest.fixture(scope="module")
def references(qwen):
    """The backend's greedy answer (32 tokens, cut after EOS) to each of :data:`QUESTIONS`."""
    eos = set(qwen.eos_token_ids())
    out = []
    for prompt, _ in _prompts(qwen):
        ids = _greedy(qwen, prompt, 32)
        out.append(ids[: next((i + 1 for i, t in enumerate(ids) if t in eos), len(ids))])
    return out


def _prompts(target) -> list[tuple[list[int], list[list[int]]]]:
    contexts = [target.tokenizer(p, add_special_tokens=False)["input_ids"] for p in PASSAGES]
    out = []
    for q in QUESTIONS:
        messages = [{"role": "user", "content": "Sources:\n\n" + "\n\n".join(PASSAGES) + f"\n\nQuestion: {q}"}]
        ids = target.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        out.append((list(ids["input_ids"] if hasattr(ids, "keys") else ids), contexts))
    return out


def _greedy(target, prompt, n):
    settings = effective_settings(GenerationConfig(), target.generation_defaults, target.vocab_size)
    return seam_greedy(target, prompt, n, settings)


def test_loads_the_embedded_gguf_as_a_target(qwen):
    assert qwen.backend == "llama.cpp" and qwen.model_type == "qwen2" and qwen.vocab_size == 151_936
    assert 151645 in qwen.eos_token_ids() and qwen.generation_defaults == {}
    assert qwen.tokenizer.chat_template and qwen.max_positions == 3072 and qwen.packed


def test_the_service_reserves_the_window_its_defaults_use(qwen_gguf_cache):
    """Without max_model_len the KV cells reserved per sequence are the default request's prompt and
    answer budgets (Settings.kv_window), not llama.cpp's 3,072; max_model_len still wins."""
    from copilot.config import Settings
    from decoding.backends.models import LoadOptions, load_target

    settings = Settings(_env_file=None)
    assert settings.kv_window == settings.max_prompt_tokens + settings.max_new_tokens == 2048
    options = LoadOptions(backend="llama.cpp", cache_dir=qwen_gguf_cache, n_seq_max=1, kv_window=1024)
    assert load_target(QWEN_CODER_05B.name, options).max_positions == 1024
    options = LoadOptions(backend="llama.cpp", cache_dir=qwen_gguf_cache, n_seq_max=1, kv_window=1024,
                          max_model_len=1536)
    assert load_target(QWEN_CODER_05B.name, options).max_positions == 1536


def test_the_kv_cache_type_is_a_setting(qwen_gguf_cache, monkeypatch):
    """COPILOT_KV_CACHE_TYPE reaches llama.cpp (f16 instead of the q8_0 default); a type it does not
    know is refused by the settings, with the allowed values."""
    import pydantic

    from copilot.config import Settings
    from decoding.backends.models import LoadOptions, load_target

    monkeypatch.setenv("COPILOT_KV_CACHE_TYPE", "f16")
    settings = Settings(_env_file=None)
    options = LoadOptions(backend="llama.cpp", cache_dir=qwen_gguf_cache, n_seq_max=1, kv_window=512,
                          kv_cache_type=settings.kv_cache_type)
    assert load_target(QWEN_CODER_05B.name, options).kv_cache_type == "f16"
    monkeypatch.setenv("COPILOT_KV_CACHE_TYPE", "q4_0")
    with pytest.raises(pydantic.ValidationError, match="'f16' or 'q8_0'"):
        Settings(_env_file=None)


def test_the_reserved_window_changes_no_logit(qwen_gguf_cache):
    """The service reserves a smaller KV window than llama.cpp's default (Settings.kv_window): a
    prefill and multi-row passes over two sequences give bitwise the same logits at either size."""
    from decoding.backends.models import LoadOptions, load_target

    logits = {}
    for window in (1024, 2048):
        model = load_target(QWEN_CODER_05B.name, LoadOptions(backend="llama.cpp", cache_dir=qwen_gguf_cache,
                                                             n_seq_max=2, kv_window=window))
        ids = model.tokenizer("dc-pool-07 went read-only after a disk failure. " * 40,
                              add_special_tokens=False)["input_ids"][:700]
        a, b = model.new_cache(800), model.new_cache(800)
        out = [model.prefill(ids, a), model.prefill(ids[:300], b)]
        out += model.forward([([11, 12, 13, 14], a), ([7, 8], b)])
        logits[window] = out
        model.close()
    assert all(torch.equal(x, y) for x, y in zip(logits[1024], logits[2048]))


def test_its_plain_greedy_is_llama_cpps_own(qwen, references):
    for (prompt, _), want in zip(_prompts(qwen), references):
        assert library_greedy(qwen, prompt, 32) == want


def test_a_verification_pass_is_bitwise_the_one_token_steps(qwen):
    """Batch invariance: the logits of a k-token pass (one request, and two requests packed)
    equal, bit for bit, those of k one-token steps (llama.cpp without llamafile's sgemm, or
    with it gated to 8+ rows, and with the several-row K-quant kernel of 2-7 rows in groups of 4, 3 and 2:
    scripts/build_llama_cpp.sh; weights not repacked, one KV stream per sequence)."""
    (prompt, _), (other, _) = _prompts(qwen)[:2]
    answer = _greedy(qwen, prompt, 12)
    solo, mate = qwen.new_cache(0), qwen.new_cache(0)
    try:
        steps = [qwen.prefill(prompt, solo)]
        steps += [qwen.forward([([t], solo)])[0][0] for t in answer[:11]]
        for k in (2, 3, 4, 5, 6, 7, 8, 11):
            qwen.rollback(solo, len(prompt))
            assert torch.equal(qwen.forward([(answer[:k], solo)])[0], torch.stack(steps[1:k + 1])), k
        qwen.rollback(solo, len(prompt))
        qwen.prefill(other, mate)
        packed = qwen.forward([(answer[:5], solo), ([answer[0]], mate)])
        assert torch.equal(packed[0], torch.stack(steps[1:6]))
    finally:
        qwen.release(solo)
        qwen.release(mate)


def test_the_build_carries_the_several_row_kquant_kernel():
    """``scripts/build_llama_cpp.sh`` patches ggml's CPU backend with
    ``scripts/patches/llama-cpp-kquant-columns.patch``; where llama.cpp's kernels use AVX2 the
    several-row kernels are in its library (a build that lost the patch fails here, not only in speed)."""
    import ctypes
    from pathlib import Path

    import llama_cpp

    from decoding.backends.cpu import cpu_report

    if "AVX2" not in cpu_report().llama_cpp:
        pytest.skip("the several-row kernels are x86 AVX2 code")
    lib = ctypes.CDLL(str(next((Path(llama_cpp.__file__).parent / "lib").glob("libggml-cpu.so*"))))
    assert hasattr(lib, "ggml_vec_dot_q4_K_q8_K_cols") and hasattr(lib, "ggml_vec_dot_q6_K_q8_K_cols")


def test_flash_attention_is_the_builds_rowwise_kernel_and_bitwise_past_512_cells(qwen):
    """``scripts/patches/llama-cpp-flash-attn-rows.patch`` attends every query row alone over fixed tiles,
    so with flash attention on a verification pass is bitwise the one-token steps also past 512 KV cells,
    where stock llama.cpp splits a lone row's cells across threads (and sums them differently)."""
    from decoding.backends.cpu import cpu_report
    from decoding.backends.llamacpp import ROWWISE_FLASH_ATTN

    assert ROWWISE_FLASH_ATTN in cpu_report().llama_cpp and qwen.flash_attn and qwen.kv_cache_type == "q8_0"
    prompt = _prompts(qwen)[0][0]
    prompt = prompt[:-8] * (700 // len(prompt) + 1) + prompt[-8:]  # over 512 cells, ending as the template does
    answer = _greedy(qwen, prompt, 8)
    solo, mate = qwen.new_cache(0), qwen.new_cache(0)
    try:
        steps = [qwen.prefill(prompt, solo)]
        steps += [qwen.forward([([t], solo)])[0][0] for t in answer[:7]]
        for k in (2, 4, 7):
            qwen.rollback(solo, len(prompt))
            assert torch.equal(qwen.forward([(answer[:k], solo)])[0], torch.stack(steps[1:k + 1])), k
        qwen.rollback(solo, len(prompt))
        qwen.prefill(prompt[:300], mate)
        packed = qwen.forward([(answer[:3], solo), (answer[:2], mate)])
        assert torch.equal(packed[0], torch.stack(steps[1:4]))
    finally:
        qwen.release(solo)
        qwen.release(mate)


def test_an_f16_kv_cache_is_bitwise_too(qwen, qwen_gguf_cache):
    """The row-wise kernel reads f16 keys and values as well (the default without the q8_0 cache): its
    verification passes past 512 cells are bitwise the one-token steps, and it reads the same greedy answer."""
    from decoding.backends.llamacpp import LlamaCppModel, LlamaCppOptions, embedded_gguf
    from evals.flash_attn_ab import measure, passes_are_bitwise

    prompt = _prompts(qwen)[0][0]
    prompt = prompt[:-8] * (700 // len(prompt) + 1) + prompt[-8:]
    f16 = LlamaCppModel(embedded_gguf(QWEN_CODER_05B, qwen_gguf_cache), qwen.tokenizer, "qwen-0.5b",
                        LlamaCppOptions(window=len(prompt) + 16, n_seq_max=1, kv_cache_type="f16"))
    try:
        assert f16.flash_attn and f16.kv_cache_type == "f16"
        got = measure(f16, prompt)
        assert passes_are_bitwise(f16, prompt, got["tokens"], got["rows"])
    finally:
        f16.close()


def test_the_flash_attention_benchmark_times_a_prompt_and_checks_its_passes(qwen):
    """``evals.flash_attn_ab``'s pieces on the 0.5B: a prefill and its greedy steps, then the passes' check."""
    from evals.flash_attn_ab import STEPS, measure, passes_are_bitwise

    prompt = _prompts(qwen)[0][0]
    got = measure(qwen, prompt)
    assert got["tokens_per_s"] > 0 and got["step_ms"] > 0 and len(got["tokens"]) == STEPS == len(got["rows"]) - 1
    assert passes_are_bitwise(qwen, prompt, got["tokens"], got["rows"])
    assert not passes_are_bitwise(qwen, prompt, got["tokens"][::-1], got["rows"])


def test_flash_attention_needs_the_rowwise_kernel(monkeypatch):
    """Without the build's row-wise kernel flash attention is off by default, and refused when asked for."""
    import decoding.backends.llamacpp as llamacpp

    stock = tuple(f for f in llamacpp.system_features() if f != llamacpp.ROWWISE_FLASH_ATTN)
    monkeypatch.setattr(llamacpp, "system_features", lambda: stock)
    _flash_attn = llamacpp._flash_attn
    assert _flash_attn(None) is False and _flash_attn(False) is False
    with pytest.raises(ValueError, match="row-wise flash attention"):
        _flash_attn(True)


def test_a_q8_0_kv_cache_needs_flash_attention():
    """The KV cache is q8_0 by default with flash attention, else f16; q8_0 without it, or a type that is not
    one of KV_CACHE_TYPES, is refused with the reason."""
    from decoding.backends.llamacpp import _kv_cache_type

    assert _kv_cache_type(None, True) == "q8_0" and _kv_cache_type(None, False) == "f16"
    assert _kv_cache_type("f16", True) == "f16"
    with pytest.raises(ValueError, match="needs flash attention"):
        _kv_cache_type("q8_0", False)
    with pytest.raises(ValueError, match="must be one of f16, q8_0, got 'q4_0'"):
        _kv_cache_type("q4_0", True)


def test_the_kv_cache_takes_memory_only_once_its_cells_are_used(qwen, qwen_gguf_cache):
    """``scripts/build_llama_cpp.sh`` patches ggml with ``scripts/patches/llama-cpp-lazy-zero-buffers.patch``:
    a context reserving 8 sequences × 2,048 cells (192 MiB of KV for the 0.5B) adds far less than that
    to the resident set until they are written, and it decodes the same greedy tokens as the fixture's context.
    With flash attention values are stored a cell per row: a short prompt in each of the 8 sequences makes
    its cells resident, not the sequences' whole value streams (12 MiB each, 96 MiB, stored transposed)."""
    import os
    import sys

    from decoding.backends.llamacpp import LlamaCppModel, LlamaCppOptions, embedded_gguf
    from evals.serve_memory import memory

    if not sys.platform.startswith("linux"):
        pytest.skip("the pages are handed back with Linux's madvise")
    before = memory(os.getpid())["RssAnon_mib"]
    big = LlamaCppModel(embedded_gguf(QWEN_CODER_05B, qwen_gguf_cache), qwen.tokenizer, "qwen-0.5b",
                        LlamaCppOptions(window=2048, n_seq_max=8))
    try:
        grown_mib = memory(os.getpid())["RssAnon_mib"] - before
        assert grown_mib < 192 / 2, f"creating the context made {grown_mib:.0f} MiB resident"
        prompt = _prompts(qwen)[0][0]
        assert _greedy(big, prompt, 8) == _greedy(qwen, prompt, 8)
        sequences = [big.new_cache(0) for _ in range(8)]
        for cache in sequences:
            big.prefill(prompt[:64], cache)
        grown_mib = memory(os.getpid())["RssAnon_mib"] - before
        assert grown_mib < 96 / 2, f"8 prompts of 64 tokens made {grown_mib:.0f} MiB resident"
    finally:
        big.close()


@pytest.mark.parametrize("mode", ["off", "ngram", "auto"])
def test_every_mode_equals_the_backends_greedy_solo_and_batched(qwen_engine, references, mode):
    cases = _prompts(qwen_engine.target)
    config = GenerationConfig(budget=Budget(max_new_tokens=32), speculation=Speculation(drafting=mode))
    cut = references
    assert [qwen_engine.generate(p, config, c).token_ids for p, c in cases] == cut
    batch, got, index = qwen_engine.batch(), {}, {}
    for i, (p, c) in enumerate(cases):  # each joins while the others decode
        state, events = batch.add(p, config, c)
        index[id(state)] = i
        for state, event in batch.step():
            if event.result is not None:
                got[index[id(state)]] = event.result.token_ids
    while batch.active:
        for state, event in batch.step():
            if event.result is not None:
                got[index[id(state)]] = event.result.token_ids
    assert [got[i] for i in range(len(cases))] == cut


def test_a_newcomer_is_prefilled_a_chunk_per_round_while_the_admitted_stream_decodes(qwen_engine, references):
    """Chunked prefill: the admitted request gets a block every round while the newcomer's
    prompt goes in chunk by chunk; both answers are still the backend's greedy."""
    (first, first_ctx), (second, second_ctx) = _prompts(qwen_engine.target)[:2]
    chunks = len(qwen_engine.target.chunk_ends(len(second)))
    assert chunks >= 2
    config = GenerationConfig(budget=Budget(max_new_tokens=32))
    qwen_engine.core.prefix_cache.clear()  # both prefill their whole prompts
    batch = qwen_engine.batch()
    a, events = batch.add(first, config, first_ctx)
    out = {id(a): [t for e in events for t in e.token_ids]}
    b, events = batch.add(second, config, second_ctx)
    assert events == [] and b.prefilling
    out[id(b)], rounds_to_first = [], 0
    while batch.active:
        step = batch.step()
        if b.prefilling or not out[id(b)]:
            rounds_to_first += 1
            assert a.done or any(s is a and e.token_ids for s, e in step)  # the stream was not stalled
        for s, e in step:
            out[id(s)] += e.token_ids
    assert rounds_to_first <= chunks  # a chunk a round while the stream decodes; the rest at once after
    assert rounds_to_first == chunks or a.done
    assert [out[id(a)], out[id(b)]] == references[:2]


def test_a_fixed_gamma_copies_long_spans_and_stays_exact(qwen_engine, references):
    prompt, contexts = _prompts(qwen_engine.target)[0]
    want = references[0]
    result = qwen_engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=32),
                                                           speculation=Speculation(drafting="ngram", mode="fixed",
                                                                                   num_speculative_tokens=8)), contexts)
    assert result.token_ids == want[:len(result.token_ids)] and result.stats.target_passes < len(result.token_ids)


def test_sequences_are_pooled_and_bad_passes_are_refused(qwen):
    caches = []
    with pytest.raises(RuntimeError, match="every KV sequence is in use"):
        for _ in range(7):
            caches.append(qwen.new_cache(0))
    for c in caches:
        qwen.release(c)
    cache = qwen.new_cache(0)
    try:
        with pytest.raises(ValueError, match="1..512 tokens"):
            qwen.forward([([1] * (N_BATCH + 1), cache)])
        with pytest.raises(ValueError, match="1..512 tokens"):
            qwen.forward([([], cache)])
    finally:
        qwen.release(cache)


@pytest.mark.parametrize("chunk, run", [(0, 128), (64, 32), (64, 1024), (4, 128), (100, 512)])
def test_a_prefill_chunk_or_run_out_of_range_is_refused(qwen, qwen_gguf_cache, chunk, run):
    from decoding.backends.llamacpp import LlamaCppModel, LlamaCppOptions, embedded_gguf

    with pytest.raises(ValueError, match="8 <= prefill_chunk <= prefill_run <= 512 tokens, with prefill_chunk a "
                                         "divisor of 512"):
        LlamaCppModel(embedded_gguf(QWEN_CODER_05B, qwen_gguf_cache), qwen.tokenizer, "qwen-0.5b",
                      LlamaCppOptions(prefill_chunk=chunk, prefill_run=run))


@pytest.mark.parametrize("length", [5 * 64 + 9, 5 * 64 + 3, N_BATCH + 3])
def test_a_prompt_is_prefilled_on_llama_generates_rows_in_one_call_or_chunk_by_chunk(qwen, length):
    """One call (chunks merged into runs of up to PREFILL_RUN tokens) and a call per chunk of
    ``chunk_ends`` give bitwise the logits of llama.cpp's own ``Llama.eval`` at its default batch; a
    tail of 3 tokens runs with the chunk before it (5 x 64 + 3) or alone where it starts llama.cpp's
    second batch (512 + 3). Prefilled alone after 320 it would differ by up to 0.39 in a logit."""
    prompt = (_prompts(qwen)[1][0] * 8)[:length]
    ends = qwen.chunk_ends(length)
    assert ends[-2:] == {329: [320, 329], 323: [256, 323], 515: [512, 515]}[length]
    whole, by_chunk = qwen.new_cache(length + 1), qwen.new_cache(length + 1)
    try:
        at_once = qwen.prefill(prompt, whole)
        for start, end in zip([0, *ends], ends):
            last = qwen.prefill(prompt[start:end], by_chunk)
        assert torch.equal(at_once, last) and torch.equal(at_once, library_prompt_logits(qwen, prompt))
        nxt = [int(at_once.argmax())]
        assert torch.equal(qwen.forward([(nxt, whole)])[0], qwen.forward([(nxt, by_chunk)])[0])
    finally:
        qwen.release(whole)
        qwen.release(by_chunk)


def test_the_backend_is_chosen_by_the_model_and_device(tmp_path):
    from decoding.backends.models import resolve_backend

    assert resolve_backend("auto", SMOLLM2_135M.name, "cpu") == "llama.cpp"
    assert resolve_backend("auto", SMOLLM2_135M.name, "cuda") == "torch"
    assert resolve_backend("auto", str(tmp_path), "cpu") == "torch"  # a Hugging Face folder
    assert resolve_backend("auto", "/models/x.gguf", "cpu") == "llama.cpp"
    with pytest.raises(ValueError, match="runs a GGUF"):
        resolve_backend("llama.cpp", str(tmp_path), "cpu")
    with pytest.raises(ValueError, match="unknown backend"):
        resolve_backend("onnx", SMOLLM2_135M.name, "cpu")


def test_a_missing_gguf_is_a_load_error(tmp_path):
    from decoding.backends.embedded import ModelLoadError
    from decoding.backends.models import LoadOptions, load_target

    with pytest.raises(ModelLoadError, match="no GGUF file"):
        load_target(str(tmp_path / "absent.gguf"), LoadOptions(backend="llama.cpp", cache_dir=tmp_path))


def test_derived_drafts_need_a_torch_target(qwen):
    from decoding.build import draft_model_plan, load_draft

    with pytest.raises(ValueError, match="derived from a torch target"):
        load_draft("derived:int8", qwen, target_model=qwen.name, device="cpu", dtype="auto", cache_dir=".")
    assert load_draft("auto", qwen, target_model=qwen.name, device="cpu", dtype="auto", cache_dir=".") is None
    assert "none on the llama.cpp backend" in draft_model_plan("auto", qwen.name, "cpu", "llama.cpp")


def test_the_openai_client_gets_answers_from_the_llamacpp_target(qwen_engine, sample_service, tmp_path):
    """The product path on this backend: a real uvicorn, the ``openai`` client, a streamed and a
    plain answer to the same question, both the engine's exact greedy answer."""
    import openai
    from answering import ask

    from copilot.api.app import create_app
    from copilot.api.server import ServerThread
    from copilot.config import Settings
    from copilot.service import CopilotService

    settings = Settings(data_dir=tmp_path, max_new_tokens=24, max_sources=2, _env_file=None)
    service = CopilotService(settings, sample_service.store, qwen_engine)
    question = "What was the resolution of OPS-107?"
    want = ask(service, question, max_new_tokens=24)
    with ServerThread(create_app(settings, service)) as srv, \
            openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120) as client:
        messages = [{"role": "user", "content": question}]
        plain = client.chat.completions.create(model="opscopilot", messages=messages, max_tokens=24, temperature=0)
        chunks = client.chat.completions.create(model="opscopilot", messages=messages, max_tokens=24, temperature=0,
                                                stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert plain.model_extra["sources"][0]["doc_id"].endswith("#OPS-107")
    assert want.text and want.text in plain.choices[0].message.content and want.text in streamed
    assert plain.model_extra["stats"]["backend"] == "llama.cpp"


@pytest.mark.usefixtures("clean_copilot_env")
def test_copilot_config_says_which_backend_runs_the_target_and_its_draft_plan():
    import json

    from typer.testing import CliRunner

    from copilot.cli.main import app

    env = {"COPILOT_TARGET_MODEL": QWEN_CODER_05B.name, "COPILOT_DEVICE": "cpu"}
    shown = json.loads(CliRunner().invoke(app, ["config"], env={**env, "COPILOT_BACKEND": "auto"}).output)
    assert shown["backend_plan"] == "llama.cpp" and "none on the llama.cpp backend" in shown["draft_model_plan"]
    shown = json.loads(CliRunner().invoke(app, ["config"], env={**env, "COPILOT_BACKEND": "torch"}).output)
    assert shown["backend_plan"] == "torch"
    cpu = shown["cpu"]  # what the kernels use here, beside what the CPU advertises
    assert set(cpu) == {"model", "advertised", "llama_cpp"} and "AVX2" in cpu["llama_cpp"]


def test_a_cpu_that_advertises_amx_llama_cpp_does_not_use_is_said_so():
    from decoding.backends.cpu import CpuReport

    vm = CpuReport("Intel Xeon", ("amx_tile", "avx512f"), ("AVX2", "AVX512"))
    assert vm.amx_advertised_not_used and "advertises AMX" in vm.summary()
    assert "without repacking" in vm.summary()
    assert not CpuReport("AMD EPYC", ("avx2",), ("AVX2",)).amx_advertised_not_used


def test_an_abandoned_stream_or_batch_gives_its_sequence_back(qwen_engine, references):
    import gc

    target = qwen_engine.target
    prompt, contexts = _prompts(target)[0]
    free = len(target._free_ids)
    for _ in range(8):  # more than the pool holds: each abandoned request's slot comes back
        stream = qwen_engine.stream(prompt, GenerationConfig(budget=Budget(max_new_tokens=8)), contexts)
        next(stream)
        stream.close()
        batch = qwen_engine.batch()
        batch.add(prompt, GenerationConfig(budget=Budget(max_new_tokens=8)), contexts)
        del batch
        gc.collect()
    assert len(target._free_ids) == free
    config = GenerationConfig(budget=Budget(max_new_tokens=32))
    assert qwen_engine.generate(prompt, config, contexts).token_ids == references[0]


def test_a_pass_past_the_window_is_refused(qwen):
    cache = qwen.new_cache(0)
    try:
        qwen.prefill([1] * 10, cache)
        cache.length = qwen.max_positions - 1  # as if the window were nearly full
        with pytest.raises(ValueError, match="the window is 3072"):
            qwen.forward([([1, 2], cache)])
    finally:
        qwen.release(cache)


def test_a_corrupt_gguf_is_a_load_error_and_tokenizers_are_cached_per_file(tmp_path, qwen_gguf_cache):
    from decoding.backends.embedded import ModelLoadError
    from decoding.backends.llamacpp import embedded_gguf, gguf_tokenizer
    from decoding.backends.models import LoadOptions, load_target

    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGUFxxxx")
    with pytest.raises(ModelLoadError, match="cannot read the tokenizer"):
        load_target(str(bad), LoadOptions(backend="llama.cpp", cache_dir=tmp_path))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "model.gguf").symlink_to(embedded_gguf(SMOLLM2_135M, tmp_path))
    (tmp_path / "b" / "model.gguf").symlink_to(embedded_gguf(QWEN_CODER_05B, qwen_gguf_cache))
    small = gguf_tokenizer(tmp_path / "a" / "model.gguf", tmp_path / "cache")
    qwen = gguf_tokenizer(tmp_path / "b" / "model.gguf", tmp_path / "cache")  # same name, another file
    assert len(small.get_vocab()) != len(qwen.get_vocab())


def test_a_backend_setting_outside_the_list_and_a_foreign_cache_are_refused(qwen):
    from pydantic import ValidationError

    from copilot.config import Settings
    from decoding.kv.cache import PreallocatedCache

    with pytest.raises(ValidationError, match="backend"):
        Settings(_env_file=None, backend="onnx")
    with pytest.raises(TypeError, match="llama.cpp target runs on its own caches"):
        qwen.forward([([1], PreallocatedCache(4))])


def test_a_prompt_sharing_whole_prefill_chunks_reuses_them_and_stays_exact(qwen_engine, references):
    """Exact prefix reuse: after a prompt that shares the first chunks of the next one, the next
    one copies those chunks' KV (``llama_memory_seq_cp``) and prefills only the rest; asked again,
    it prefills nothing. Both answers are the backend's greedy, solo and as a batch newcomer."""
    target, cache = qwen_engine.target, qwen_engine.core.prefix_cache
    prompt, contexts = _prompts(target)[1]
    half = prompt[:len(prompt) // 2]
    config = GenerationConfig(budget=Budget(max_new_tokens=32))
    cache.clear()
    qwen_engine.generate(half, GenerationConfig(budget=Budget(max_new_tokens=2)))
    shared = qwen_engine.generate(prompt, config, contexts)
    assert shared.stats.prefix_reused_tokens == max(e for e in target.chunk_ends(len(prompt)) if e <= len(half)) > 0
    assert shared.token_ids == references[1]
    again = qwen_engine.generate(prompt, config, contexts)
    assert again.stats.prefix_reused_tokens == len(prompt) and again.token_ids == references[1]
    batch = qwen_engine.batch()
    first, _ = batch.add(_prompts(target)[0][0], config, contexts)
    newcomer, events = batch.add(prompt, config, contexts)  # nothing to prefill: its first token at once
    assert events and events[0].token_ids == references[1][:1]
    out = {id(first): [], id(newcomer): list(events[0].token_ids)}
    while batch.active:
        for s, e in batch.step():
            out[id(s)] += e.token_ids
    assert out[id(newcomer)] == references[1]


def test_parked_prompts_give_their_sequences_to_new_requests(qwen, qwen_engine, references):
    """Parked KV caches hold sequence slots only while nobody else needs them: a request that
    finds the pool empty evicts the least recently used one, or takes the one it reuses."""
    engine = SpeculativeEngine(qwen, config=EngineConfig(num_speculative_tokens=8, prefix_cache_entries=6),
                               costs=qwen_engine.core.costs)
    prompts = _prompts(qwen)
    config = GenerationConfig(budget=Budget(max_new_tokens=4))
    for prompt, contexts in prompts:
        engine.generate(prompt, config, contexts)
    held = [qwen.new_cache(0) for _ in range(len(qwen._free_ids))]  # every free slot taken
    try:
        assert len(engine.core.prefix_cache.entries) == len(prompts)
        batch = engine.batch()
        batch.add(prompts[2][0], config, prompts[2][1])
        _, _ = batch.add(prompts[1][0], config, prompts[1][1])  # no free slot: evicts, then copies
        got = []
        while batch.active:
            got += [e.result.token_ids for _, e in batch.step() if e.result is not None]
        assert sorted(got) == sorted(r[:4] for r in references[1:])
    finally:
        for c in held:
            qwen.release(c)
        engine.core.prefix_cache.clear()


def test_prefix_reuse_stays_within_a_history_partition(qwen_engine):
    prompt, contexts = _prompts(qwen_engine.target)[0]
    qwen_engine.core.prefix_cache.clear()
    config = GenerationConfig(budget=Budget(max_new_tokens=2), speculation=Speculation(history_partition="team-a"))
    qwen_engine.generate(prompt, config, contexts)
    other_config = GenerationConfig(budget=Budget(max_new_tokens=2),
                                    speculation=Speculation(history_partition="team-b"))
    other = qwen_engine.generate(prompt, other_config, contexts)
    same = qwen_engine.generate(prompt, config, contexts)
    assert other.stats.prefix_reused_tokens == 0 and same.stats.prefix_reused_tokens == len(prompt)
