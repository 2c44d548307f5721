"""``python -m ingestion PATH... [--data-dir DIR] [--prune] [--report FILE.json] [--chroma-url URL]``.

Same behaviour as ``copilot ingest``; exit code from :func:`ingestion.pipeline.run_cli_ingest`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from ingestion.pipeline import run_cli_ingest


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, configure logging, run the ingest; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m ingestion", description="Ingest logbooks and tickets.")
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("COPILOT_DATA_DIR", ".opscopilot")))
    parser.add_argument("--prune", action="store_true")
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--chroma-url", default=None)
    parser.add_argument("--collection", default="opscopilot")
    parser.add_argument("--model", default=None, help="embedding model id or path (default: embedded MiniLM)")
    parser.add_argument("--max-chunk-tokens", type=int, default=None)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_cli_ingest(args.paths, args.data_dir, args.prune, args.report, args.chroma_url,
                          collection=args.collection, embedding_model=args.model,
                          max_chunk_tokens=args.max_chunk_tokens, progress=False if args.no_progress else None)


if __name__ == "__main__":
    sys.exit(main())
