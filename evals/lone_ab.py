"""A lone request, before and after a change: the latency eval of two git revisions, interleaved.

    .venv/bin/python -m evals.lone_ab --old ea4598e --cases cases.json --out evals/results/batching/lone-ab

Checks out ``--old`` into a temporary git worktree and runs ``copilot eval latency --cases``
(the same prompts, no store) with the old and the current code in turn — old, new, new, old,
… for ``--rounds`` rounds — each in its own process. Within every run our mode is timed beside
transformers' plain ``generate()`` (``hf_greedy``), which neither revision changes, so each
run's speedup over it is a ratio measured side by side; the report compares those ratios
(decode phase and end to end) and the raw tokens/s. A benchmark: run it alone on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger("evals.lone_ab")
REPO = Path(__file__).resolve().parents[1]


def run_latency(root: Path, cases: Path, modes: str, out: Path, extra: list[str]) -> dict:
    """``copilot eval latency --cases`` with the code under ``root``; its JSON report.

    Raises:
        subprocess.CalledProcessError: the eval failed (its output is logged).
    """
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-c", "from copilot.cli.main import app; app()", "eval", "latency", "--cases", str(cases),
           "--modes", modes, "--json", str(out), *extra]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        log.error("%s failed:\n%s", root, done.stdout[-4000:] + done.stderr[-4000:])
        done.check_returncode()
    return json.loads(out.read_text())


def summary(runs: list[dict], mode: str) -> dict:
    """Medians over runs of the mode's decode/e2e speedup over hf_greedy and its tokens/s."""
    def med(key: str) -> float:
        values = [r[key][mode]["median"] if isinstance(r[key][mode], dict) else r[key][mode] for r in runs]
        return round(statistics.median(values), 3)

    return {"runs": len(runs), "speedup_decode": med("speedup"), "speedup_e2e": med("speedup_e2e"),
            "tokens_per_s": med("tokens_per_s"),
            "speedup_decode_per_run": [r["speedup"][mode]["median"] for r in runs]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=True, help="git revision to compare against (e.g. the last release)")
    parser.add_argument("--cases", type=Path, required=True, help="cases from `copilot eval cases`")
    parser.add_argument("--modes", default="ours_auto", help="modes timed beside hf_greedy")
    parser.add_argument("--rounds", type=int, default=2, help="old/new pairs, alternating which goes first")
    parser.add_argument("--subset", type=int, help="time N questions spread evenly over the cases")
    parser.add_argument("--max-new-tokens", type=int, help="token budget (default: the cases')")
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON and Markdown report")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # the runs write their JSON from another working directory
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {"old": [], "new": []}
    extra = [*(["--subset", str(args.subset)] if args.subset else []),
             *(["--max-new-tokens", str(args.max_new_tokens)] if args.max_new_tokens else [])]
    with tempfile.TemporaryDirectory(prefix="opscopilot-old-") as tmp:
        old_root = Path(tmp) / "old"
        subprocess.run(["git", "worktree", "add", "--detach", str(old_root), args.old], cwd=REPO, check=True,
                       capture_output=True)
        if (REPO / ".opscopilot").exists():  # the converted models, shared (replays read ./.opscopilot/models)
            (old_root / ".opscopilot").symlink_to(REPO / ".opscopilot")
        try:
            for rnd in range(args.rounds):
                order = [("old", old_root), ("new", REPO)] if rnd % 2 == 0 else [("new", REPO), ("old", old_root)]
                for label, root in order:
                    log.info("round %d: %s", rnd + 1, label)
                    results[label].append(run_latency(root, args.cases.resolve(), args.modes,
                                                      args.out / f"latency-{label}-{rnd + 1}.json", extra))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_root)], cwd=REPO, capture_output=True)
    modes = [m for m in args.modes.split(",") if m]
    report = {"old": args.old, "new": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                                                      capture_output=True).stdout.strip(),
              "cases": str(args.cases), "modes": {m: {k: summary(v, m) for k, v in results.items()} for m in modes}}
    lines = [f"# A lone request: {report['old']} (old) vs {report['new']} (new)", "",
             f"Cases: `{args.cases}`; {args.rounds} runs each, interleaved; ratios over transformers `generate()` "
             "measured inside each run (medians over questions, then over runs).", "",
             "| mode | code | decode speedup | end-to-end speedup | tokens/s | decode speedup per run |",
             "|---|---|---|---|---|---|"]
    for m, by in report["modes"].items():
        for label, s in by.items():
            lines.append(f"| {m} | {label} | {s['speedup_decode']} | {s['speedup_e2e']} | {s['tokens_per_s']} "
                         f"| {s['speedup_decode_per_run']} |")
        lines.append(f"| {m} | new ÷ old | {by['new']['speedup_decode'] / by['old']['speedup_decode']:.3f} "
                     f"| {by['new']['speedup_e2e'] / by['old']['speedup_e2e']:.3f} | | |")
    (args.out / "lone-ab.md").write_text("\n".join(lines) + "\n")
    (args.out / "lone-ab.json").write_text(json.dumps(report, indent=2) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
