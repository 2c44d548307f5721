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


def exactness_markdown(report: dict) -> str:
    """Summary table (identical answers per mode) and the divergence table."""
    n = len(report["cases"])
    lines = ["# Exactness vs plain greedy", "", *_hardware_lines(report.get("hardware", {})), "",
             f"{n} questions, max_new_tokens={report.get('max_new_tokens')}.", "",
             "| mode | identical to greedy |", "|---|---|"]
    lines += [f"| {m} | {report['exact'][m]}/{n} |" for m in report["modes"]]
    lines += ["", "## Divergences", ""]
    if not report["divergences"]:
        lines.append("None.")
    else:
        lines += ["| question | mode | position | reference token | got | top-1/top-2 margin |", "|---|---|---|---|---|---|"]
        lines += [f"| {d['question_id']} | {d['mode']} | {d['position']} | {d['reference_token']} | {d['got_token']} "
                  f"| {d['margin']} |" for d in report["divergences"]]
    return "\n".join(lines) + "\n"


def latency_markdown(report: dict, plots: bool = True) -> str:
    """Per-mode table: speedups, tokens/s, τ, α, TTFT, ITL, exactness, overhead; links to
    the plots (written next to it by :func:`latency_plots`) when ``plots``."""
    lines = ["# Latency vs transformers greedy and the anchors", "", *_hardware_lines(report.get("hardware", {})), "",
             f"{len(report['per_question'])} questions, max_new_tokens={report.get('max_new_tokens')}, "
             f"repeats={report.get('repeats')}, interleaved, medians. Decode speedup = per-token time after the "
             "first token; end to end includes prefill. Our modes also draft from the engine's earlier answers "
             "(`answer_history`): those to the questions timed before, never those to the same question.", "",
             "| mode | decode speedup (median / worst) | e2e speedup (median / worst) | tokens/s | τ | α | TTFT ms "
             "| ITL p50 / p95 ms | identical | overhead % |", "|---|---|---|---|---|---|---|---|---|---|"]
    for m in report["modes"]:
        sp, e2e, itl = report["speedup"][m], report["speedup_e2e"][m], report["itl_ms"][m]
        lines.append(f"| {m} | {sp['median']:.2f}× / {sp['min']:.2f}× | {e2e['median']:.2f}× / {e2e['min']:.2f}× "
                     f"| {report['tokens_per_s'][m]} | {report['tau'][m]} | {report['alpha'][m]} "
                     f"| {report['ttft_ms'][m]} | {itl['p50']} / {itl['p95']} | {report['exact_vs_greedy'][m]} "
                     f"| {report['overhead_pct'][m] if report['overhead_pct'][m] is not None else '-'} |")
    for alias, timed in report.get("aliases", {}).items():
        lines.append(f"| {alias} | = {timed} (the same configuration: no draft model is loaded) |" + " |" * 8)
    lines += ["", *_versus_anchors(report)]
    lines += ["", f"Memory: {report['memory']} (peak RSS is for the whole process: all modes share it)."]
    if plots:
        lines += ["", "![speedup](speedup.png)", "![tau](tau_hist.png)", "![acceptance](acceptance_by_position.png)",
                  "![copied](speedup_vs_copied.png)"]
    return "\n".join(lines) + "\n"


def _versus_anchors(report: dict) -> list[str]:
    """Our default policy against plain greedy and the best prompt-lookup setting, in words."""
    sp = report["speedup"]
    pld = {m: v["median"] for m, v in sp.items() if m.startswith("hf_pld_")}
    if "ours_auto" not in sp or not pld:
        return []
    best = max(pld, key=pld.get)
    ours = sp["ours_auto"]
    return [f"Default policy (ours_auto): median decode speedup {ours['median']:.2f}× vs hf_greedy, "
            f"{ours['median'] / pld[best]:.2f}× vs the best prompt lookup ({best}, {pld[best]:.2f}×); "
            f"worst question {ours['min']:.2f}×."]


def retrieval_markdown(report: dict) -> str:
    lines = ["# Retrieval quality", "", f"{len(report['per_question'])} questions; document-level ranks.", "",
             "| retriever | recall@1 | recall@5 | recall@10 | MRR |", "|---|---|---|---|---|"]
    for m, r in report["recall"].items():
        lines.append(f"| {m} | {r['@1']} | {r['@5']} | {r['@10']} | {report['mrr'][m]} |")
    return "\n".join(lines) + "\n"


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
    ax.set_ylabel("decode speedup vs hf_greedy (×)")
    ax.tick_params(axis="x", rotation=30)
    ax.legend()
    paths.append(_save(fig, out_dir / "speedup.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, sizes in report["block_sizes"].items():
        if sizes and m != "ours_off":
            ax.hist(sizes, bins=range(1, max(sizes) + 2), alpha=0.5, label=m, align="left")
    ax.set_xlabel("tokens committed per target pass")
    ax.set_ylabel("passes")
    ax.legend()
    paths.append(_save(fig, out_dir / "tau_hist.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, acc in report["acceptance_by_position"].items():
        if acc:
            ax.plot(range(1, len(acc) + 1), [a if a is not None else float("nan") for a in acc], marker="o", label=m)
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1.05)
    ax.legend()
    paths.append(_save(fig, out_dir / "acceptance_by_position.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for m in modes:
        if m.startswith("ours_") and m != "ours_off":
            xs = [row["copied_fraction"] for row in report["per_question"]]
            ys = [row["modes"][m]["speedup"] for row in report["per_question"]]
            ax.scatter(xs, ys, label=m, alpha=0.7)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("fraction of the answer copied from the context (4-gram)")
    ax.set_ylabel("decode speedup vs hf_greedy (×)")
    ax.legend()
    paths.append(_save(fig, out_dir / "speedup_vs_copied.png"))
    return paths
