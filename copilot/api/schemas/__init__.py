"""Pydantic models for every request and response of the web API, one module per resource
(mirroring ``copilot/api/routes/``); what they share is in :mod:`.common`, :mod:`.sources` and :mod:`.openai`."""
