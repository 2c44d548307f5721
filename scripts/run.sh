#!/usr/bin/env bash
# The main job: set up, ingest the sample corpus if the store is empty, serve the API on 127.0.0.1:8000.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
exec .venv/bin/copilot serve --host "${COPILOT_HOST:-127.0.0.1}" --port "${COPILOT_PORT:-8000}" --ingest-if-empty evals/data/corpus
