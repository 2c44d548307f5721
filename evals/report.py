"""Markdown reports and PNG plots (matplotlib, Agg backend) for the evals."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _hardware_lines(hw: dict) -> list[str]:
    return [f"- {k}: `{v}`" for k, v in hw.items() if v is not None]


def write_json(data: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False))


def _loop_stop_words(span: int) -> str:
    return (f"loop stop on, span {span} tokens (an answer ends when its last {span} tokens occurred twice "
            "before, cut before the repeats)" if span else "loop stop off")


def _reference_words(report: dict) -> str:
    """What plain greedy was on the report's backend, with llama.cpp's own check of it."""
    if report.get("backend", "torch") == "torch":
        return "transformers `generate(do_sample=False)`"
    lib = report.get("library_greedy", {})
    return (f"the {report['backend']} backend's own, one token per forward; identical to llama-cpp-python's "
            f"`Llama.generate(temp=0)` on {lib.get('identical', 0)} of {sum(lib.values())} questions")


def exactness_markdown(report: dict) -> str:
    """The contract checked, the summary table (identical and loop-stopped answers per mode),
    the per-question outcomes and the divergence table."""
    n = len(report["cases"])
    span = report.get("loop_span", 0)
    finishes = report.get("reference_finish", {})
    lines = ["# Exactness vs plain greedy", "", *_hardware_lines(report.get("hardware", {})), "",
             "Contract checked: each mode's ids equal plain greedy's (" + _reference_words(report) + ") "
             "cut by the same stops at one commit boundary — EOS, max_new_tokens and the loop stop, the reference "
             "being greedy's ids run through `decoding.stopping.apply_stops` with the same settings — and end with "
             "the same finish reason.", "",
             f"{n} questions, max_new_tokens={report.get('max_new_tokens')}, {_loop_stop_words(span)}. "
             "References end by: " + (", ".join(f"{r} {c}" + (" (loop-cut)" if r == "repetition" else "")
                                                for r, c in sorted(finishes.items())) or "-") + ".", "",
             "| mode | identical to greedy | loop-stopped |", "|---|---|---|"]
    lines += [f"| {m} | {report['exact'][m]}/{n} | {report.get('loop_stopped', {}).get(m, '-')} |"
              for m in report["modes"]]
    reused = [(r["reused_tokens"], c["prompt_tokens"]) for c in report["cases"] for m, r in c["modes"].items()
              if m.endswith("@prefix") and "reused_tokens" in r]
    if reused:
        lines += ["", f"Prefix reuse: `@prefix` decodes a case just after a prompt sharing the first half of its "
                  f"prompt (whole prefill chunks reused: {sum(a for a, _ in reused)} of "
                  f"{sum(b for _, b in reused)} prompt tokens in all); `@again` just after the same prompt "
                  "(nothing prefilled)."]
    lines += ["", "## Per question", "",
              "Reference: finish reason, ids kept (ids greedy generates until the stops end it). Per mode: ✓ "
              "identical, else ✗ and the divergence position.", "",
              "| question | reference | " + " | ".join(report["modes"]) + " |",
              "|---|---|" + "---|" * len(report["modes"])]
    for c in report["cases"]:
        ref = f"{c.get('reference_finish', '-')}, {c['reference_tokens']} ({c.get('reference_generated', '-')})"
        outcomes = [c["modes"].get(m) for m in report["modes"]]
        cells = ["-" if r is None else "✓" if r["exact"] else f"✗ {r.get('divergence_at', '')}".rstrip()
                 for r in outcomes]
        lines.append(f"| {c['id']} | {ref} | " + " | ".join(cells) + " |")
    lines += ["", "## Divergences", ""]
    if not report["divergences"]:
        lines.append("None.")
    else:
        lines += ["Kind `token`: a different id (margin = the reference's top-1/top-2 logit margin there); "
                  "`stop`: the same ids, ended elsewhere or for another reason (a bug, no margin).", "",
                  "| question | mode | kind | position | reference token | got | top-1/top-2 margin "
                  "| finish (reference / got) |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {d['question_id']} | {d['mode']} | {d.get('kind', 'token')} | {d['position']} "
                  f"| {d['reference_token']} | {d['got_token']} | {d['margin']} "
                  f"| {d.get('reference_finish')} / {d.get('got_finish')} |" for d in report["divergences"]]
    return "\n".join(lines) + "\n"


def latency_markdown(report: dict, plots: bool = True) -> str:
    """Per-mode table: speedups, tokens/s, τ, α, TTFT, ITL, exactness, overhead, answers the
    loop stop ended; links to the plots (written next to it by :func:`latency_plots`) when ``plots``."""
    base = report.get("baseline", "hf_greedy")
    lines = [f"# Latency vs {base} and the anchors", "", *_hardware_lines(report.get("hardware", {})), "",
             f"{len(report['per_question'])} questions, max_new_tokens={report.get('max_new_tokens')}, "
             f"repeats={report.get('repeats')}, interleaved, medians. Decode speedup = per-token time after the "
             "first token; end to end includes prefill. Our modes also draft from the engine's earlier answers "
             "(`answer_history`): those to the questions timed before, never those to the same question.", "",
             f"Every mode runs with the {_loop_stop_words(report.get('loop_span', 0))}; transformers' modes get "
             "the same detector as a stopping criterion. Speedups, tokens/s, τ and ITL count the tokens the user "
             "gets (the output cut by the stops); the time and passes spent on cut-away repeats still count. "
             f"`identical`: ids equal {base}'s, both cut by the same stops; `identical` and `loop-stopped` count "
             f"answers (questions × repeats = {_runs(report)} per mode).", "",
             "| mode | decode speedup (median / worst) | e2e speedup (median / worst) | tokens/s | τ | α | TTFT ms "
             "| ITL p50 / p95 ms | identical | overhead % | loop-stopped |", "|---" * 11 + "|"]
    for m in report["modes"]:
        sp, e2e, itl = report["speedup"][m], report["speedup_e2e"][m], report["itl_ms"][m]
        lines.append(f"| {m} | {sp['median']:.2f}× / {sp['min']:.2f}× | {e2e['median']:.2f}× / {e2e['min']:.2f}× "
                     f"| {report['tokens_per_s'][m]} | {report['tau'][m]} | {report['alpha'][m]} "
                     f"| {report['ttft_ms'][m]} | {itl['p50']} / {itl['p95']} | {report['exact_vs_greedy'][m]} "
                     f"| {report['overhead_pct'][m] if report['overhead_pct'][m] is not None else '-'} "
                     f"| {report.get('loop_stopped', {}).get(m, '-')} |")
    for alias, timed in report.get("aliases", {}).items():
        lines.append(f"| {alias} | = {timed} (the same configuration: no draft model is loaded) |" + " |" * 9)
    for mode, why in report.get("skipped", {}).items():
        lines.append(f"| {mode} | skipped: {why} |" + " |" * 9)
    lines += ["", *_ttft_lines(report), *_versus_anchors(report), "", *_oracle_lines(report), "",
              *_token_share_lines(report)]
    lines += ["", f"Memory: {report['memory']} (peak RSS is for the whole process: all modes share it)."]
    if plots:
        lines += ["", "![speedup](speedup.png)", "![tau](tau_hist.png)", "![acceptance](acceptance_by_position.png)",
                  "![copied](speedup_vs_copied.png)"]
    return "\n".join(lines) + "\n"


def _token_share_lines(report: dict) -> list[str]:
    """Per mode, the share of the tokens users get that each producer made: ``target`` (its own
    tokens: the first, corrections, bonus tokens) and each drafter's accepted tokens."""
    shares = report.get("token_share") or {}
    producers = sorted({p for s in shares.values() for p in s}, key=lambda p: (p != "target", p))
    if not producers:
        return []
    lines = ["Who produced the tokens users get (share per mode; anchors: one target token per forward pass, "
             "the rest their drafter's):", "", "| mode | " + " | ".join(producers) + " |",
             "|---" * (len(producers) + 1) + "|"]
    for mode in report["modes"]:
        row = shares.get(mode, {})
        lines.append(f"| {mode} | " + " | ".join(f"{row[p]:.1%}" if p in row else "-" for p in producers) + " |")
    return lines


def _oracle_lines(report: dict) -> list[str]:
    """``ours_auto`` against the hindsight bound of its own n-gram drafter (:mod:`evals.oracle`)."""
    oracle = report.get("oracle")
    if not oracle:
        return []
    lines = [f"Against its own bound: a hindsight schedule (the best γ ≤ {oracle['gamma_max']} each round, knowing "
             "what greedy accepts of the n-gram drafter's proposals, passes priced at the engine's measured costs) "
             f"would reach {oracle['oracle_speedup_median']:.2f}× (median) over one-token steps; ours_auto's "
             f"measured speedup over {oracle['over']} is {oracle['ours_auto_share_median']:.0%} of it (median; "
             f"worst question {oracle['ours_auto_share_min']:.0%}). The schedule it ran, priced like the bound "
             f"(no timing noise: what its choices of γ cost), is {oracle['policy_share_median']:.0%} of it "
             f"(median; worst {oracle['policy_share_min']:.0%}).", "",
             "| question | tokens | oracle speedup | oracle drafts | ours_auto speedup | share | policy share |",
             "|---" * 7 + "|"]
    for r in oracle["per_question"]:
        lines.append(f"| {r['id']} | {r['tokens']} | {r['oracle_speedup']:.2f}× | {r['oracle_drafted']} "
                     f"| {r['ours_auto_speedup']:.2f}× | {r['share']:.0%} | {r['policy_share']:.0%} |")
    states = oracle.get("states") or {}
    if states:
        lines += ["", "The n-gram drafter's acceptance per state at every decode position (replayed, not only where "
                  "the policy drafted):", "", "| state | positions | α₁ | αₙ |", "|---|---|---|---|"]
        for name, v in states.items():
            nxt = "-" if v["alpha_next"] is None else f"{v['alpha_next']:.2f}"
            lines.append(f"| {name} | {v['positions']} | {v['alpha_first']:.2f} | {nxt} |")
    return lines


def _runs(report: dict) -> str:
    runs = set(report.get("runs", {}).values())
    return str(runs.pop()) if len(runs) == 1 else "-"


def _ttft_lines(report: dict) -> list[str]:
    """Each mode's TTFT ÷ the baseline's on the same prompt (paired per question,
    :func:`evals.latency.ttft_ratios`), in one line; none for a report without it."""
    ratio = report.get("ttft_ratio") or {}
    modes = {m: r for m, r in ratio.get("modes", {}).items() if m != ratio.get("over")}
    if not modes:
        return []
    parts = ", ".join(f"{m} {r['median']:.3f} / {r['max']:.3f}" for m, r in modes.items())
    return [f"TTFT ÷ {ratio['over']}'s on the same prompt (per question, median / worst): {parts}.", ""]


def _versus_anchors(report: dict) -> list[str]:
    """Our default policy against plain greedy and the best prompt-lookup setting (transformers'
    own; the kernel-matched ``_fk`` anchors on a line of their own), in words."""
    sp = report["speedup"]
    if "ours_auto" not in sp:
        return []
    ours = sp["ours_auto"]
    lines = []
    for label, suffix in (("the best prompt lookup", ""),
                          ("the best prompt lookup with our verification kernels", "_fk")):
        pld = {m: v["median"] for m, v in sp.items()
               if m.startswith(("hf_pld_", "llamacpp_pld_")) and m.endswith("_fk") == bool(suffix)}
        if not pld:
            continue
        best = max(pld, key=pld.get)
        if not suffix:
            lines.append(f"Default policy (ours_auto): median decode speedup {ours['median']:.2f}× vs "
                         f"{report.get('baseline', 'hf_greedy')}, "
                         f"{ours['median'] / pld[best]:.2f}× vs {label} ({best}, {pld[best]:.2f}×); "
                         f"worst question {ours['min']:.2f}×.")
        else:
            lines.append(f"Against {label} ({best}, {pld[best]:.2f}×): {ours['median'] / pld[best]:.2f}×.")
    return lines


def policy_markdown(report: dict) -> str:
    """The policy replay (:mod:`evals.policy_replay`): per question the hindsight bound and the shares of
    it that the served policy and the hindsight-calibrated table reach, then the medians."""
    pol, cal = report["policy_share"], report["calibrated_share"]
    lines = ["# The drafting policy against its bound, replayed", "", *_hardware_lines(report.get("hardware", {})), "",
             f"{len(report['questions'])} recorded greedy answers (max_new_tokens={report.get('max_new_tokens')}), "
             f"{report.get('repeats')} replays each, passes priced at the calibrated costs "
             f"(ms, 1, 2, … rows: {report.get('verify_ms')}). `policy`: the policy as it serves, its acceptance table "
             "learned as the questions go by; `calibrated`: every drafting state's acceptance measured on these "
             "answers and frozen.", "",
             f"Median share of the bound: policy **{pol['median']:.3f}** (worst {pol['min']:.3f}), calibrated table "
             f"{cal['median']:.3f} (worst {cal['min']:.3f}); the bound's median speedup "
             f"{report['oracle_speedup_median']:.2f}x over one-token steps.", "",
             "| question | tokens | bound | policy share | calibrated share |", "|---|---|---|---|---|"]
    lines += [f"| {q['id']} | {q['tokens']} | {q['oracle_speedup']:.2f}x | {q['policy_share']:.0%} "
              f"| {q['calibrated_share']:.0%} |" for q in report["questions"]]
    return "\n".join(lines) + "\n"


def retrieval_markdown(report: dict) -> str:
    lines = ["# Retrieval quality", "", f"{len(report['per_question'])} questions; document-level ranks.", "",
             "| retriever | recall@1 | recall@5 | recall@10 | MRR |", "|---|---|---|---|---|"]
    for m, r in report["recall"].items():
        lines.append(f"| {m} | {r['@1']} | {r['@5']} | {r['@10']} | {report['mrr'][m]} |")
    evidence = report.get("evidence")
    if evidence:
        n = evidence["copy"]
        lines += ["", f"Evidence lines, {n} copy questions (the service's sources; the span is ...):", "",
                  "| in the first source's first line | in the expected source's first line | in some line shown |",
                  "|---|---|---|",
                  f"| {evidence['first_source_first_line']} / {n} | {evidence['expected_first_line']} / {n} | "
                  f"{evidence['any_line']} / {n} |"]
    return "\n".join(lines) + "\n"


def _legend(ax: plt.Axes) -> None:
    """A legend when something was drawn (a run where no mode drafted has no acceptance curve)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend()


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_plots(report: dict, out_dir: Path) -> list[Path]:
    """speedup.png, tau_hist.png, acceptance_by_position.png, speedup_vs_copied.png."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    modes = report["modes"]

    fig, ax = plt.subplots(figsize=(8, 4))
    med = [report["speedup"][m]["median"] for m in modes]
    worst = [report["speedup"][m]["min"] for m in modes]
    ax.bar(modes, med, color="tab:blue", label="median")
    ax.scatter(modes, worst, color="tab:red", zorder=3, label="worst question")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_ylabel(f"decode speedup vs {report.get('baseline', 'hf_greedy')} (×)")
    ax.tick_params(axis="x", rotation=30)
    _legend(ax)
    paths.append(_save(fig, out_dir / "speedup.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, sizes in report["block_sizes"].items():
        if sizes and m != "ours_off":
            ax.hist(sizes, bins=range(1, max(sizes) + 2), alpha=0.5, label=m, align="left")
    ax.set_xlabel("tokens committed per target pass")
    ax.set_ylabel("passes")
    _legend(ax)
    paths.append(_save(fig, out_dir / "tau_hist.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, acc in report["acceptance_by_position"].items():
        if acc:
            ax.plot(range(1, len(acc) + 1), [a if a is not None else float("nan") for a in acc], marker="o", label=m)
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1.05)
    _legend(ax)
    paths.append(_save(fig, out_dir / "acceptance_by_position.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for m in modes:
        if m.startswith("ours_") and m != "ours_off":
            xs = [row["copied_fraction"] for row in report["per_question"]]
            ys = [row["modes"][m]["speedup"] for row in report["per_question"]]
            ax.scatter(xs, ys, label=m, alpha=0.7)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("fraction of the answer copied from the context (4-gram)")
    ax.set_ylabel(f"decode speedup vs {report.get('baseline', 'hf_greedy')} (×)")
    _legend(ax)
    paths.append(_save(fig, out_dir / "speedup_vs_copied.png"))
    return paths
