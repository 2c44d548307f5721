"""``copilot eval exactness|latency|policy|retrieval|answers|loops|cases`` (also ``python -m evals``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from copilot.cli.help import HelpTyper
from evals.questions import DEFAULT_CORPUS, DEFAULT_QUESTIONS, Question, load_questions, quick_subset

eval_app = HelpTyper(help="Exactness, latency and retrieval evals (reports as JSON, Markdown and PNG).",
                     no_args_is_help=True)
console = Console()
log = logging.getLogger(__name__)

QUICK_QUESTIONS = {"exactness": 4, "latency": 3}
QUICK_TOKENS = 48
QUICK_ANSWERS = 10
FULL_TOKENS = {"exactness": 64, "latency": 64}

_questions_opt = typer.Option(DEFAULT_QUESTIONS, "--questions", exists=True, dir_okay=False,
                              help="questions.jsonl file")
_corpus_opt = typer.Option(DEFAULT_CORPUS, "--corpus", help="folder to ingest into a temporary store")
_data_dir_opt = typer.Option(None, "--data-dir", help="reuse this existing store instead of ingesting --corpus")
_json_opt = typer.Option(None, "--json", help="write the JSON report here")
_report_opt = typer.Option(None, "--report", help="write Markdown, JSON (and plots) into this folder")
_loop_span_opt = typer.Option(
    None, "--loop-span", min=0, help="loop stop span in tokens, 0 = off (default: as the service runs it, "
    "COPILOT_LOOP_SPAN when COPILOT_LOOP_STOP is on)")


def _questions(path: Path, hint: str = "--questions") -> list[Question]:
    """The questions in ``path``.

    Raises:
        typer.BadParameter: the file cannot be read, or a line is not a question record (the message
            names the line).
    """
    try:
        return load_questions(path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint=hint) from exc


def _emit(md: str, result: dict, json_out: Optional[Path], report: Optional[Path], name: str) -> None:
    """Print the Markdown summary; write the JSON (``--json``) and ``REPORT/NAME.md`` plus
    ``REPORT/NAME.json`` (``--report``) when asked."""
    from evals.report import write_json

    console.print(md, markup=False, highlight=False, soft_wrap=True)  # tables stay one row per line
    if json_out:
        write_json(result, json_out)
    if report:
        report.mkdir(parents=True, exist_ok=True)
        (report / f"{name}.md").write_text(md)
        write_json(result, report / f"{name}.json")


_cases_opt = typer.Option(None, "--cases", help="replay cases saved by `copilot eval cases` (no store, no "
                          "corpus: torch and transformers alone); --questions/--corpus/--data-dir are ignored")
_subset_opt = typer.Option(None, "--subset", min=1,
                           help="time N questions spread evenly over the set (default: all; --quick: its own few)")
_device_opt = typer.Option("auto", help="with --cases: auto | cpu | cuda | cuda:N (else COPILOT_DEVICE)")
_dtype_opt = typer.Option("auto", help="with --cases: auto | float32 | bfloat16 | float16 (else COPILOT_DTYPE)")


def _batch_sizes(option: str) -> tuple[int, ...]:
    """``"2,4,8"`` → ``(2, 4, 8)``.

    Raises:
        typer.BadParameter: a size that is not an integer ≥ 2.
    """
    try:
        sizes = tuple(int(part) for part in option.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"batch sizes must be integers, got {option!r}", param_hint="--batched") from None
    if any(size < 2 for size in sizes):
        raise typer.BadParameter(f"batch sizes must be >= 2, got {option!r}", param_hint="--batched")
    return sizes


def _loop_span(setup, option: Optional[int]) -> int:
    """``--loop-span`` if given, else the service's: ``loop_span`` when ``loop_stop`` is on, else 0."""
    return option if option is not None else setup.loop_span


def _prepare(kind: str, questions: Path, corpus: Path, data_dir: Optional[Path], quick: bool,
             max_new_tokens: Optional[int], draft_model: Optional[str], cases_file: Optional[Path] = None,
             device: str = "auto", dtype: str = "auto", subset: Optional[int] = None):
    """The eval set-up, its cases and the token budget: built through the store and prompt
    path, or (``cases_file``) replayed from a saved cases file on ``device``/``dtype``."""
    from evals.harness import build_cases, build_setup, load_cases, replay_setup

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if cases_file is not None:
        try:
            meta, cases = load_cases(cases_file)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--cases") from exc
        if quick or subset:
            cases = quick_subset(cases, subset or QUICK_QUESTIONS[kind])
        n_tokens = max_new_tokens or (QUICK_TOKENS if quick else meta.get("max_new_tokens") or FULL_TOKENS[kind])
        return replay_setup(meta, device=device, dtype=dtype, draft_model=draft_model), cases, n_tokens
    qs = _questions(questions)
    if quick or subset:
        qs = quick_subset(qs, subset or QUICK_QUESTIONS[kind])
    n_tokens = max_new_tokens or (QUICK_TOKENS if quick else FULL_TOKENS[kind])
    setup = build_setup(None if data_dir else corpus, data_dir, draft_model=draft_model)
    return setup, build_cases(setup, qs, n_tokens), n_tokens


@eval_app.command("cases")
def cases(out: Path = typer.Option(..., "--out", help="JSON file to write"),
          questions: Path = _questions_opt, corpus: Path = _corpus_opt, data_dir: Optional[Path] = _data_dir_opt,
          max_new_tokens: int = typer.Option(FULL_TOKENS["latency"], min=1, help="token budget recorded for replay"),
          ) -> None:
    """Save every question's prompt and context token ids, as the service builds them, with
    the target model, draft model and loop span: `copilot eval exactness|latency --cases FILE`
    replays them elsewhere (e.g. on a GPU machine) without the store."""
    from evals.harness import build_cases, build_setup, save_cases

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    qs = _questions(questions)
    setup = build_setup(None if data_dir else corpus, data_dir)  # the prompt path needs the tokenizer
    try:
        built = build_cases(setup, qs, max_new_tokens)
        save_cases(built, out, setup, max_new_tokens)
    finally:
        setup.close()
    console.print(f"{len(built)} cases written to {out}")


@eval_app.command("exactness")
def exactness(questions: Path = _questions_opt, corpus: Path = _corpus_opt, data_dir: Optional[Path] = _data_dir_opt,
              quick: bool = typer.Option(
                  False, help=f"{QUICK_QUESTIONS['exactness']} questions, {QUICK_TOKENS} tokens"),
              json_out: Optional[Path] = _json_opt, report: Optional[Path] = _report_opt,
              max_new_tokens: Optional[int] = typer.Option(
                  None, min=1, help=f"default {FULL_TOKENS['exactness']} ({QUICK_TOKENS} quick)"),
              draft_model: Optional[str] = typer.Option(None, help="override COPILOT_DRAFT_MODEL"),
              allow_near_ties: Optional[float] = typer.Option(
                  None, help="pass divergences whose reference top-1/top-2 logit margin is <= this"),
              loop_span: Optional[int] = _loop_span_opt, cases_file: Optional[Path] = _cases_opt,
              subset: Optional[int] = _subset_opt, device: str = _device_opt, dtype: str = _dtype_opt,
              batched: str = typer.Option("", help="also decode every mode in batches of these sizes, e.g. 2,4,8 "
                                                   "(modes MODE@bN, each answer against its solo greedy)"),
              target_url: Optional[str] = typer.Option(
                  None, "--target-url", help="check an external model server instead (COPILOT_TARGET_URL): its greedy "
                  "answers with its speculation switch on against off, where it has one")) -> None:
    """Every decoding mode vs plain greedy generate() cut by the same stops (EOS, budget, loop
    stop), solo, reusing a parked prompt's KV cache, and batched; non-zero exit on a divergence."""
    from evals.exactness import failing_divergences, run_exactness
    from evals.harness import hardware_summary
    from evals.report import exactness_markdown

    if target_url:
        _remote_exactness(target_url, questions, corpus, data_dir, quick, max_new_tokens, subset, json_out, report)
        return

    setup, cases, n_tokens = _prepare("exactness", questions, corpus, data_dir, quick, max_new_tokens, draft_model,
                                      cases_file, device, dtype, subset)
    try:
        span = _loop_span(setup, loop_span)
        result = run_exactness(setup.engine, cases, n_tokens, loop_span=span, batch_sizes=_batch_sizes(batched))
        result.update(hardware=hardware_summary(setup), max_new_tokens=n_tokens)
    finally:
        setup.close()
    _emit(exactness_markdown(result), result, json_out, report, "exactness")
    failing = failing_divergences(result, allow_near_ties)
    if failing:
        console.print(f"[red]{len(failing)} divergence(s) from plain greedy[/red]")
        raise typer.Exit(1)


def _remote_exactness(url: str, questions: Path, corpus: Path, data_dir: Optional[Path], quick: bool,
                      max_new_tokens: Optional[int], subset: Optional[int], json_out: Optional[Path],
                      report: Optional[Path]) -> None:
    """``exactness --target-url``: the cases built through our prompt path, answered by the server."""
    from evals.remote_exactness import remote_exactness_markdown, run_remote_exactness

    os.environ["COPILOT_TARGET_URL"] = url  # the eval's settings are the service's, from COPILOT_*
    setup, cases, n_tokens = _prepare("exactness", questions, corpus, data_dir, quick, max_new_tokens, None,
                                      subset=subset)
    try:
        result = run_remote_exactness(setup.engine, cases, n_tokens)
    finally:
        setup.close()
    _emit(remote_exactness_markdown(result), result, json_out, report, "exactness-remote")
    if result["identical"] < len(result["cases"]):
        console.print(f"[red]{len(result['cases']) - result['identical']} answer(s) differ[/red]")
        raise typer.Exit(1)


@eval_app.command("reuse")
def reuse(questions: Path = _questions_opt, corpus: Path = _corpus_opt, data_dir: Optional[Path] = _data_dir_opt,
          followups: Optional[Path] = typer.Option(
              None, help="two-turn follow-ups (default: followups.jsonl beside --questions, if present)"),
          subset: Optional[int] = _subset_opt, max_new_tokens: int = typer.Option(32, min=1),
          json_out: Optional[Path] = _json_opt, report: Optional[Path] = _report_opt) -> None:
    """Time to first token with exact prefix reuse off and on: a question asked again, and a
    follow-up after its first turn, through the service's own path (A B B A, medians)."""
    from evals.harness import build_setup, hardware_summary
    from evals.prefix_reuse import reuse_markdown, run_reuse

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    followups = followups or questions.with_name("followups.jsonl")
    qs = _questions(questions)
    fus = _questions(followups, "--followups") if followups.is_file() else []
    if subset:
        qs, fus = quick_subset(qs, subset), quick_subset(fus, subset) if fus else []
    setup = build_setup(None if data_dir else corpus, data_dir)
    try:
        result = run_reuse(setup.service, qs, fus, max_new_tokens)
        hardware = hardware_summary(setup)
    finally:
        setup.close()
    _emit(reuse_markdown(result, hardware), {**result, "hardware": hardware}, json_out, report, "reuse")


@eval_app.command("latency")
def latency(questions: Path = _questions_opt, corpus: Path = _corpus_opt, data_dir: Optional[Path] = _data_dir_opt,
            quick: bool = typer.Option(False, help=f"{QUICK_QUESTIONS['latency']} questions, {QUICK_TOKENS} tokens"),
            json_out: Optional[Path] = _json_opt, report: Optional[Path] = _report_opt,
            max_new_tokens: Optional[int] = typer.Option(
                None, min=1, help=f"default {FULL_TOKENS['latency']} ({QUICK_TOKENS} quick)"),
            repeats: int = typer.Option(1, min=1, help="timed runs per question and mode"),
            modes: Optional[str] = typer.Option(
                None, help="comma-separated modes (default: the anchors and our policy; add ours_off, ours_ngram, "
                           "or hf_pld_5_fk / hf_pld_10_fk: prompt lookup with our verification kernels)"),
            draft_model: Optional[str] = typer.Option(None, help="override COPILOT_DRAFT_MODEL"),
            loop_span: Optional[int] = _loop_span_opt, cases_file: Optional[Path] = _cases_opt,
            subset: Optional[int] = _subset_opt, device: str = _device_opt, dtype: str = _dtype_opt) -> None:
    """Speedup, τ, α, TTFT, ITL of our modes vs transformers greedy, prompt lookup and assisted generation
    (every mode with the loop stop)."""
    from evals.harness import hardware_summary
    from evals.latency import DRAFT_MODEL_MODES, HF_MODES, KERNEL_MATCHED_MODES, OUR_MODES, run_latency
    from evals.llamacpp_anchor import LLAMACPP_MODES
    from evals.report import latency_markdown, latency_plots

    mode_list = list(dict.fromkeys(m.strip() for m in modes.split(",") if m.strip())) if modes is not None else None
    if mode_list == []:
        raise typer.BadParameter("no modes given", param_hint="--modes")
    known = (*HF_MODES, *KERNEL_MATCHED_MODES, *LLAMACPP_MODES, *OUR_MODES)  # run_latency checks them by backend
    unknown = [m for m in mode_list or [] if m not in known]
    if unknown:
        raise typer.BadParameter(f"unknown modes {unknown}; known: {', '.join(known)}",
                                 param_hint="--modes")
    needs_draft = [m for m in mode_list or [] if m in DRAFT_MODEL_MODES]
    if needs_draft and not (draft_model if draft_model is not None else _configured_draft(cases_file)):
        raise typer.BadParameter(f"modes {needs_draft} need a draft model: pass --draft-model or set "
                                 "COPILOT_DRAFT_MODEL", param_hint="--modes")
    setup, cases, n_tokens = _prepare("latency", questions, corpus, data_dir, quick, max_new_tokens, draft_model,
                                      cases_file, device, dtype, subset)
    try:
        result = run_latency(setup.engine, cases, n_tokens, repeats, mode_list,
                             loop_span=_loop_span(setup, loop_span))
        result.update(hardware=hardware_summary(setup), max_new_tokens=n_tokens, repeats=repeats)
    finally:
        setup.close()
    _emit(latency_markdown(result, plots=report is not None), result, json_out, report, "latency")
    if report:
        latency_plots(result, report)


@eval_app.command("policy")
def policy(questions: Path = _questions_opt, corpus: Path = _corpus_opt, data_dir: Optional[Path] = _data_dir_opt,
           json_out: Optional[Path] = _json_opt, report: Optional[Path] = _report_opt,
           max_new_tokens: int = typer.Option(FULL_TOKENS["latency"], min=1, help="token budget per answer"),
           repeats: int = typer.Option(2, min=1, help="replays per question"),
           loop_span: Optional[int] = _loop_span_opt, cases_file: Optional[Path] = _cases_opt,
           subset: Optional[int] = _subset_opt) -> None:
    """The drafting policy's share of the hindsight bound, replayed offline over the target's recorded
    greedy answers (one real decode a question, then seconds a replay), beside a table calibrated in
    hindsight on the same answers."""
    from evals.harness import hardware_summary
    from evals.policy_replay import record, replay_policy
    from evals.report import policy_markdown

    setup, cases, n_tokens = _prepare("latency", questions, corpus, data_dir, False, max_new_tokens, None,
                                      cases_file, subset=subset)
    try:
        span = _loop_span(setup, loop_span)
        engine = setup.engine
        answers = record(engine, cases, n_tokens, span)
        try:
            result = replay_policy(engine.target, answers, engine.core.costs, n_tokens, span, engine.core.config,
                                   repeats)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--questions") from exc
        result.update(hardware=hardware_summary(setup), max_new_tokens=n_tokens, repeats=repeats,
                      verify_ms=[round(c, 2) for c in engine.core.costs.verify_ms])
    finally:
        setup.close()
    _emit(policy_markdown(result), result, json_out, report, "policy")


def _configured_draft(cases_file: Optional[Path]) -> Optional[str]:
    """The draft model the eval would load: the cases file's, else COPILOT_DRAFT_MODEL's."""
    if cases_file is not None:
        from evals.harness import load_cases

        return load_cases(cases_file)[0].get("draft_model")
    from copilot.config import Settings

    return Settings().draft_model


@eval_app.command("load")
def load(questions: Path = _questions_opt, corpus: Path = _corpus_opt, data_dir: Optional[Path] = _data_dir_opt,
         url: Optional[str] = typer.Option(None, help="a running server (default: start `copilot serve` here)"),
         api_key: str = typer.Option("", envvar="COPILOT_LOAD_API_KEY", help="Bearer key for --url"),
         levels: str = typer.Option("1,2,4,8", help="concurrent clients per level, comma-separated"),
         modes: str = typer.Option(",".join(("adaptive", "off", "fixed", "table")), help="speculation modes"),
         n_questions: int = typer.Option(8, "--n-questions", min=1, help="questions per cell (each asked once)"),
         max_new_tokens: int = typer.Option(32, min=1), max_sources: int = typer.Option(3, min=1),
         fixed_gamma: int = typer.Option(4, min=1, max=16, help="γ of the fixed mode"),
         repeats: int = typer.Option(1, min=1, help="runs per cell (modes reversed on every second)"),
         overload_clients: int = typer.Option(16, min=1), overload_s: float = typer.Option(
             60.0, min=0, help="overload phase length (s; 0 = none)"),
         retry_wait_cap_s: float = typer.Option(600.0, min=1, help="overload: longest Retry-After a refused "
                                                 "client waits before its retry (s)"),
         burst: int = typer.Option(100, min=0, help="questions sent at one instant at the end (0 = none)"),
         newcomers: int = typer.Option(4, min=0, help="newcomers phase: questions arriving while 4 others "
                                                          "stream 96-token answers (0 = no such phase)"),
         max_batch: int = typer.Option(8, min=1, help="COPILOT_MAX_BATCH of a self-started server"),
         queue_size: int = typer.Option(4, min=1, help="COPILOT_QUEUE_SIZE of a self-started server"),
         json_out: Optional[Path] = _json_opt, report: Optional[Path] = _report_opt) -> None:
    """The server under 1, 2, 4 and 8 concurrent clients in every speculation mode, then an
    overload phase: throughput, latency, τ/γ per request, exactness, 503s and heartbeats."""
    import asyncio
    import tempfile

    from evals.load import LoadArgs, load_markdown, load_plot, questions_from, run_load, start_server

    try:
        level_list = tuple(sorted({int(v) for v in levels.split(",") if v.strip()}))
    except ValueError:
        raise typer.BadParameter(f"levels must be integers, got {levels!r}", param_hint="--levels") from None
    mode_list = tuple(m.strip() for m in modes.split(",") if m.strip())
    unknown = [m for m in mode_list if m not in ("adaptive", "off", "fixed", "table")]
    if unknown or not mode_list or not level_list or min(level_list) < 1:
        raise typer.BadParameter(f"levels ≥ 1 and modes among adaptive, off, fixed, table; got {levels!r}, "
                                 f"{modes!r}", param_hint="--levels/--modes")
    args = LoadArgs(level_list, mode_list, n_questions, max_new_tokens, max_sources, fixed_gamma, repeats,
                    overload_clients, overload_s, burst, newcomers=newcomers, max_batch=max_batch,
                    queue_size=queue_size, api_key=api_key, retry_wait_cap_s=retry_wait_cap_s)
    qs = questions_from(questions, n_questions)
    out_dir = report or Path(tempfile.mkdtemp(prefix="opscopilot-load-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = None if (url or data_dir) else tempfile.TemporaryDirectory(prefix="opscopilot-load-store-")
    server = None if url else start_server(args, out_dir, corpus, data_dir or Path(tmp.name))
    try:
        result = asyncio.run(run_load(url or server.url, qs, args, server.proc.pid if server else None))
    finally:
        if server is not None:
            server.stop()
        if tmp is not None:
            tmp.cleanup()
    import platform

    result["hardware"] = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "corpus": str(corpus),
                          "questions": str(questions)}
    _emit(load_markdown(result), result, json_out, report, "load")
    if report:
        load_plot(result, report / "load.png")


@eval_app.command("retrieval")
def retrieval(questions: Path = _questions_opt, corpus: Path = _corpus_opt, data_dir: Optional[Path] = _data_dir_opt,
              json_out: Optional[Path] = _json_opt, report: Optional[Path] = _report_opt) -> None:
    """recall@1/5/10 and MRR of the expected source for dense, BM25 and hybrid retrieval, and
    where a copy question's span stands among the evidence lines shown (no model call)."""
    from evals.harness import build_setup
    from evals.report import retrieval_markdown
    from evals.retrieval_eval import run_evidence, run_retrieval

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    setup = build_setup(None if data_dir else corpus, data_dir, load_models=False)
    try:
        qs = _questions(questions)
        result = run_retrieval(setup.service.searcher.retriever, qs)
        result["evidence"] = run_evidence(setup.service, qs)
    finally:
        setup.close()
    _emit(retrieval_markdown(result), result, json_out, report, "retrieval")


@eval_app.command("answers")
def answers(questions: Path = _questions_opt, corpus: Path = _corpus_opt, data_dir: Optional[Path] = _data_dir_opt,
            quick: bool = typer.Option(False, help=f"{QUICK_ANSWERS} questions"),
            json_out: Optional[Path] = _json_opt, report: Optional[Path] = _report_opt,
            max_new_tokens: Optional[int] = typer.Option(None, min=1, help="default: COPILOT_MAX_NEW_TOKENS"),
            prompt_style: Optional[str] = typer.Option(
                None, help="named prompt style(s), comma-separated to compare them (default: the service's)"),
            loop_span: Optional[int] = _loop_span_opt) -> None:
    """What the operator reads, per question: expected document's rank, span in the answer and
    in the evidence lines, loops, citations naming no source, duplicates, finish reason, time."""
    from copilot.answer.prompting import PROMPT_STYLES
    from evals.answers import answers_markdown, compare_markdown, run_answers
    from evals.harness import build_setup, hardware_summary

    styles = [s.strip() for s in prompt_style.split(",") if s.strip()] if prompt_style else [None]
    unknown = [s for s in styles if s is not None and s not in PROMPT_STYLES]
    if unknown or not styles:
        raise typer.BadParameter(f"unknown prompt style(s) {unknown}; known: {', '.join(PROMPT_STYLES)}",
                                 param_hint="--prompt-style")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    qs = _questions(questions)
    if quick:
        qs = quick_subset(qs, QUICK_ANSWERS)
    setup = build_setup(None if data_dir else corpus, data_dir)
    try:
        n_tokens = max_new_tokens or setup.settings.max_new_tokens
        span = _loop_span(setup, loop_span)
        results = [run_answers(setup.service, qs, n_tokens, span, style) for style in styles]
        for r in results:
            r.update(hardware=hardware_summary(setup), questions_file=str(questions))
    finally:
        setup.close()
    if len(results) == 1:
        _emit(answers_markdown(results[0]), results[0], json_out, report, "answers")
    else:
        _emit(compare_markdown(results), {"styles": results}, json_out, report, "answers-styles")


@eval_app.command("loops")
def loops(corpus: Path = _corpus_opt, data_dir: Optional[Path] = _data_dir_opt,
          spans: str = typer.Option("8,12,16,20,24", help="loop-stop spans L to try (tokens), comma-separated"),
          json_out: Optional[Path] = _json_opt, report: Optional[Path] = _report_opt) -> None:
    """False stops of the loop stop: how many stored documents (real text that does not loop)
    it would cut, per span L."""
    from decoding.backends.models import LoadOptions, load_target
    from evals.harness import build_setup
    from evals.loops import loops_markdown, run_loop_false_stops

    try:
        span_list = sorted({int(s) for s in spans.split(",") if s.strip()})
    except ValueError as exc:
        raise typer.BadParameter(f"spans must be integers: {exc}", param_hint="--spans") from exc
    if not span_list or min(span_list) < 1:
        raise typer.BadParameter("give at least one span >= 1", param_hint="--spans")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    setup = build_setup(None if data_dir else corpus, data_dir, load_models=False)
    try:
        load = LoadOptions(backend=setup.settings.backend, device="cpu", cache_dir=setup.settings.model_cache_dir)
        tokenizer = load_target(setup.settings.target_model, load).tokenizer
        result = run_loop_false_stops(setup.service.store, tokenizer, span_list)
    finally:
        setup.close()
    _emit(loops_markdown(result), result, json_out, report, "loops")
