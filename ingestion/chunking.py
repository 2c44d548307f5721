"""Splitting documents into chunks measured in the embedding model's tokens.

Every chunk text is ``header + "\\n" + piece``; the header names the document
(type and key, title, date, status) so a chunk is retrievable and citable on its own.
Limit: ``count(chunk text) + special tokens <= max_tokens`` (the embedding model's
max sequence length is the ceiling), checked on the final text of every chunk.

Splitting uses langchain's ``RecursiveCharacterTextSplitter`` (paragraphs, lines,
sentences, words) with a token-counting length function; a piece that is still too
long (e.g. a 60,000-character line without spaces) is cut at token boundaries using
the tokenizer's character offsets, so no text is lost or re-tokenised.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from langchain_text_splitters import RecursiveCharacterTextSplitter

from ingestion.documents import Chunk, Document, make_chunk_id
from ingestion.loaders.registry import TYPE_LABELS

log = logging.getLogger(__name__)

#: Bump when header or splitting rules change: every document is then re-chunked.
CHUNKER_VERSION = "1"

_SEPARATORS = ["\n\n", "\n", ". ", " "]
#: Characters per token above which a chunk is cut by length too: a run with no whitespace
#: (base64, hex dumps, minified JSON) is one ``[UNK]`` token to WordPiece, whatever its length.
MAX_CHARS_PER_TOKEN = 16


class TokenCounter:
    """Counts tokens (without special tokens) and maps token boundaries to character offsets.

    Uses a private copy of a fast tokenizer's Rust backend with truncation and padding
    disabled, because sentence-transformers leaves truncation switched on in the shared one.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._slow: Any = None
        self._fast: Tokenizer | None = None
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None:
            from tokenizers import Tokenizer

            self._fast = Tokenizer.from_str(backend.to_str())
            self._fast.no_truncation()
            self._fast.no_padding()
        else:
            self._fast = None
            self._slow = tokenizer
        self.n_special = len(tokenizer("")["input_ids"]) if callable(tokenizer) else 2

    def count(self, text: str) -> int:
        """Number of tokens of ``text`` without [CLS]/[SEP]-style special tokens."""
        if self._fast is not None:
            return len(self._fast.encode(text, add_special_tokens=False).ids)
        return len(self._slow.encode(text, add_special_tokens=False))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Token counts of several texts (batched on the fast tokenizer)."""
        if self._fast is not None:
            return [len(e.ids) for e in self._fast.encode_batch(list(texts), add_special_tokens=False)]
        return [self.count(t) for t in texts]

    def cut_points(self, text: str, max_tokens: int) -> list[int]:
        """Character offsets that cut ``text`` into pieces of at most ``max_tokens`` tokens."""
        if self._fast is not None:
            offsets = self._fast.encode(text, add_special_tokens=False).offsets
        else:
            offsets = self._slow(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        cuts = [0]
        for start in range(max_tokens, len(offsets), max_tokens):
            cut = offsets[start][0]
            if cut > cuts[-1]:
                cuts.append(cut)
        cuts.append(len(text))
        return cuts


def document_header(doc: Document) -> str:
    """One-line header identifying ``doc``: ``"<Type> <source> <key> | <title> | <date> | status: <s>"``."""
    meta = doc.metadata
    doc_type = str(meta.get("doc_type") or "text")
    label = TYPE_LABELS.get(doc_type, doc_type)
    key = str(meta.get("key") or doc.key)
    if doc_type == "elog":
        ident = f"{label} {meta.get('logbook') or doc.source} MID {key}"
    elif doc_type in ("jira", "csv_ticket"):
        ident = f"{label} {key}"
    elif doc_type == "shiftlog":
        ident = f"{label} {doc.source} shift {key}"
    else:
        ident = f"{label} {doc.source}" + ("" if key in doc.source else f" {key}")
    parts = [ident]
    title = meta.get("title")
    if title and str(title) != key:
        parts.append(str(title))
    created = meta.get("created")
    if created:
        parts.append(str(created)[:16].replace("T", " "))
    if meta.get("status"):
        parts.append(f"status: {meta['status']}")
    return " | ".join(parts).replace("\n", " ")


class Chunker:
    """Splits documents into :class:`Chunk` objects within a token budget.

    Args:
        tokenizer: the embedding model's (Hugging Face) tokenizer.
        max_tokens: ceiling per chunk *including* special tokens (e.g. 256 for all-MiniLM-L6-v2).
        overlap_tokens: tokens shared by consecutive pieces (default ``max_tokens // 8``).
        header_max_tokens: longer headers (huge titles) are cut to this many tokens.
    Raises:
        ValueError: ``max_tokens`` too small to hold a header and some text.
    """

    def __init__(self, tokenizer: Any, max_tokens: int, overlap_tokens: int | None = None,
                 header_max_tokens: int = 64) -> None:
        self.counter = TokenCounter(tokenizer)
        self.max_tokens = int(max_tokens)
        self.budget = self.max_tokens - self.counter.n_special
        self.header_max_tokens = min(header_max_tokens, self.budget // 2)
        if self.budget - self.header_max_tokens < 16:
            raise ValueError(f"max_tokens={max_tokens} leaves no room for text after the header")
        self.overlap_tokens = self.max_tokens // 8 if overlap_tokens is None else int(overlap_tokens)

    def signature(self) -> str:
        """Short hash of the chunking settings (part of the store's index signature)."""
        raw = f"{CHUNKER_VERSION}|{self.max_tokens}|{self.overlap_tokens}|{self.header_max_tokens}"
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    def _header(self, doc: Document) -> str:
        header = document_header(doc)
        if self.counter.count(header) > self.header_max_tokens:
            header = header[: self.counter.cut_points(header, self.header_max_tokens)[1]].rstrip() + " …"
        return header

    def _split(self, body: str, budget: int) -> list[str]:
        max_chars = budget * MAX_CHARS_PER_TOKEN
        if len(body) <= max_chars and self.counter.count(body) <= budget:
            return [body]
        splitter = RecursiveCharacterTextSplitter(
            chunk_size=budget,
            chunk_overlap=min(self.overlap_tokens, budget // 4),
            length_function=self.counter.count,
            separators=_SEPARATORS,
            keep_separator="end",
        )
        pieces: list[str] = []
        for piece in splitter.split_text(body):
            if self.counter.count(piece) > budget:
                cuts = self.counter.cut_points(piece, budget)
                parts = [piece[a:b] for a, b in zip(cuts, cuts[1:])]
            else:
                parts = [piece]
            for part in parts:  # then by length (see MAX_CHARS_PER_TOKEN)
                pieces.extend(part[i:i + max_chars] for i in range(0, len(part), max_chars)
                              if part[i:i + max_chars].strip())
        return pieces

    def chunk(self, doc: Document) -> list[Chunk]:
        """Split ``doc`` into chunks whose full text (header included) fits ``max_tokens``.

        Returns at least one chunk (the header alone for an empty document).
        """
        header = self._header(doc)
        budget = self.budget - self.counter.count(header + "\n")
        body = doc.text.strip()
        pieces = self._split(body, budget) if body else [""]
        texts: list[str] = []
        for piece in pieces:
            text = f"{header}\n{piece}" if piece else header
            # Token counts are not additive across the join: re-check and cut further.
            shrink = budget
            while self.counter.count(text) > self.budget and shrink > 8:
                shrink -= 4
                cuts = self.counter.cut_points(piece, shrink)
                sub = [piece[a:b] for a, b in zip(cuts, cuts[1:])]
                if all(self.counter.count(f"{header}\n{s}") <= self.budget for s in sub):
                    texts.extend(f"{header}\n{s}" for s in sub[:-1])
                    text = f"{header}\n{sub[-1]}"
                    break
            if self.counter.count(text) > self.budget:  # not seen in practice; the model would truncate
                log.warning("%s: a chunk exceeds %d tokens after re-cutting", doc.doc_id, self.max_tokens)
            texts.append(text)
        n = len(texts)
        return [
            Chunk(
                chunk_id=make_chunk_id(doc.doc_id, i),
                doc_id=doc.doc_id,
                text=text,
                metadata={**doc.metadata, "doc_id": doc.doc_id, "chunk_index": i, "n_chunks": n},
            )
            for i, text in enumerate(texts)
        ]
