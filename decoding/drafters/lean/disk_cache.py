"""The lean draft's packed weights cached on disk: a later start loads them in well under a
second instead of quantizing the target again.

One file per target fingerprint and variant (:func:`packed_cache_path`), written atomically
(a temporary file, then a rename). A missing, foreign-format or unreadable file is
rebuilt, never fatal; a read-only directory only costs the re-quantization next start.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Mapping

import torch
from transformers import PreTrainedModel

from decoding.drafters.lean.quantize import PackedLinear

log = logging.getLogger(__name__)

#: Bump when the packed format changes (old files are then ignored, not misread).
PACKED_FORMAT = 1

#: The decoder's packed linears, per layer ``[qkv, o, gate_up, down]``, and the LM head.
PackedWeights = tuple[list[list[PackedLinear]], PackedLinear]


def target_fingerprint(target: PreTrainedModel) -> str:
    """A short hash of the target's config and a strided sample of every weight (~0.1 s for
    135M parameters): a changed checkpoint gets a new packed-cache file."""
    h = hashlib.sha256(target.config.to_json_string(use_diff=False).encode())
    for name, p in target.state_dict().items():
        flat = p.detach().reshape(-1)
        h.update(name.encode())
        h.update(flat[:: max(1, flat.numel() // 4096)].float().numpy().tobytes())
    return h.hexdigest()[:16]


def packed_cache_path(cache_dir: str | Path, target: PreTrainedModel, variant: Mapping[str, object]) -> Path:
    """``cache_dir/lean-draft-<fingerprint>-<variant hash>.pt``; ``variant`` holds the packing
    choices (JSON-serialisable values)."""
    key = json.dumps({"format": PACKED_FORMAT, "torch": torch.__version__.split("+")[0], **variant}, sort_keys=True)
    vh = hashlib.sha256(key.encode()).hexdigest()[:12]
    return Path(cache_dir) / f"lean-draft-{target_fingerprint(target)}-{vh}.pt"


def save_packed(path: Path, weights: PackedWeights) -> None:
    """Write ``weights`` to ``path`` (a failure is logged: serving goes on without the cache)."""
    linears, head = weights
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        torch.save({"format": PACKED_FORMAT, "layers": [[lin.state() for lin in layer] for layer in linears],
                    "head": head.state()}, tmp)
        tmp.replace(path)
    except OSError as exc:  # a read-only data dir costs a re-quantization next start, nothing else
        log.warning("lean draft: cannot cache packed weights at %s: %s", path, exc)


def load_packed(path: Path) -> PackedWeights | None:
    """The weights :func:`save_packed` wrote to ``path``; ``None`` when the file is missing, of
    another :data:`PACKED_FORMAT`, or unreadable (logged)."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        if state.get("format") != PACKED_FORMAT:
            return None
        return ([[PackedLinear.from_state(s) for s in layer] for layer in state["layers"]],
                PackedLinear.from_state(state["head"]))
    except Exception as exc:  # noqa: BLE001 - a corrupt cache file is rebuilt, never fatal
        log.warning("lean draft: ignoring unreadable packed cache %s: %s", path, exc)
        return None
