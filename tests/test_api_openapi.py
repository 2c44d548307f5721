"""The OpenAPI document describes what the server does: every schema has a description, the
request bodies have examples, streamed responses are documented, and no route claims FastAPI's
422 (invalid requests are 400s, :mod:`copilot.api.errors`)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

STREAMING = ("/v1/ask", "/v1/chat/completions", "/v1/completions", "/v1/responses")
BODIES = ("AskRequest", "SearchRequest", "ChatCompletionRequest", "CompletionRequest", "EmbeddingRequest",
          "ResponseRequest", "FeedbackRequest")


@pytest.fixture
def spec(light_app):
    with TestClient(light_app()) as client:
        return client.get("/openapi.json").json()


def test_every_schema_says_what_it_is(spec):
    schemas = spec["components"]["schemas"]
    assert [name for name, s in schemas.items() if not s.get("description")] == []
    assert [name for name in BODIES if not schemas[name].get("examples")] == []


def test_streams_and_errors_are_documented(spec):
    for path in STREAMING:
        responses = spec["paths"][path]["post"]["responses"]
        assert "text/event-stream" in responses["200"]["content"], path
        assert "400" in responses and "422" not in responses, path
    assert not [path for path, ops in spec["paths"].items() for op in ops.values() if "422" in op["responses"]]
    assert {"/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/models/{model}"} <= set(spec["paths"])
