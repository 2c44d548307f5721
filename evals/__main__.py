"""``python -m evals`` runs the eval CLI (also reachable as ``copilot eval``)."""

import logging

from evals.cli import eval_app

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
eval_app()
