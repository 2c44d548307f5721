"""``python -m ingestion PATH... [--prune] [--report FILE.json]``: the ``copilot ingest`` command itself.

There is one ingest command: this entry point runs :func:`copilot.cli.main.ingest` with the same
settings (``COPILOT_*`` variables, ``.env``, ``COPILOT_CONFIG_FILE``), options, output and
exit codes (see ``python -m ingestion --help``). The ingestion package itself never imports
:mod:`copilot`; only this entry point does, when run.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run ``copilot ingest`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    from copilot.cli.main import app

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        app(args=["ingest", *args], prog_name="python -m ingestion")
    except SystemExit as exc:  # click ends every run with sys.exit(code)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
