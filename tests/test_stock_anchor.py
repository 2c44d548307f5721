"""The stock llama-cpp-python anchor of the latency eval (evals/stock_anchor.py): its worker process,
and the reasons it is skipped with."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.stock_anchor import STOCK_SITE_ENV, StockAnchorUnavailable, generate_stock, stock_site

pytest.importorskip("llama_cpp")


def test_without_a_stock_build_the_reason_names_the_setting(monkeypatch, tmp_path):
    monkeypatch.delenv(STOCK_SITE_ENV, raising=False)
    with pytest.raises(StockAnchorUnavailable, match=STOCK_SITE_ENV):
        stock_site()
    monkeypatch.setenv(STOCK_SITE_ENV, str(tmp_path))
    with pytest.raises(StockAnchorUnavailable, match="holds no llama_cpp package"):
        stock_site()


def test_the_worker_gives_what_llama_generate_gives_in_process(monkeypatch, tmp_path, qwen_gguf_cache):
    """The project's own build stands in for a stock one: the worker's greedy ids are those of the
    same ``Llama()`` default load run here, and every id has an arrival time."""
    import llama_cpp
    from llama_cpp import Llama

    from decoding.backends.embedded import QWEN_CODER_05B
    from decoding.backends.llamacpp import embedded_gguf

    site = tmp_path / "site"
    site.mkdir()
    (site / "llama_cpp").symlink_to(Path(llama_cpp.__file__).parent)
    monkeypatch.setenv(STOCK_SITE_ENV, str(site))
    gguf = embedded_gguf(QWEN_CODER_05B, qwen_gguf_cache)
    prompt = [151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198]
    ids, times, passes, start = generate_stock(gguf, 2, prompt, 6, {151645})
    llm = Llama(str(gguf), n_ctx=2048, n_threads=2, n_threads_batch=2, verbose=False)
    want = []
    for token in llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
        want.append(int(token))
        if token == 151645 or len(want) >= 6:
            break
    llm.close()
    assert ids == want
    assert start == 0.0 and len(times) == len(ids) and times == sorted(times) and passes == len(ids) - 1


def test_a_stock_build_that_crashes_is_unavailable_with_the_signal(monkeypatch, tmp_path):
    site = tmp_path / "site"
    (site / "llama_cpp").mkdir(parents=True)
    (site / "llama_cpp" / "__init__.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    monkeypatch.setenv(STOCK_SITE_ENV, str(site))
    with pytest.raises(StockAnchorUnavailable, match=r"crashed \(signal SIGSEGV\)"):
        generate_stock(tmp_path / "any.gguf", 2, [1, 2, 3], 4, {0})


def test_the_latency_eval_times_a_stock_build_or_says_why_not(monkeypatch, tmp_path, qwen_gguf_cache):
    """On a llama.cpp target the stock anchor is left out of the default modes without a build,
    skipped with the reason when asked for, and timed beside the others with one."""
    import llama_cpp

    from decoding import SpeculativeEngine
    from decoding.backends.embedded import QWEN_CODER_05B
    from decoding.backends.models import LoadOptions, load_target
    from evals.harness import Case
    from evals.latency import latency_modes, run_latency
    from evals.questions import Question

    target = load_target(QWEN_CODER_05B.name, LoadOptions(backend="llama.cpp", cache_dir=qwen_gguf_cache, n_seq_max=2))
    engine = SpeculativeEngine(target)
    ids = target.tokenizer("<|im_start|>user\nName the host in: ce02 is down.<|im_end|>\n<|im_start|>assistant\n",
                           add_special_tokens=False)["input_ids"]
    cases = [Case(Question("s1", "", "", ""), list(ids), [])]
    monkeypatch.delenv(STOCK_SITE_ENV, raising=False)
    assert "llamacpp_stock_default" not in latency_modes(engine)
    report = run_latency(engine, cases, max_new_tokens=4, modes=["llamacpp_stock_default", "ours_off"])
    assert STOCK_SITE_ENV in report["skipped"]["llamacpp_stock_default"]
    assert "llamacpp_stock_default" not in report["runs"]
    site = tmp_path / "site"
    site.mkdir()
    (site / "llama_cpp").symlink_to(Path(llama_cpp.__file__).parent)
    monkeypatch.setenv(STOCK_SITE_ENV, str(site))
    assert "llamacpp_stock_default" in latency_modes(engine)
    report = run_latency(engine, cases, max_new_tokens=4, modes=["llamacpp_stock_default", "ours_off"])
    assert report["runs"]["llamacpp_stock_default"] == 1 and "llamacpp_stock_default" not in report["skipped"]
    assert report["exact_vs_greedy"]["llamacpp_stock_default"] in (0, 1)
