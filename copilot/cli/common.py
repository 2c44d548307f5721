"""What every ``copilot`` command shares: the consoles, the settings (bad ones exit 2) and the
store (an unusable one exits 4)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from ingestion.errors import StoreError
from ingestion.report import EXIT_STORE

if TYPE_CHECKING:  # imported where used: `copilot --help` must not import torch
    from copilot.config import Settings
    from copilot.service import CopilotService
    from ingestion.stores.chunk_store import ChunkStore

console = Console()
err = Console(stderr=True)


def load_settings(**overrides: Any) -> Settings:
    """The effective settings, ``overrides`` (command-line flags) above the environment and the
    config file; a bad config file, variable or flag value exits with status 2 and the reason."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from copilot.config import Settings

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        return Settings(**overrides)
    except (ValidationError, SettingsError, FileNotFoundError, ValueError) as exc:
        err.print(f"[red]invalid configuration: {exc}[/red]", highlight=False)
        raise typer.Exit(2) from exc


def open_store_or_exit(settings: Settings) -> ChunkStore:
    """The store the settings describe; an unusable one (unreachable server, bad URL, another
    embedding model, a data dir that is read-only or not a folder) exits with status 4 and the reason."""
    from ingestion.stores.chunk_store import open_store

    try:
        return open_store(settings)
    except StoreError as exc:
        err.print(f"store unusable: {exc}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(EXIT_STORE) from exc


def load_service_or_exit(settings: Settings, *, auto_draft: bool = True) -> CopilotService:
    """The service with its models loaded; a target or draft model that cannot load (no such
    file or id, a damaged GGUF, a draft of another vocabulary, a backend that cannot run it)
    exits with status 2 and the reason in one line (the traceback is logged at debug level)."""
    import logging

    from copilot.service import CopilotService

    try:
        return CopilotService.from_settings(settings, auto_draft=auto_draft)
    except StoreError as exc:
        err.print(f"store unusable: {exc}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(EXIT_STORE) from exc
    except (OSError, ValueError, RuntimeError) as exc:  # ModelLoadError is a RuntimeError
        logging.getLogger(__name__).debug("model load failed", exc_info=True)
        err.print(f"cannot load the model: {type(exc).__name__}: {exc}", highlight=False, markup=False,
                  soft_wrap=True)
        raise typer.Exit(2) from exc
