"""One target forward over the new tokens of several requests at once (continuous batching).

On a CPU a decode pass of a small model is bound by reading the weights, not by
arithmetic: a pass over 2..16 rows costs about one single-token step
(:mod:`decoding.backends.few_token_linear`). Rows of *different* requests are then almost free
too, which is what continuous batching (Yu et al., OSDI 2022 "Orca": iteration-level
scheduling; vLLM's packed "varlen" batches) exploits.

Here every request keeps its own :class:`~decoding.kv.cache.PreallocatedCache` (its own
positions, ragged lengths, no padding and no recompute when a request joins or leaves).
A packed pass concatenates all requests' new tokens into one sequence of ``rows``
positions: embeddings, norms, the q/k/v/o projections, the MLP and the LM head run once
over all rows; rotary embeddings use each row's own position; attention runs per request,
over that request's cache only, with exactly the call (and mask) its solo pass would make.
So a request's logits differ from its solo pass only by the linears' summation order over
a wider right operand, the same class of difference as any multi-token pass (README.md, "The
exactness contract"); the exactness eval's batched mode checks that no argmax moves.

Supported: the Llama layer layout (Llama, Qwen2, Mistral, SmolLM2: pre-norm decoder layers
with ``self_attn.{q,k,v,o}_proj``, ``mlp``, rotary embeddings) with full attention in every
layer. Anything else answers ``False`` from :func:`supports_packed_pass` and the engine runs
its requests' passes one after the other (still exact, not faster).
"""

from __future__ import annotations

import sys
from typing import Sequence

import torch
from transformers import Cache, PreTrainedModel
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from decoding.backends.few_token_linear import few_token_passes

_LAYER_PARTS = ("input_layernorm", "post_attention_layernorm", "mlp", "self_attn")
_ATTENTION_PARTS = ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling", "layer_idx")


def supports_packed_pass(model: PreTrainedModel) -> bool:
    """Whether :func:`packed_pass` can run ``model`` (the Llama layer layout, full attention,
    an SDPA or eager attention implementation, and an ``apply_rotary_pos_emb`` in its module)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if inner is None or layers is None or not hasattr(inner, "rotary_emb") or not hasattr(model, "lm_head"):
        return False
    layer_types = getattr(model.config, "layer_types", None) or ()
    if any(t != "full_attention" for t in layer_types):
        return False
    if model.config._attn_implementation not in ("sdpa", "eager", "sdpa_gqa"):
        return False
    for layer in layers:
        attn = getattr(layer, "self_attn", None)
        if not all(hasattr(layer, p) for p in _LAYER_PARTS) or not all(hasattr(attn, p) for p in _ATTENTION_PARTS):
            return False
        if getattr(attn, "sliding_window", None):
            return False
    return hasattr(sys.modules[type(layers[0].self_attn).__module__], "apply_rotary_pos_emb")


def causal_mask(new_tokens: int, past: int, device: torch.device) -> torch.Tensor | None:
    """The mask a solo pass of ``new_tokens`` after ``past`` cached positions attends with:
    ``None`` for one token (it sees everything), else bool ``(1, 1, new_tokens, past + new_tokens)``,
    True where query i may attend key j (j ≤ past + i)."""
    if new_tokens == 1:
        return None
    q = torch.arange(new_tokens, device=device)[:, None] + past
    k = torch.arange(past + new_tokens, device=device)[None, :]
    return (k <= q)[None, None]


@torch.inference_mode()
def packed_pass(model: PreTrainedModel, rows: Sequence[tuple[Sequence[int], Cache]],
                last_only: bool = False) -> list[torch.Tensor]:
    """One forward over several requests' new tokens, each after its own KV cache.

    Args:
        model: a causal LM for which :func:`supports_packed_pass` holds.
        rows: per request ``(new token ids, its cache)``; each cache gets the new positions
            appended (like a solo pass with ``use_cache=True``). At least one token each.
        last_only: run the LM head on each request's last position only (a draft model
            feeding tokens before it drafts: ``logits_to_keep=1`` per request).

    Returns:
        Per request, float logits ``(len(new token ids), vocab)`` in the model's dtype
        (``(1, vocab)`` with ``last_only``).

    Raises:
        ValueError: no request, or a request with no new token.
    """
    if not rows or any(len(tokens) == 0 for tokens, _ in rows):
        raise ValueError("a packed pass needs at least one request, each with at least one new token")
    inner, device = model.model, next(model.parameters()).device
    lengths = [len(tokens) for tokens, _ in rows]
    pasts = [cache.get_seq_length() for _, cache in rows]
    ids = torch.tensor([[int(t) for tokens, _ in rows for t in tokens]], device=device)
    positions = torch.tensor([[p + i for n, p in zip(lengths, pasts, strict=True) for i in range(n)]],
                             device=device)
    masks = [causal_mask(n, p, device) for n, p in zip(lengths, pasts, strict=True)]
    layer_code = sys.modules[type(inner.layers[0].self_attn).__module__]
    # "eager" is not registered: it is the model code's own module-level function.
    attend = ALL_ATTENTION_FUNCTIONS.get_interface(model.config._attn_implementation,
                                                   layer_code.eager_attention_forward)
    rotate = layer_code.apply_rotary_pos_emb
    total = ids.shape[1]
    with few_token_passes():
        hidden = inner.embed_tokens(ids)
        cos, sin = inner.rotary_emb(hidden, position_ids=positions)
        for layer in inner.layers[: model.config.num_hidden_layers]:
            attn = layer.self_attn
            h = layer.input_layernorm(hidden)
            shape = (1, total, -1, attn.head_dim)
            q = attn.q_proj(h).view(shape).transpose(1, 2)
            k = attn.k_proj(h).view(shape).transpose(1, 2)
            v = attn.v_proj(h).view(shape).transpose(1, 2)
            q, k = rotate(q, k, cos, sin)
            outs, start = [], 0
            for (_, cache), n, mask in zip(rows, lengths, masks, strict=True):
                end = start + n
                keys, values = cache.update(k[:, :, start:end], v[:, :, start:end], attn.layer_idx)
                out, _ = attend(attn, q[:, :, start:end], keys, values, mask, dropout=0.0, scaling=attn.scaling)
                outs.append(out)  # (1, n, heads, head_dim)
                start = end
            hidden = hidden + attn.o_proj(torch.cat(outs, dim=1).reshape(1, total, -1).contiguous())
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        hidden = inner.norm(hidden)
        if last_only:
            ends = torch.tensor(lengths, device=device).cumsum(0) - 1
            return list(model.lm_head(hidden[:, ends])[0].split(1))
        logits = model.lm_head(hidden)[0]
    return list(logits.split(lengths))
