"""The lean draft model: a packed copy of a Llama-style target with a gpt-fast-style forward.

The forward is a dozen tensor ops per layer called directly — fused QKV and gate/up
matmuls on packed weights (:mod:`decoding.drafters.lean.quantize`), RMSNorm, rotary
embeddings and ``scaled_dot_product_attention`` over a transformers ``Cache`` — as in
pytorch-labs/gpt-fast ``model.py``. It is called the way a transformers causal LM is
(``model(input_ids=(1, M), cache=..., logits_to_keep=k).logits``), so the model is the
``model`` of a :class:`~decoding.backends.models.LoadedModel` draft, driven by
:class:`~decoding.drafters.draft_model.DraftModelDrafter` and timed by
:mod:`decoding.planning.calibration` like any other draft.

Its ``config`` reports the target's KV layout and its one parameter (an anchor) the KV
dtype, so a drafter sees "same KV layout and dtype as the target" and drafts over the
target's own KV cache: no draft prefill, no second copy of the context.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import Cache, PretrainedConfig, PreTrainedModel

from decoding.drafters.lean.disk_cache import PackedWeights, load_packed, packed_cache_path, save_packed
from decoding.drafters.lean.quantize import PackedLinear

#: Rotary variants whose ``inv_freq`` / ``attention_scaling`` fully describe the embedding.
SUPPORTED_ROPE = ("default", "linear", "llama3", "yarn")


@dataclass
class _Layer:
    attn_norm: torch.Tensor
    qkv: PackedLinear
    o: PackedLinear
    mlp_norm: torch.Tensor
    gate_up: PackedLinear
    down: PackedLinear


@dataclass
class LeanDraftOutput:
    """What a forward returns: the field of a transformers output the engine reads.

    Attributes:
        logits: float32 ``(1, k or M, vocab)``.
    """

    logits: torch.Tensor


def check_supported(target: PreTrainedModel, layers: int | None = None) -> int:
    """Check that ``target`` has the Llama layout the lean forward implements; return the
    number of decoder layers to keep (``layers``, default all).

    Raises:
        ValueError: another activation, rotary variant or attention layout (names what
            differs), or ``layers`` outside 1..num_hidden_layers.
    """
    cfg = target.config
    if getattr(cfg, "hidden_act", "silu") != "silu":
        raise ValueError(f"lean draft supports SiLU MLPs only, not {cfg.hidden_act!r}")
    try:
        decoder: Any = target.model
        blocks, rotary = decoder.layers, decoder.rotary_emb
    except AttributeError as exc:
        raise ValueError(f"lean draft needs a Llama-style model (model.layers, model.rotary_emb): {exc}") from None
    if getattr(rotary, "rope_type", "default") not in SUPPORTED_ROPE:
        raise ValueError(f"lean draft does not support rope type {rotary.rope_type!r}")
    n = len(blocks) if layers is None else int(layers)
    if not 1 <= n <= len(blocks):
        raise ValueError(f"layers must be in 1..{len(blocks)}, got {n}")
    for blk in list(blocks)[:n]:
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            if not hasattr(blk.self_attn, name):
                raise ValueError(f"lean draft needs self_attn.{name}")
        if getattr(blk.self_attn, "q_norm", None) is not None or getattr(blk.self_attn, "k_norm", None) is not None:
            raise ValueError("lean draft does not support q/k norms (Qwen3-style)")
    return n


def _cat_bias(*mods: Any) -> torch.Tensor | None:
    if all(m.bias is None for m in mods):
        return None
    return torch.cat([m.bias if m.bias is not None else torch.zeros(m.out_features) for m in mods])


@torch.no_grad()
def pack_target(target: PreTrainedModel, n_layers: int, *, quant: str, group_size: int, head: str,
                act_dtype: torch.dtype, head_vocab: int | None) -> PackedWeights:
    """The first ``n_layers`` decoder layers' linears packed as ``quant`` (q/k/v fused, gate/up
    fused) and the LM head as ``head``, its rows cut to ids ``< head_vocab`` when given."""
    decoder: Any = target.model
    pk: dict[str, Any] = {"kind": quant, "group_size": group_size, "act_dtype": act_dtype}
    linears = []
    for blk in list(decoder.layers)[:n_layers]:
        a, m = blk.self_attn, blk.mlp
        linears.append([
            PackedLinear(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
                         _cat_bias(a.q_proj, a.k_proj, a.v_proj), **pk),
            PackedLinear(a.o_proj.weight, a.o_proj.bias, **pk),
            PackedLinear(torch.cat([m.gate_proj.weight, m.up_proj.weight]), _cat_bias(m.gate_proj, m.up_proj), **pk),
            PackedLinear(m.down_proj.weight, m.down_proj.bias, **pk),
        ])
    lm_head: Any = target.lm_head
    w, b = lm_head.weight, lm_head.bias
    if head_vocab is not None and head_vocab < int(target.config.vocab_size):
        w, b = w[: int(head_vocab)], None if b is None else b[: int(head_vocab)]
    return linears, PackedLinear(w, b, kind=head, group_size=group_size, act_dtype=act_dtype)


def _draft_config(cfg: PretrainedConfig, n_layers: int) -> PretrainedConfig:
    """The target's config with ``n_layers`` decoder layers (what the draft's KV layout is)."""
    config = copy.deepcopy(cfg)
    config.num_hidden_layers = n_layers
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:n_layers]
    return config


@dataclass(frozen=True)
class LeanVariant:
    """How a :class:`LeanDraftModel` packs and runs the target's copy.

    Attributes:
        quant: decoder linears: ``"int4"`` (default), ``"int8"`` or ``"dense"``.
        group_size: int4 group length (32 reproduces a Q4_1 GGUF's groups).
        head: LM head packing: ``"int8"`` (default), ``"int4"`` or ``"dense"``.
        act_dtype: matmul activation dtype (bfloat16: the packed kernels' fast path on CPU).
        kv_dtype: residual stream, norms, attention and KV dtype (float32 default: the fp32
            target's, so the draft can attend over the target's KV cache).
        layers: keep only the first N decoder layers (None = all; the draft then has a KV
            layout of its own and a drafter gives it a cache of its own).
        head_vocab: keep only the LM-head rows of ids ``< head_vocab`` (byte-level BPE ids
            are in merge order, so low ids are the frequent tokens; FR-Spec,
            arXiv:2502.14856, ranks by frequency instead); the others get ``-inf``. ``None``
            = the full vocabulary. Only with an int8 or dense head.
        threads: torch intra-op threads during a forward (``None`` = leave as is). The
            packed kernels split tiny matmuls across threads; on a shared, oversubscribed
            2-core machine one thread can be faster (measure with evals/draft_cost.py).
    """

    quant: str = "int4"
    group_size: int = 32
    head: str = "int8"
    act_dtype: torch.dtype = torch.bfloat16
    kv_dtype: torch.dtype = torch.float32
    layers: int | None = None
    head_vocab: int | None = None
    threads: int | None = None


class LeanDraftModel(torch.nn.Module):
    """A packed copy of a Llama-style target, called like a transformers causal LM.

    Args:
        target: the target's transformers model (``LlamaForCausalLM``-like: ``model.layers[i]``
            with ``self_attn.{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj``, RMSNorms, rotary
            embeddings, SiLU MLP). Its weights are read, not modified; the embedding is shared.
        variant: packing, dtypes, layers, LM-head rows and threads (:class:`LeanVariant`).
        cache_dir: where the packed weights are cached
            (:func:`~decoding.drafters.lean.disk_cache.packed_cache_path`); ``None`` = no disk cache.

    Raises:
        ValueError: the target is not a supported architecture (:func:`check_supported`),
            an unknown quant kind, or a trimmed int4 head.
    """

    def __init__(self, target: PreTrainedModel, variant: LeanVariant = LeanVariant(),
                 cache_dir: str | Path | None = None) -> None:
        super().__init__()
        quant, head, head_vocab, kv_dtype = variant.quant, variant.head, variant.head_vocab, variant.kv_dtype
        n = check_supported(target, variant.layers)
        cfg = target.config
        self.vocab_size = int(cfg.vocab_size)
        if head_vocab is not None and head_vocab < self.vocab_size and head == "int4":
            raise ValueError("a trimmed LM head needs head='int8' or 'dense'")
        self.config = _draft_config(cfg, n)
        self.generation_config = getattr(target, "generation_config", None)
        self.num_layers, self.num_heads = n, int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.num_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.num_heads)
        self.eps = float(cfg.rms_norm_eps)
        self.act_dtype, self.kv_dtype, self.threads = variant.act_dtype, kv_dtype, variant.threads
        packing: dict[str, Any] = {"quant": quant, "group_size": variant.group_size, "head": head,
                                   "act_dtype": variant.act_dtype, "head_vocab": head_vocab}
        self._set_weights(target, self._packed(target, n, cache_dir, packing))
        self.anchor = torch.nn.Parameter(torch.zeros(1, dtype=kv_dtype), requires_grad=False)

    @staticmethod
    def _packed(target: PreTrainedModel, n: int, cache_dir: str | Path | None,
                packing: dict[str, Any]) -> PackedWeights:
        """The packed weights from the disk cache, else packed now (and cached)."""
        variant = {**packing, "act_dtype": str(packing["act_dtype"]), "layers": n}
        path = packed_cache_path(cache_dir, target, variant) if cache_dir is not None else None
        weights = load_packed(path) if path is not None else None
        if weights is None:
            weights = pack_target(target, n, **packing)
            if path is not None:
                save_packed(path, weights)
        return weights

    def _set_weights(self, target: PreTrainedModel, weights: PackedWeights) -> None:
        """Layers from the packed linears; norms in ``kv_dtype``; the target's embedding and rotary tables."""
        decoder: Any = target.model
        linears, self.lm_head = weights
        with torch.no_grad():
            self.layers = [
                _Layer(attn_norm=blk.input_layernorm.weight.detach().to(self.kv_dtype), qkv=lin[0], o=lin[1],
                       mlp_norm=blk.post_attention_layernorm.weight.detach().to(self.kv_dtype), gate_up=lin[2],
                       down=lin[3])
                for blk, lin in zip(list(decoder.layers)[: self.num_layers], linears, strict=True)]
            self.final_norm: torch.Tensor = decoder.norm.weight.detach().to(self.kv_dtype)
        self.trimmed_head = self.lm_head.out_features < self.vocab_size
        # The target's own embedding tensor (row lookups only, no copy).
        self.embed: torch.Tensor = decoder.embed_tokens.weight.detach()
        self.inv_freq: torch.Tensor = decoder.rotary_emb.inv_freq.detach().float().clone()
        self.attention_scaling = float(getattr(decoder.rotary_emb, "attention_scaling", 1.0))
        self.intermediate: int = self.layers[0].gate_up.out_features // 2
        self._rope_cos = self._rope_sin = torch.empty(0)

    @property
    def weight_bytes(self) -> int:
        """Bytes of packed weights read per step (decoder + LM head; the embedding row is negligible)."""
        return sum(lin.qkv.nbytes + lin.o.nbytes + lin.gate_up.nbytes + lin.down.nbytes
                   for lin in self.layers) + self.lm_head.nbytes

    # -- the forward ---------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, cache: Cache | None = None, use_cache: bool = True,
                logits_to_keep: int = 0) -> LeanDraftOutput:
        """One pass over ``input_ids (1, M)`` int64 after the cache's positions.

        Args:
            cache: a transformers ``Cache`` whose ``update(keys, values, layer)`` writes after
                the cached positions and returns all of them (the target's
                :class:`~decoding.kv.cache.PreallocatedCache`, or one of the draft's own).
            use_cache: accepted for the transformers call convention (the cache is always used).
            logits_to_keep: logits for the last k positions only (0 = all M).

        Returns:
            :class:`LeanDraftOutput`, ``logits`` float32 ``(1, k or M, vocab)``.

        Raises:
            ValueError: a batch larger than 1, or no cache.
        """
        if cache is None:
            raise ValueError("the lean draft needs a KV cache (cache=PreallocatedCache(...))")
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"the lean draft runs one sequence at a time, got input_ids {tuple(input_ids.shape)}")
        before = torch.get_num_threads()
        threads = self.threads if self.threads is not None and self.threads != before else None
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            x = self._decoder(input_ids[0], cache)
        finally:
            if threads is not None:
                torch.set_num_threads(before)
        if logits_to_keep:
            x = x[-logits_to_keep:]
        return LeanDraftOutput(self.logits(x)[None])

    def _decoder(self, ids: torch.Tensor, cache: Cache) -> torch.Tensor:
        """The decoder layers over ``ids`` (1-D int64, M tokens after the cache's positions),
        their K/V written into ``cache``: the hidden states before the final norm, ``(M,
        hidden)`` in ``kv_dtype``."""
        m, start = int(ids.shape[0]), cache.get_seq_length()
        end = start + m
        cos, sin = (t[None] for t in self._rope(start, end))  # (1, M, D)
        h, kvh, d = self.num_heads, self.kv_heads, self.head_dim
        half, groups, q_size, kv_size = d // 2, h // kvh, h * d, kvh * d
        mask = None
        if m > 1:  # causal over the new positions; rows are (group, position) after the GQA fold
            pos = torch.arange(start, end)[:, None]
            mask = (torch.arange(end)[None, :] <= pos).repeat(groups, 1)
        x = self.embed[ids].to(self.kv_dtype)  # (M, hidden)
        for i, layer in enumerate(self.layers):
            qkv = layer.qkv(self._norm(x, layer.attn_norm)).to(self.kv_dtype)
            q = qkv[:, :q_size].view(m, h, d).transpose(0, 1)  # (H, M, D)
            k = qkv[:, q_size:q_size + kv_size].view(m, kvh, d).transpose(0, 1)
            v = qkv[:, q_size + kv_size:].view(m, kvh, d).transpose(0, 1)
            q = q * cos + torch.cat([-q[..., half:], q[..., :half]], dim=-1) * sin
            k = k * cos + torch.cat([-k[..., half:], k[..., :half]], dim=-1) * sin
            keys, values = cache.update(k[None], v[None], i)
            # Grouped-query attention without repeat_kv: fold each KV head's query heads
            # into its query rows, (1, kvh, groups*M, D) against (1, kvh, end, D).
            o = F.scaled_dot_product_attention(q.reshape(1, kvh, groups * m, d), keys, values, attn_mask=mask)
            x = x + layer.o(o.view(h, m, d).transpose(0, 1).reshape(m, q_size)).to(self.kv_dtype)
            gu = layer.gate_up(self._norm(x, layer.mlp_norm))
            g, u = gu[:, : self.intermediate], gu[:, self.intermediate:]
            x = x + layer.down(F.silu(g) * u).to(self.kv_dtype)
        return x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head: ``(M, hidden)`` → float32 ``(M, vocab)`` (a trimmed head
        puts ``-inf`` on the ids it leaves out)."""
        out = self.lm_head(self._norm(hidden, self.final_norm)).float()
        if not self.trimmed_head:
            return out
        full = torch.full((out.shape[0], self.vocab_size), float("-inf"))
        full[:, : out.shape[1]] = out
        return full

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(w.dtype)

    def _rope(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin rows for positions ``start..end-1`` ``(M, head_dim)``, the table grown by doubling."""
        if end > self._rope_cos.shape[0]:
            size = max(end, 2 * self._rope_cos.shape[0], 1024)
            freqs = torch.arange(size, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
            emb = torch.cat([freqs, freqs], dim=-1)
            self._rope_cos = (emb.cos() * self.attention_scaling).to(self.kv_dtype)
            self._rope_sin = (emb.sin() * self.attention_scaling).to(self.kv_dtype)
        return self._rope_cos[start:end], self._rope_sin[start:end]
