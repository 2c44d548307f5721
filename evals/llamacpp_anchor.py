"""llama.cpp's own generation as the anchor users would pick on a CPU (what Ollama runs).

It runs in the llama-cpp-python that ``scripts/build_llama_cpp.sh`` builds (without llamafile's
sgemm, or with it for calls of 8+ rows only: ``OPSCOPILOT_LLAMAFILE=gated``); a stock build, where one
is installed, is timed apart (:mod:`evals.stock_anchor`).

``llamacpp_greedy`` is llama-cpp-python's high-level ``Llama.generate(temp=0)`` on the very
GGUF our llama.cpp backend runs, with its threads and ``Llama()``'s own batch (512 tokens a
``llama_decode``: what its users get). Its tokens are the backend's greedy ones: our prefill puts
every position through the kernels llama.cpp's batches do
(:func:`~decoding.backends.llamacpp.chunk_ends`, with the default prefill chunk and run).
``llamacpp_pld_N`` adds its prompt lookup
(``LlamaPromptLookupDecoding(num_pred_tokens=N)``: drafts from the prompt, verified in one
``llama_decode``; it keeps the logits of every position, the prompt's included, which its
TTFT pays for). Each mode keeps one ``Llama`` (memory-mapped: the weights' pages are
shared with the backend) and is reset before every run, so no KV prefix is reused across runs.

It loads the weights as the backend does (``use_extra_bufts`` off: no repacked layout, which
``Llama()`` does not expose), so that both run the same kernels and ``Llama.generate`` checks
the backend's greedy token for token.
"""

from __future__ import annotations

import atexit
import contextlib
import time
from typing import Any, Iterator

from decoding.backends.llamacpp import LlamaCppModel
from evals.stock_anchor import STOCK_MODE, generate_stock

LLAMACPP_MODES = ("llamacpp_greedy", "llamacpp_pld_2", "llamacpp_pld_10", STOCK_MODE)

_ANCHORS: dict[tuple[str, int | None], Any] = {}


@atexit.register
def _close_all() -> None:
    """Free the anchors before the interpreter tears llama_cpp's module down under them."""
    for llm in _ANCHORS.values():
        llm.close()
    _ANCHORS.clear()


def anchor(target: LlamaCppModel, pld_tokens: int | None, n_ctx: int) -> Any:
    """The ``llama_cpp.Llama`` over ``target``'s GGUF and threads (prompt lookup of ``pld_tokens``
    when given; ``Llama()``'s own batch size), made once per (file, lookup) with a context of at
    least ``n_ctx`` tokens (remade larger when a longer prompt comes)."""
    import llama_cpp
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    key = (str(target.gguf), pld_tokens)
    llm = _ANCHORS.get(key)
    if llm is None or llm.n_ctx() < n_ctx:
        draft = LlamaPromptLookupDecoding(num_pred_tokens=pld_tokens) if pld_tokens else None
        kv_type = getattr(llama_cpp, f"GGML_TYPE_{target.kv_cache_type.upper()}")
        with _model_params(use_extra_bufts=target.options.repack):
            # With a draft model Llama keeps every position's logits, but sizes that buffer by
            # ``logits_all`` alone (0.3.36): it must be asked for, or the first prefill overflows it.
            llm = Llama(str(target.gguf), n_ctx=max(n_ctx, 2048), n_threads=target.options.n_threads,
                        n_threads_batch=target.options.n_threads, flash_attn=target.flash_attn,
                        type_k=kv_type, type_v=kv_type,
                        draft_model=draft, logits_all=draft is not None, verbose=False)
        _ANCHORS[key] = llm
    return llm


@contextlib.contextmanager
def _model_params(**fields: Any) -> Iterator[None]:
    """While ``Llama()`` loads a model, its ``llama_model_default_params()`` come with ``fields`` set."""
    import llama_cpp.llama as high_level

    lib = high_level.llama_cpp
    original = lib.llama_model_default_params

    def patched() -> Any:
        params = original()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    lib.llama_model_default_params = patched
    try:
        yield
    finally:
        lib.llama_model_default_params = original


def pld_tokens(mode: str) -> int | None:
    """``llamacpp_pld_10`` → 10; ``llamacpp_greedy`` → None."""
    return int(mode.rsplit("_", 1)[1]) if mode.startswith("llamacpp_pld_") else None


def generate_timed(target: LlamaCppModel, mode: str, prompt_ids: list[int], budget: int,
                   ) -> tuple[list[int], list[float], int, float]:
    """Run one anchor mode: ``(ids up to EOS or budget, each id's arrival time (perf_counter s),
    target passes after the prefill, start time)``.

    Raises:
        evals.stock_anchor.StockAnchorUnavailable: :data:`~evals.stock_anchor.STOCK_MODE` without a
            stock build that runs here.
    """
    eos = set(target.eos_token_ids())
    if mode == STOCK_MODE:
        return generate_stock(target.gguf, target.options.n_threads, prompt_ids, budget, eos)
    llm = anchor(target, pld_tokens(mode), len(prompt_ids) + budget + 16)
    return timed_greedy(llm, prompt_ids, budget, eos)


def timed_greedy(llm: Any, prompt_ids: list[int], budget: int,
                 eos: set[int]) -> tuple[list[int], list[float], int, float]:
    """``Llama.generate(temp=0)`` of ``llm`` up to a token of ``eos`` or ``budget`` ids: ``(ids, each
    id's arrival time (perf_counter s), target passes after the prefill, start time)``. ``llm`` is
    reset first: ``generate`` would otherwise reuse the KV cache of a previous run's matching prefix
    (the warm-up runs the first question), and its prefill would not be timed."""
    llm.reset()
    passes = 0
    evaluate = llm.eval

    def counted(tokens: Any) -> None:
        nonlocal passes
        passes += 1
        evaluate(tokens)

    llm.eval = counted
    out: list[int] = []
    times: list[float] = []
    try:
        start = time.perf_counter()
        for token in llm.generate(prompt_ids, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
            out.append(int(token))
            times.append(time.perf_counter())
            if token in eos or len(out) >= budget:
                break
    finally:
        del llm.eval
    return out, times, max(passes - 1, 0), start
