"""Grouped-query attention for multi-token verification passes without copying the KV cache.

transformers' SDPA path expands the key/value heads of a grouped-query attention
(GQA) model to one copy per query head (``repeat_kv``) whenever a pass has more than
one query token and an attention mask — i.e. on every verification pass. On CPU that
copy of the whole KV cache costs ~12 ms of a ~100 ms pass for SmolLM2-135M at a
1,000-token context. PyTorch's ``scaled_dot_product_attention(..., enable_gqa=True)``
reads the shared heads in place and gives bitwise-identical outputs (checked in
``tests/test_attention.py``), so the verification pass gets cheaper and the result
does not change. Single-token steps and the prefill keep transformers' own path.

Registered with transformers' ``AttentionInterface`` (and the SDPA mask builder in
``AttentionMaskInterface``) as :data:`GQA_SDPA`.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

log = logging.getLogger(__name__)

GQA_SDPA = "sdpa_gqa"


def gqa_sdpa_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                               attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                               **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Attention over ``query (batch, heads, q_len, head_dim)`` and the shared
    ``key``/``value (batch, kv_heads, kv_len, head_dim)``; returns ``(batch, q_len, heads, head_dim)``.

    A masked multi-token pass of a GQA model runs SDPA with ``enable_gqa=True``; every
    other case (one query token, no mask, no grouping, position biases, softcapping) is
    transformers' ``sdpa_attention_forward`` unchanged.
    """
    groups = getattr(module, "num_key_value_groups", 1)
    if (attention_mask is None or query.shape[2] == 1 or groups == 1
            or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(GQA_SDPA, gqa_sdpa_attention_forward)
AttentionMaskInterface.register(GQA_SDPA, sdpa_mask)


def use_gqa_attention(model: PreTrainedModel) -> bool:
    """Switch a CPU model that uses SDPA with grouped-query attention to :data:`GQA_SDPA`.

    CUDA keeps transformers' kernels (a masked GQA call there may fall back to the math
    kernel). Returns whether the model was switched.
    """
    config = model.config
    grouped = getattr(config, "num_key_value_heads", None) not in (None, getattr(config, "num_attention_heads", None))
    on_cpu = next(model.parameters()).device.type == "cpu"
    if not (grouped and on_cpu and config._attn_implementation == "sdpa"):
        return False
    model.set_attn_implementation(GQA_SDPA)
    log.info("attention: %s (grouped-query verification passes read the KV cache in place)", GQA_SDPA)
    return True
