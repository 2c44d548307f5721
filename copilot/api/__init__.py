"""The HTTP side of the copilot: the FastAPI app, its routes, schemas, errors, limits,
metrics, the batch scheduler and the ingest jobs. The core (:mod:`copilot.service`,
retrieval, prompting, citations) never imports this package."""
