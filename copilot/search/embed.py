"""Embedding texts with the store's model: the use case behind ``POST /v1/embeddings`` (the
same model, normalisation and vectors as retrieval, so cosine = dot product)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ingestion.embedding import Embedder


class InputTooLongError(ValueError):
    """Input ``index`` has ``tokens`` tokens, over the model's ``window``."""

    def __init__(self, index: int, tokens: int, window: int) -> None:
        super().__init__(f"input {index}: {tokens} tokens; the model's window is {window}")
        self.index, self.tokens, self.window = index, tokens, window


@dataclass(frozen=True)
class Embedded:
    """The vectors (float32, shape ``(n_texts, dimension)``) and each text's token count
    (special tokens included, at most the model's window)."""

    vectors: np.ndarray
    token_counts: list[int]


def embed_texts(embedder: Embedder, texts: list[str], truncate: bool) -> Embedded:
    """Embed ``texts``; a text over the model's window is cut when ``truncate``.

    Raises:
        InputTooLongError: the first text over the window, unless ``truncate``.
    """
    window = embedder.max_seq_length
    counts = [len(ids) for ids in embedder.tokenizer(texts, add_special_tokens=True)["input_ids"]]
    for i, n in enumerate(counts):
        if n > window and not truncate:
            raise InputTooLongError(i, n, window)
    return Embedded(embedder.embed_array(texts).astype(np.float32), [min(n, window) for n in counts])
