"""The ``copilot`` command line (typer): ingest, ask, serve, documents, models, and ``copilot eval``
when the evals are installed."""
