"""Importing torchao without its import-time noise.

torchao (an optional dependency: the quantized derived drafts) prints at import, on
every command that loads transformers' model code (transformers imports it when it is
installed): "Failed to load …/_C_*.so" for CUDA extensions this machine cannot load
(torchao's logger), and torch's "register_constant() on Enum subclasses is deprecated"
(the ``torch.utils._pytree`` logger). Neither affects what we use. :func:`quiet_torchao`
silences both, and Python warnings, for the duration of an import.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager
from typing import Iterator

# Loggers that speak while torchao is imported.
NOISY_LOGGERS = ("torchao", "torch.utils._pytree")


@contextmanager
def quiet_torchao(level: int = logging.ERROR) -> Iterator[None]:
    """Inside the block, Python warnings are ignored and :data:`NOISY_LOGGERS` drop
    records below ``level``; both are restored afterwards (errors still show)."""
    loggers = [logging.getLogger(name) for name in NOISY_LOGGERS]
    before = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lg in loggers:
            lg.setLevel(level)
        try:
            yield
        finally:
            for lg, lvl in zip(loggers, before, strict=True):
                lg.setLevel(lvl)
