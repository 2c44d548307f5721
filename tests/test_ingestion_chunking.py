"""Chunking in model tokens: ceilings, headers, ids, pathological lines."""

from __future__ import annotations

import random
import string
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import shared_embedder  # noqa: E402

from ingestion.chunking import Chunker, document_header  # noqa: E402
from ingestion.documents import Document  # noqa: E402
from ingestion.loaders import load_bytes  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer():
    return shared_embedder().tokenizer


@pytest.fixture(scope="session")
def chunker(tokenizer):
    return Chunker(tokenizer, shared_embedder().max_seq_length)


def n_tokens(tokenizer, text: str) -> int:
    """Tokens the model would see, special tokens included, no truncation."""
    return len(tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])


def test_model_ceiling_is_256(chunker):
    assert chunker.max_tokens == 256 and chunker.budget == 254


def test_short_document_is_one_chunk_with_header(chunker):
    doc = load_bytes(b'{"id": "OPS-7", "text": "fts restarted", "title": "FTS", "created": "2026-01-02T03:04:05Z"}',
                     "t/x.jsonl").documents[0]
    (chunk,) = chunker.chunk(doc)
    assert chunk.chunk_id == "t/x.jsonl#OPS-7#0" and chunk.doc_id == doc.doc_id
    assert chunk.text.splitlines()[0] == document_header(doc) == "Record t/x.jsonl OPS-7 | FTS | 2026-01-02 03:04"
    assert chunk.metadata["chunk_index"] == 0 and chunk.metadata["n_chunks"] == 1
    assert chunk.metadata["title"] == "FTS" and chunk.metadata["doc_id"] == doc.doc_id


@pytest.mark.parametrize("kind", ["words", "no-spaces", "one-letter"])
def test_60k_character_single_line(chunker, tokenizer, kind):
    rng = random.Random(7)
    if kind == "words":
        words = ["dc-pool-07", "SRM_AUTHORIZATION_FAILURE", "/var/log/dcache/pool.log", "ERROR", "timeout=30s",
                 "Hochdruckstörung", "0x7f3a9c"]
        text = ""
        while len(text) < 60_000:
            text += rng.choice(words) + " "
        text = text[:60_000]
    elif kind == "no-spaces":
        text = "".join(rng.choice(string.ascii_letters + string.digits + "+/") for _ in range(60_000))
    else:  # one WordPiece [UNK] token however long: cut by length (MAX_CHARS_PER_TOKEN)
        text = "x" * 60_000
    assert "\n" not in text and len(text) == 60_000
    doc = Document("big.log#big.log", text, {"source": "big.log", "doc_type": "text", "key": "big.log",
                                              "title": "big.log"})
    chunks = chunker.chunk(doc)
    assert len(chunks) > (10 if kind == "one-letter" else 20)
    header = document_header(doc)
    for i, chunk in enumerate(chunks):
        assert chunk.chunk_id == f"big.log#big.log#{i}"
        assert chunk.text.startswith(header + "\n")
        assert n_tokens(tokenizer, chunk.text) <= 256 and len(chunk.text) <= 256 * 16
    bodies = [c.text[len(header) + 1:] for c in chunks]
    if kind != "words":
        assert "".join(bodies) == text  # cut at token boundaries, nothing lost or duplicated
    else:
        covered = set(" ".join(bodies).split())
        assert covered == set(text.split())


def test_huge_title_header_is_capped(chunker, tokenizer):
    title = "very long subject " * 200
    doc = Document("s#1", "body text " * 400, {"source": "s", "doc_type": "elog", "key": "1", "title": title})
    chunks = chunker.chunk(doc)
    assert all(n_tokens(tokenizer, c.text) <= 256 for c in chunks)
    assert all(c.text.startswith("ELOG s MID 1 | very long subject") for c in chunks)
    assert "body text" in chunks[0].text


def test_smaller_ceiling_and_paragraph_splitting(tokenizer):
    small = Chunker(tokenizer, 64, overlap_tokens=0)
    paragraphs = [f"Paragraph {i}: restarted dcache@pool-{i}Domain.service after OOM." for i in range(12)]
    doc = Document("p#1", "\n\n".join(paragraphs), {"source": "p", "doc_type": "text", "key": "1"})
    chunks = small.chunk(doc)
    assert len(chunks) > 2
    assert all(n_tokens(tokenizer, c.text) <= 64 for c in chunks)
    joined = "\n".join(chunks_text.split("\n", 1)[1] for chunks_text in (c.text for c in chunks))
    for paragraph in paragraphs:
        assert paragraph in joined  # paragraphs short enough are never cut
    assert [c.metadata["chunk_index"] for c in chunks] == list(range(len(chunks)))


def test_empty_body_still_gives_one_chunk(chunker):
    doc = Document("j#OPS-1", "", {"source": "j", "doc_type": "jira", "key": "OPS-1", "title": "t"})
    (chunk,) = chunker.chunk(doc)
    assert chunk.text == "Jira OPS-1 | t"
