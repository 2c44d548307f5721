"""The ``copilot`` command line: ingest, ask, serve, documents, config, eval.

``python -m ingestion`` runs :func:`ingest` itself (one ingest command, one set of settings).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.console import Console

from copilot.cli.common import console, err, load_service_or_exit, load_settings, open_store_or_exit
from copilot.cli.help import HelpTyper
from copilot.cli.models import models_app
from copilot.cli.option_groups import option, option_group
from ingestion.errors import StoreError
from ingestion.report import EXIT_CODES_HELP, EXIT_STORE, EXIT_USAGE

if TYPE_CHECKING:  # imported where used: `copilot --help` must not import torch (decoding/, the settings)
    from collections.abc import Sequence

    from pydantic import BaseModel

    from copilot.answer.assembly import Answer
    from copilot.config import Settings
    from copilot.search.filters import Filters
    from copilot.search.sources import Source
    from copilot.service import CopilotService

class _CopilotApp(HelpTyper):
    """The root command: a store that cannot be opened (unusable data dir, unreachable server)
    ends any command with one line on stderr and exit status 4, never a traceback."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except StoreError as exc:
            err.print(f"store unusable: {exc}", highlight=False, markup=False, soft_wrap=True)
            raise SystemExit(EXIT_STORE) from None


app = _CopilotApp(help="OpsCopilot: answers over operations logbooks and tickets, with citations.",
                  epilog=EXIT_CODES_HELP + " Other commands: 0 success, 1 failure (e.g. no such document), "
                  "2 bad usage or configuration, 4 the store is unusable (e.g. a read-only or missing data dir; "
                  "every command that opens it, serve included).",
                  no_args_is_help=True, pretty_exceptions_show_locals=False)
documents_app = HelpTyper(help="List, delete or compact stored documents, or rebuild the dense index.",
                          no_args_is_help=True)
app.add_typer(documents_app, name="documents")
app.add_typer(models_app, name="models")


def _add_eval_commands() -> None:
    """``copilot eval exactness|latency|retrieval`` (the evals package, when installed)."""
    try:
        from evals.cli import eval_app
    except ImportError:  # an install without the evals package
        return
    app.add_typer(eval_app, name="eval")


_add_eval_commands()

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_handler(terminal: Console) -> logging.Handler:
    """Where the commands' log lines go. On a terminal: rich's handler on ``terminal``, the console
    the ingest progress bar is drawn on, so that a line logged while the bar is live prints above
    it instead of into it. Elsewhere (a file, a pipe, CI): plain ``LOG_FORMAT`` lines on stderr."""
    if terminal.is_terminal:
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(console=terminal, show_path=False, markup=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        return handler
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    return handler


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="debug logging")) -> None:
    import rich

    rich.reconfigure(stderr=True)  # rich's process console (the ingest bar's) on stderr: stdout is the output
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[log_handler(rich.get_console())])


@app.command(epilog=EXIT_CODES_HELP)
def ingest(paths: list[Path] = typer.Argument(..., help="files or folders to ingest"),
           prune: bool = typer.Option(False, help="delete documents whose source file is gone"),
           report: Optional[Path] = typer.Option(None, help="write the per-file report as JSON here (also when "
                                                 "the run cannot happen: 'error' says why)"),
           watch: bool = typer.Option(False, "--watch", help="after the first ingest, follow the paths and ingest "
                                      "what changes until Ctrl-C or SIGTERM (one JSON line per cycle)"),
           poll: bool = typer.Option(False, "--poll", help="with --watch: poll instead of file system notifications "
                                     "(network filesystems)"),
           debounce: float = typer.Option(1.0, min=0.1, max=60, metavar="SECONDS", help="with --watch: the quiet "
                                          "time before changes are ingested")) -> None:
    """Ingest logbooks and ticket exports (idempotent: unchanged documents are skipped).

    Prints the outcome (succeeded, partial or failed) and the files per status as JSON. A bad record
    fails alone, listed in the report with its line or index.

    Named pipes, sockets and devices are skipped, never opened. `python -m ingestion` runs this same command.
    SIGINT or SIGTERM stops it with exit 130 or 143 and the report written: what was written stays
    stored, the report lists what was not; re-run to resume.

    With --watch it then follows the paths and re-ingests what changes, printing one JSON line per
    cycle (--report is rewritten each cycle); deleted files' documents go only with --prune; a path
    that disappears is a warning, followed again when it is back. Ctrl-C or SIGTERM between cycles
    exits 0, during one 130 or 143.
    """
    from ingestion.ingest_command import run_ingest

    settings = load_settings()
    missing = [str(p) for p in paths if not os.path.lexists(p)]
    if missing:
        err.print(f"[red]no such file or folder: {', '.join(missing)}[/red]", highlight=False)
        raise typer.Exit(EXIT_USAGE)
    if watch:
        from ingestion.ingest_command import run_watch
        from ingestion.watch import WatchOptions

        options = WatchOptions(prune=prune, poll=poll, debounce_s=debounce, progress=None)
        raise typer.Exit(run_watch(list(paths), settings, options, report_file=report,
                                   on_cycle=lambda cycle: typer.echo(json.dumps(cycle.to_dict()))))
    outcome = run_ingest(list(paths), settings, prune=prune, report_file=report)
    if outcome.report.error:
        where = f" (report: {report})" if report else ""
        err.print(f"copilot ingest: {outcome.report.error}{where}", highlight=False, markup=False, soft_wrap=True)
    else:
        data = outcome.report.to_dict()
        console.print_json(json.dumps({"outcome": data["outcome"], **data["counts"],
                                        "failed_records": data["failed_records"]}))
    raise typer.Exit(outcome.exit_code)


_max_sources_opt = typer.Option(None, min=1, max=100, help="source documents to retrieve (default: the "
                                "max_sources setting, else the prompt style's)")


def _filters(doc_type: Optional[list[str]], source: Optional[str], key: Optional[str], since: Optional[str],
             until: Optional[str]) -> Filters:
    """The ``--doc-type/--source/--key/--since/--until`` filters; a bad one exits with status 2."""
    from pydantic import ValidationError

    from copilot.search.filters import Filters

    try:
        return Filters.model_validate({"doc_types": doc_type or [], "source": source, "ticket_key": key,
                                       "since": since, "until": until})
    except ValidationError as exc:
        from copilot.api.errors import validation_message

        err.print(f"invalid filter: {validation_message(list(exc.errors()))}", highlight=False, markup=False)
        raise typer.Exit(2) from exc


#: ``--doc-type/--source/--key/--since/--until``: a command takes them as one ``filters: Filters``.
with_filters = option_group("filters", [
    option("doc_type", Optional[list[str]], typer.Option(None, "--doc-type", help="only these document types "
                                                         "(repeat)")),
    option("source", Optional[str], typer.Option(None, help="only this source path, as stored")),
    option("key", Optional[str], typer.Option(None, help="only this ticket key / ELOG MID")),
    option("since", Optional[str], typer.Option(None, help="created at or after (ISO 8601 date or time)")),
    option("until", Optional[str], typer.Option(None, help="created at or before (ISO 8601 date or time)")),
], _filters)


def _print_json(model: BaseModel) -> None:
    """``model`` (a response model of the API) as indented JSON on stdout, never wrapped."""
    typer.echo(model.model_dump_json(indent=2))


def _answering_service(settings: Settings) -> CopilotService:
    """The service for one answer. With ``draft_model = "auto"`` on a CPU a server builds
    ``derived:int4`` on a background thread; a one-shot command does not start it: it would
    attach after this answer, compete with it for the cores, and still be running torch code
    when the interpreter exits, which aborts it ("terminate called without an active
    exception", exit 134). An explicit ``derived:int4`` is built before the answer, as asked."""
    from decoding.drafters.derived import AUTO_DRAFT

    return load_service_or_exit(settings, auto_draft=settings.draft_model != AUTO_DRAFT)


def _question_problem(question: str, max_new_tokens: int | None, settings: Settings) -> str | None:
    """What the service would refuse about the question and budget, said before any model loads."""
    if not question.strip():
        return "the question is empty"
    if len(question.strip()) > settings.max_question_chars:
        return f"the question has {len(question.strip())} characters; the limit is {settings.max_question_chars}"
    if max_new_tokens is not None and max_new_tokens > settings.max_new_tokens_cap:
        return f"--max-new-tokens {max_new_tokens} exceeds the configured cap {settings.max_new_tokens_cap}"
    return None


@app.command()
@with_filters
def ask(question: str = typer.Argument(..., help="the question"),
        max_sources: Optional[int] = _max_sources_opt,
        max_new_tokens: Optional[int] = typer.Option(None, min=0, help="answer budget in tokens (at most the "
                                                     "max_new_tokens_cap setting)"),
        show_stats: bool = typer.Option(False, "--stats", help="print decoding statistics"),
        as_json: bool = typer.Option(False, "--json", help="print the answer, sources, quotes and stats as one "
                                     "JSON object (the body POST /v1/ask returns) instead of streaming text"),
        *, filters: Filters) -> None:
    """Answer a question, streaming to the terminal, then list the sources (with --json: one JSON
    object once the answer is complete)."""
    from copilot.answer.assembly import AnswerAssembler
    from copilot.answer.prompting import PromptTooLongError
    from copilot.answer.question import GenerationParams, QuestionRequest
    from copilot.api.schemas.ask import AskResponse

    settings = load_settings()
    problem = _question_problem(question, max_new_tokens, settings)
    if problem:  # before minutes of model loading
        err.print(problem, highlight=False, markup=False)
        raise typer.Exit(2)
    service = _answering_service(settings)
    try:
        asked = QuestionRequest(question, max_sources=max_sources, flt=filters.to_search_filter(),
                                generation=GenerationParams(max_new_tokens=max_new_tokens))
        prepared = service.prepare(service.question(asked))
    except (ValueError, PromptTooLongError) as exc:
        err.print(f"[red]{exc}[/red]", highlight=False)
        raise typer.Exit(2) from exc
    assembler = AnswerAssembler(prepared)
    for event in service.stream(prepared):
        delta = assembler.add(event)
        if not as_json:
            console.print(delta, end="", soft_wrap=True, highlight=False, markup=False)
    if not prepared.prompt.turn_sources:
        err.print("no sources: the store is empty or nothing matched")
    answer = assembler.answer()
    if as_json:
        _print_json(AskResponse.from_answer(answer))
        return
    console.print()
    _print_answer_sources(answer, show_stats)


def _print_answer_sources(answer: Answer, show_stats: bool) -> None:
    """After the streamed text: the literals found in no source, each source with its evidence
    lines, and (``--stats``) the decoding statistics."""
    unverified = list(dict.fromkeys(u.literal for u in answer.unverified))
    if unverified:
        console.print("Not in the sources — check before running: " + ", ".join(f"`{x}`" for x in unverified),
                      highlight=False, markup=False, soft_wrap=True)
    _print_sources(answer.sources)
    if show_stats:
        console.print_json(json.dumps(answer.stats))


def _print_sources(sources: Sequence[Source]) -> None:
    """``[n] doc_id  title`` and the evidence lines under it, per source."""
    for src in sources:
        title = src.metadata.get("title") or ""
        console.print(f"[{src.n}] {src.doc_id}  {title}", highlight=False, markup=False, soft_wrap=True)
        for line in src.highlights:
            console.print(f"      > {line}", highlight=False, markup=False, soft_wrap=True)


@app.command()
@with_filters
def search(question: str = typer.Argument(..., help="what to look for (a question or keywords)"),
           max_sources: Optional[int] = _max_sources_opt,
           as_json: bool = typer.Option(False, "--json", help="print the sources as one JSON object (the body "
                                        "POST /v1/search returns)"),
           *, filters: Filters) -> None:
    """Retrieval only (no language model): the best documents for a question, with the lines
    that best answer it."""
    import time

    from copilot.api.schemas.search import SearchResponse
    from copilot.api.schemas.sources import SourceOut
    from copilot.service import CopilotService

    if not question.strip():
        err.print("[red]the question is empty[/red]")
        raise typer.Exit(2)
    settings = load_settings()
    service = CopilotService(settings, open_store_or_exit(settings), None)
    t0 = time.perf_counter()
    try:
        sources = service.search(question, max_sources, filters.to_search_filter())
    except ValueError as exc:
        err.print(f"[red]{exc}[/red]", highlight=False)
        raise typer.Exit(2) from exc
    if as_json:
        _print_json(SearchResponse(sources=[SourceOut.from_source(s) for s in sources],
                                   retrieval_ms=round((time.perf_counter() - t0) * 1000, 2)))
    elif not sources:
        err.print("no sources: the store is empty or nothing matched")
    else:
        _print_sources(sources)


def _origins(value: str) -> list[str]:
    """``--allowed-origins``: a JSON list as vLLM takes it (``'["https://ops.example"]'``) or a
    comma-separated list as ``COPILOT_CORS_ORIGINS`` takes it.

    Raises:
        typer.BadParameter: a value that starts like JSON but is not a list of strings.
    """
    if not value.lstrip().startswith("["):
        return [origin.strip() for origin in value.split(",") if origin.strip()]
    try:
        origins = json.loads(value)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not a JSON list: {exc}", param_hint="--allowed-origins") from exc
    if not isinstance(origins, list) or not all(isinstance(o, str) for o in origins):
        raise typer.BadParameter("expected a JSON list of strings", param_hint="--allowed-origins")
    return origins


def _serve_overrides(host: Optional[str], port: Optional[int], api_key: Optional[list[str]],
                     served_model_name: Optional[str], allowed_origins: Optional[str],
                     max_model_len: Optional[int]) -> dict[str, Any]:
    """The settings ``copilot serve``'s flags override (the flags given, under the settings' names).

    Raises:
        typer.BadParameter: a blank ``--api-key``.
    """
    if api_key is not None and not all(k.strip() for k in api_key):
        raise typer.BadParameter("an API key cannot be blank", param_hint="--api-key")
    given = {"host": host, "port": port, "api_keys": api_key, "model_alias": served_model_name,
             "cors_origins": None if allowed_origins is None else _origins(allowed_origins),
             "max_model_len": max_model_len}
    return {name: value for name, value in given.items() if value is not None}


#: The settings ``copilot serve`` takes as flags (vLLM's names): the command takes them as one
#: ``overrides`` dict (:func:`_serve_overrides`).
with_serve_overrides = option_group("overrides", [
    option("host", Optional[str], typer.Option(None, help="bind address (default: COPILOT_HOST, 127.0.0.1)")),
    option("port", Optional[int], typer.Option(None, min=1, max=65535, help="port (default: COPILOT_PORT, 8000)")),
    option("api_key", Optional[list[str]], typer.Option(
        None, metavar="KEY", help="Bearer key clients must send (repeat for several; replaces COPILOT_API_KEYS)")),
    option("served_model_name", Optional[str], typer.Option(
        None, metavar="NAME", help="the model id /v1/models lists and responses carry, besides the target's "
        "(default: COPILOT_MODEL_ALIAS, opscopilot)")),
    option("allowed_origins", Optional[str], typer.Option(
        None, metavar="ORIGINS", help="origins allowed to call the API from a browser: a JSON list as vLLM "
        "takes it ('[\"*\"]') or comma-separated (replaces COPILOT_CORS_ORIGINS)")),
    option("max_model_len", Optional[int], typer.Option(
        None, min=512, help="context window used, prompt + answer in tokens (default: COPILOT_MAX_MODEL_LEN, "
        "else the target's)")),
], _serve_overrides)


def _ingest_if_empty(settings: Settings, folder: Path) -> None:
    """Ingest ``folder`` when the store holds no chunk (another ingest filling it: serve what is there)."""
    from ingestion.errors import StoreLockedError
    from ingestion.pipeline import ingest_paths

    store = open_store_or_exit(settings)
    if store.lexical.count() == 0:
        console.print(f"store is empty: ingesting {folder}")
        try:
            ingest_paths([folder], store)
        except StoreLockedError as exc:
            err.print(f"not ingesting {folder}: {exc}", highlight=False, markup=False, soft_wrap=True)
    store.close()


@app.command("mcp")
def mcp_stdio(api_key: Optional[str] = typer.Option(None, envvar="COPILOT_MCP_API_KEY", help="the API key whose "
                                                     "scope the tools get (needed when keys are configured)")) -> None:
    """Serve the MCP tools (search, ask, get_document) over stdin/stdout, for a client that starts
    the server itself (Claude Desktop, Cursor, VS Code). Over HTTP they are at /mcp of `copilot serve`.

    Logs go to stderr; stdout carries only the protocol. Ends when the client closes stdin.
    """
    import asyncio

    from copilot.api.app import create_app
    from copilot.api.mcp import serve_stdio, stdio_access

    settings = load_settings()
    try:
        access = stdio_access(settings, api_key)
    except ValueError as exc:
        err.print(f"copilot mcp: {exc}", highlight=False, markup=False)
        raise typer.Exit(EXIT_USAGE) from exc
    open_store_or_exit(settings).close()
    service = load_service_or_exit(settings)
    try:
        asyncio.run(serve_stdio(create_app(settings, service), access))
    finally:
        service.models.stop_background()


@app.command()
@with_serve_overrides
def serve(overrides: dict[str, Any],
          root_path: str = typer.Option("", metavar="PATH", help="the path prefix a reverse proxy serves the API "
                                        "under (e.g. /opscopilot): the ASGI root_path, used in /docs"),
          ingest_if_empty: Optional[Path] = typer.Option(
              None, help="ingest this folder first if the store is empty")) -> None:
    """Serve the web API with uvicorn.

    The flags take vLLM's names; each overrides its setting from the environment or the config file.
    """
    from copilot.api.app import create_app
    from copilot.api.server import listen_socket
    from copilot.api.server import serve as serve_app

    settings = load_settings(**overrides)
    if ingest_if_empty is not None:
        _ingest_if_empty(settings, ingest_if_empty)
    else:  # an unusable store or data dir: one line and exit 4 now, not a traceback after the models load
        open_store_or_exit(settings).close()
    try:  # bound before the app starts, so that it names itself by the port it really serves on
        sock = listen_socket(settings.host, settings.port)
    except OSError as exc:
        err.print(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}", highlight=False,
                  markup=False)
        raise typer.Exit(3) from exc
    bound = sock.getsockname()[1]
    example = (f"curl -s {settings.host}:{bound}/v1/ask -H 'content-type: application/json' "
               "-d '{\"question\": \"How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?\"}'")
    service = load_service_or_exit(settings)  # a model that cannot load: one line and exit 2, before uvicorn
    service.warm_up()
    typer.echo(f"OpsCopilot on http://{settings.host}:{bound} (docs: /docs). Try:\n  {example}")  # pasteable
    try:
        code = serve_app(create_app(settings, service), sock, root_path=root_path)
    finally:
        service.models.stop_background()  # a draft build still in torch would abort the exit
    raise typer.Exit(code)


@documents_app.command("list")
def documents_list(offset: int = typer.Option(0, min=0, max=2**63 - 1), limit: int = typer.Option(50, min=1, max=1000),
                   as_json: bool = typer.Option(False, "--json", help="print the page as one JSON object (the body "
                                                "GET /v1/documents returns)")) -> None:
    """List stored documents (paged): doc_id, type, chunks, title; tab-separated."""
    rows, total = open_store_or_exit(load_settings()).manifest.page(offset, limit)
    if as_json:
        from copilot.api.schemas.documents import DocumentOut, DocumentPage

        _print_json(DocumentPage(total=total, offset=offset, limit=limit,
                                 documents=[DocumentOut.from_row(r) for r in rows]))
        return
    for row in rows:
        typer.echo(f"{row['doc_id']}\t{row.get('doc_type') or ''}\t{row.get('n_chunks', '')}\t{row.get('title') or ''}")
    err.print(f"{len(rows)} of {total} documents (offset {offset})")


@documents_app.command("delete")
def documents_delete(doc_id: str = typer.Argument(..., help="document id as listed")) -> None:
    """Delete one document and all its chunks, and their bytes from the store's files (an
    uploaded file it came from is removed too)."""
    from copilot.deletion import delete_document
    from copilot.feedback.ratings import FeedbackTable

    settings = load_settings()
    store = open_store_or_exit(settings)
    if delete_document(store, FeedbackTable(store.db), doc_id, uploads_dir=settings.uploads_dir) is None:
        err.print(f"[red]no document with id {doc_id!r}[/red]")
        raise typer.Exit(1)
    console.print(f"deleted {doc_id}", highlight=False, markup=False)


@documents_app.command("compact")
def documents_compact() -> None:
    """Rewrite the store's files in their most compact form, without any deleted bytes (slow on
    a large store; ingest waits meanwhile): what a delete purges, plus SQLite VACUUM (PostgreSQL
    VACUUM FULL). A Chroma server's own files are its operator's: a warning says so."""
    from ingestion.stores.purge import compact

    for warning in compact(open_store_or_exit(load_settings())):
        err.print(f"warning: {warning}", highlight=False, markup=False)
    console.print("store compacted", highlight=False, markup=False)


@documents_app.command("reindex")
def documents_reindex() -> None:
    """Rebuild the dense index from the chunk texts the store keeps: after the store says the dense
    index is damaged (a disk that filled while it was written, a file cut short or deleted). Resumes
    an interrupted rebuild; search is lexical only, and ingest waits, until it finishes. Run it with
    the server stopped, or ask the server (POST /v1/index/reindex)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from ingestion.reindex import reindex

    store = open_store_or_exit(load_settings())
    columns = (TextColumn("[bold]reindex[/bold]"), BarColumn(), MofNCompleteColumn(), TextColumn("chunks"),
               TimeRemainingColumn())
    with Progress(*columns, console=err, disable=not err.is_terminal) as bar:
        task = bar.add_task("", total=None)
        try:
            report = reindex(store, on_progress=lambda done, total: bar.update(task, completed=done, total=total))
        except StoreError as exc:
            err.print(f"reindex failed: {exc}; run it again to resume", highlight=False, markup=False, soft_wrap=True)
            raise typer.Exit(EXIT_STORE) from exc
        finally:
            store.close()
    console.print(f"dense index rebuilt: {report.chunks} chunks ({report.embedded} embedded"
                  f"{', resumed' if report.resumed else ''}) in {report.seconds:.1f} s", highlight=False, markup=False)


@app.command("config")
def show_config() -> None:
    """Print the effective settings (secrets masked), with the backend the target will run on,
    the draft-model plan and the CPU (its model, the flags it advertises, what llama.cpp uses)."""
    from dataclasses import asdict

    from decoding.backends.cpu import cpu_report
    from decoding.backends.models import resolve_backend
    from decoding.build import draft_model_plan

    settings = load_settings()
    try:
        backend = resolve_backend(settings.backend, settings.target_model, settings.device)
    except ValueError as exc:  # backend llama.cpp asked of a model it cannot run: said here, refused at start
        backend = f"none: {exc}"
    console.print_json(json.dumps({**settings.masked(), "backend_plan": backend, "draft_model_plan": draft_model_plan(
        settings.draft_model, settings.target_model, settings.device, backend), "cpu": asdict(cpu_report())}))
