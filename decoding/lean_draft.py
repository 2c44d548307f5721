"""A lean, quantized copy of a Llama-family target as a draft model (gpt-fast style).

Why: a quantized copy of the target agrees with it on almost every token, but run
through the transformers module stack its one-token step costs *more* than the fp32
target's at the RAG working context (47 ms vs 42.5 ms at 1,200 tokens on 2 CPU
threads, issue 12): per step it pays for ~30 layers × dozens of Python modules, hooks,
mask builders and dtype conversions, while its int4 weights need only ~3 ms of memory
bandwidth. Here the draft's forward is a dozen tensor ops per layer called directly —
fused QKV and gate/up matmuls on packed weights, RMSNorm, rotary embeddings and
``scaled_dot_product_attention`` over a preallocated KV cache — as in
pytorch-labs/gpt-fast ``model.py`` / ``quantize.py``.

Weights (derived from the target's :class:`~decoding.models.LoadedModel`, nothing is
downloaded):

- ``int4``: every decoder linear as 4-bit asymmetric groups of ``group_size`` along the
  input dimension (scale and zero per group), matmul by
  ``torch.ops.aten._weight_int4pack_mm_for_cpu``. The embedded SmolLM2 target is a
  dequantized Q4_1 GGUF (groups of 32, scale + min), so at group size 32 the int4 codes
  reproduce its decoder weights exactly; only the scales are rounded to the
  activation dtype.
- ``int8``: per-output-channel symmetric int8, ``torch.ops.aten._weight_int8pack_mm``.
- ``dense``: the weights as they are in ``act_dtype`` (a reference / fallback).

The LM head is int8 per channel (int4 there costs agreement: 74 % vs 97 %, issue 12);
the embedding is the target's own tensor (a row lookup, shared, no copy).

On this AVX2 CPU the packed kernels are fast only with bfloat16 activations (fp32 input
falls back to a scalar path ~10× slower), so ``act_dtype`` defaults to bfloat16 for the
matmuls while the residual stream, norms and attention stay in ``kv_dtype`` (float32 by
default, the target's KV dtype, so the target's prompt K/V is copied in without a cast).

The KV cache (:class:`LeanKVCache`) is one buffer per layer of shape
``(1, kv_heads, capacity, head_dim)``, sized per request (prompt + output reserve) and
doubled when a write would pass it; ``crop(n)`` rewinds the length (the next write
overwrites the stale positions).

Speculative decoding itself (the target verifies, so the output is the target's
greedy / sampled output whatever this draft proposes): Leviathan et al. 2023
(arXiv:2211.17192). Sharing the target's prompt KV with a cheaper draft at long context:
MagicDec (arXiv:2408.11049).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from decoding.models import LoadedModel

log = logging.getLogger(__name__)

QUANT_KINDS = ("int4", "int8", "dense")


# ----------------------------------------------------------------------------------------
# Packed linear layers
# ----------------------------------------------------------------------------------------
class PackedLinear:
    """``y = x @ W.T (+ b)`` with ``W`` packed as int4 groups, int8 rows, or dense.

    Args:
        weight: float weight ``(out_features, in_features)`` (any float dtype).
        bias: optional ``(out_features,)``.
        kind: ``"int4"``, ``"int8"`` or ``"dense"``.
        group_size: int4 group length along ``in_features`` (32, 64, 128 or 256; must
            divide ``in_features``).
        act_dtype: the activation dtype the matmul runs in (bfloat16 is the fast path of
            the CPU packed kernels on AVX2); scales are stored in it.

    ``__call__(x)`` takes ``(M, in_features)`` in any float dtype and returns
    ``(M, out_features)`` in ``act_dtype``.

    Raises:
        ValueError: an unknown kind or a group size that does not divide ``in_features``.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, *, kind: str = "int4",
                 group_size: int = 32, act_dtype: torch.dtype = torch.bfloat16) -> None:
        if kind not in QUANT_KINDS:
            raise ValueError(f"unknown quantization {kind!r}: use one of {QUANT_KINDS}")
        w = weight.detach().float()
        self.out_features, self.in_features = w.shape
        self.kind, self.group_size, self.act_dtype = kind, group_size, act_dtype
        self.bias = None if bias is None else bias.detach().to(act_dtype)
        self.scales: torch.Tensor | None = None
        if kind == "int4":
            if group_size not in (32, 64, 128, 256) or self.in_features % group_size:
                raise ValueError(f"int4 group size {group_size} must be 32/64/128/256 and divide "
                                 f"in_features={self.in_features}")
            codes, scales_zeros = quantize_int4_groups(w, group_size)
            self.weight = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
            self.scales = scales_zeros.to(act_dtype)
        elif kind == "int8":
            codes, scales = quantize_int8_rows(w)
            self.weight, self.scales = codes, scales.to(act_dtype)
        else:
            self.weight = w.to(act_dtype).contiguous()

    def state(self) -> dict:
        """The packed tensors and their metadata (for :meth:`from_state` / a disk cache)."""
        return {"kind": self.kind, "group_size": self.group_size, "act_dtype": str(self.act_dtype),
                "shape": (self.out_features, self.in_features), "weight": self.weight, "scales": self.scales,
                "bias": self.bias}

    @classmethod
    def from_state(cls, state: dict) -> PackedLinear:
        """Rebuild from :meth:`state` without quantizing again."""
        self = cls.__new__(cls)
        self.kind, self.group_size = state["kind"], int(state["group_size"])
        self.act_dtype = getattr(torch, state["act_dtype"].removeprefix("torch."))
        self.out_features, self.in_features = state["shape"]
        self.weight, self.scales, self.bias = state["weight"], state["scales"], state["bias"]
        return self

    @property
    def nbytes(self) -> int:
        """Bytes of packed weight + scales (+ bias) read per call."""
        n = self.weight.numel() * self.weight.element_size()
        for t in (self.scales, self.bias):
            if t is not None:
                n += t.numel() * t.element_size()
        return n

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.act_dtype)
        if self.kind == "int4":
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.weight, self.group_size, self.scales)
        elif self.kind == "int8":
            y = torch.ops.aten._weight_int8pack_mm(x, self.weight, self.scales)
        else:
            y = x @ self.weight.t()
        return y if self.bias is None else y + self.bias


def quantize_int4_groups(w: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit min/max quantization of ``w (N, K)`` in groups of ``group_size``
    along K, in the tinygemm convention ``w ≈ (q - 8) * scale + zero`` (gpt-fast
    ``quantize.py``).

    Returns:
        ``(codes, scales_and_zeros)``: int32 codes in 0..15 of shape ``(N, K)`` and float32
        ``(K // group_size, N, 2)`` holding ``[scale, zero]`` per group.
    """
    n, k = w.shape
    g = w.float().reshape(n, k // group_size, group_size)
    lo, hi = g.amin(dim=-1, keepdim=True), g.amax(dim=-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-12)
    codes = ((g - lo) / scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
    zero = lo + 8 * scale
    sz = torch.cat([scale, zero], dim=-1)  # (N, K/g, 2)
    return codes.contiguous(), sz.transpose(0, 1).contiguous()


def dequantize_int4_groups(codes: torch.Tensor, scales_zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """Inverse of :func:`quantize_int4_groups`: float32 ``(N, K)``."""
    n, k = codes.shape
    sz = scales_zeros.float().transpose(0, 1)  # (N, K/g, 2)
    q = codes.reshape(n, k // group_size, group_size).float()
    return ((q - 8) * sz[..., :1] + sz[..., 1:]).reshape(n, k)


def quantize_int8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: ``w ≈ codes * scales[:, None]``.

    Returns:
        ``(codes int8 (N, K), scales float32 (N,))``.
    """
    scales = (w.float().abs().amax(dim=1) / 127).clamp(min=1e-12)
    codes = (w.float() / scales[:, None]).round().clamp(-127, 127).to(torch.int8)
    return codes.contiguous(), scales


# ----------------------------------------------------------------------------------------
# KV cache
# ----------------------------------------------------------------------------------------
class LeanKVCache:
    """Per-layer key/value buffers ``(1, kv_heads, capacity, head_dim)`` written in place.

    Args:
        layers, kv_heads, head_dim: the model's KV layout.
        capacity: positions reserved (tokens): the prompt plus an output reserve; a write
            past it doubles the buffers (one copy).
        dtype: buffer dtype (float32 = the fp32 target's, so its prompt K/V copies in as is).
    """

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int,
                 dtype: torch.dtype = torch.float32) -> None:
        self.layers, self.kv_heads, self.head_dim, self.dtype = layers, kv_heads, head_dim, dtype
        self.capacity = max(1, int(capacity))
        self.length = 0
        self.keys = [self._empty(self.capacity) for _ in range(layers)]
        self.values = [self._empty(self.capacity) for _ in range(layers)]

    def _empty(self, capacity: int) -> torch.Tensor:
        return torch.empty(1, self.kv_heads, capacity, self.head_dim, dtype=self.dtype)

    @property
    def nbytes(self) -> int:
        """Bytes reserved by the buffers."""
        return 2 * self.layers * self.kv_heads * self.capacity * self.head_dim * self.dtype.itemsize

    def reserve(self, needed: int) -> None:
        """Make room for ``needed`` positions (doubling, keeping the cached ones)."""
        if needed <= self.capacity:
            return
        capacity = max(needed, 2 * self.capacity)
        for buffers in (self.keys, self.values):
            for i, old in enumerate(buffers):
                new = self._empty(capacity)
                new[:, :, : self.length] = old[:, :, : self.length]
                buffers[i] = new
        self.capacity = capacity

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``(1, kv_heads, M, head_dim)`` keys/values at positions ``length..length+M-1``
        of ``layer`` and return views of all ``length + M`` positions. The caller advances
        ``length`` once all layers are written (reserve room first: :meth:`reserve`)."""
        end = self.length + keys.shape[-2]
        self.keys[layer][:, :, self.length:end] = keys
        self.values[layer][:, :, self.length:end] = values
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def crop(self, n: int) -> None:
        """Keep the first ``n`` positions (``n`` ≥ current length is a no-op)."""
        if n < 0:
            raise ValueError(f"crop keeps a non-negative number of positions, got {n}")
        self.length = min(self.length, n)

    def load_prefix(self, layer_kv: Sequence[tuple[torch.Tensor, torch.Tensor]], n: int | None = None) -> int:
        """Copy the first ``n`` positions of another cache's per-layer ``(keys, values)``
        (each ``(1, kv_heads, length, head_dim)``, e.g. the target's prompt K/V) and set
        the length to ``n`` (default: all of them). Returns ``n``.

        Raises:
            ValueError: the layer count or KV shape differs from this cache's.
        """
        if len(layer_kv) != self.layers:
            raise ValueError(f"source cache has {len(layer_kv)} layers, this draft has {self.layers}")
        k0 = layer_kv[0][0]
        if k0.shape[1] != self.kv_heads or k0.shape[-1] != self.head_dim:
            raise ValueError(f"source KV layout {tuple(k0.shape)} does not match (1, {self.kv_heads}, L, "
                             f"{self.head_dim})")
        n = k0.shape[-2] if n is None else min(n, k0.shape[-2])
        self.length = 0
        self.reserve(n)
        for i, (k, v) in enumerate(layer_kv):
            self.keys[i][:, :, :n].copy_(k[:, :, :n])
            self.values[i][:, :, :n].copy_(v[:, :, :n])
        self.length = n
        return n


# ----------------------------------------------------------------------------------------
# Disk cache of packed weights
# ----------------------------------------------------------------------------------------
#: Bump when the packed format changes (old files are then ignored, not misread).
PACKED_FORMAT = 1


def target_fingerprint(target: torch.nn.Module) -> str:
    """A short hash of the target's config and a strided sample of every weight (~0.1 s for
    135M parameters): a changed checkpoint gets a new packed-cache file."""
    h = hashlib.sha256(target.config.to_json_string(use_diff=False).encode())
    for name, p in target.state_dict().items():
        flat = p.detach().reshape(-1)
        h.update(name.encode())
        h.update(flat[:: max(1, flat.numel() // 4096)].float().numpy().tobytes())
    return h.hexdigest()[:16]


def packed_cache_path(cache_dir: str | Path, target: torch.nn.Module, variant: dict) -> Path:
    """``cache_dir/lean-draft-<fingerprint>-<variant hash>.pt``."""
    key = json.dumps({"format": PACKED_FORMAT, "torch": torch.__version__.split("+")[0], **variant}, sort_keys=True)
    vh = hashlib.sha256(key.encode()).hexdigest()[:12]
    return Path(cache_dir) / f"lean-draft-{target_fingerprint(target)}-{vh}.pt"


def _save_packed(path: Path, linears: list[list[PackedLinear]], head: PackedLinear) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        torch.save({"format": PACKED_FORMAT, "layers": [[l.state() for l in lin] for lin in linears],
                    "head": head.state()}, tmp)
        tmp.replace(path)
    except OSError as exc:  # a read-only data dir costs a re-quantization next start, nothing else
        log.warning("lean draft: cannot cache packed weights at %s: %s", path, exc)


def _load_packed(path: Path) -> tuple[list[list[PackedLinear]], PackedLinear] | None:
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        if state.get("format") != PACKED_FORMAT:
            return None
        return ([[PackedLinear.from_state(s) for s in lin] for lin in state["layers"]],
                PackedLinear.from_state(state["head"]))
    except Exception as exc:  # noqa: BLE001 - a corrupt cache file is rebuilt, never fatal
        log.warning("lean draft: ignoring unreadable packed cache %s: %s", path, exc)
        return None


# ----------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------
@dataclass
class _Layer:
    attn_norm: torch.Tensor
    qkv: PackedLinear
    o: PackedLinear
    mlp_norm: torch.Tensor
    gate_up: PackedLinear
    down: PackedLinear


def _cat_bias(*mods: torch.nn.Linear) -> torch.Tensor | None:
    if all(m.bias is None for m in mods):
        return None
    return torch.cat([m.bias if m.bias is not None else torch.zeros(m.out_features) for m in mods])


class LeanDraftModel:
    """A quantized copy of a Llama-style target with a gpt-fast-style forward.

    Args:
        target: the target's transformers model (``LlamaForCausalLM``-like: ``model.layers[i]``
            with ``self_attn.{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj``, RMSNorms, rotary
            embeddings, SiLU MLP). Its weights are read, not modified; the embedding is shared.
        quant: decoder linears: ``"int4"`` (default), ``"int8"`` or ``"dense"``.
        group_size: int4 group length (32 reproduces a Q4_1 GGUF's groups).
        head: LM head packing: ``"int8"`` (default), ``"int4"`` or ``"dense"``.
        act_dtype: matmul activation dtype (bfloat16: the packed kernels' fast path on CPU).
        kv_dtype: residual stream, norms, attention and KV cache dtype (float32 default).
        layers: keep only the first N decoder layers (None = all; fewer layers change the
            KV layout only in depth, the target's first N layers' K/V still apply).
        head_vocab: keep only the LM-head rows of ids ``< head_vocab`` (byte-level BPE ids
            are in merge order, so low ids are the frequent tokens; FR-Spec,
            arXiv:2502.14856, ranks by frequency instead); the others get ``-inf``. ``None``
            = the full vocabulary. Only with an int8 or dense head.
        cache_dir: where the packed weights are cached (one file per target fingerprint and
            variant, :func:`packed_cache_path`): a later start loads them in well under a
            second instead of quantizing again. ``None`` = no disk cache.
        threads: torch intra-op threads during a step (``None`` = leave as is). The
            packed kernels split tiny matmuls across threads; on a shared, oversubscribed
            2-core machine one thread can be faster (measure with evals/draft_cost.py).

    Raises:
        ValueError: the target is not a supported architecture (names what is missing),
            or an unknown quant kind.
    """

    def __init__(self, target: torch.nn.Module, *, quant: str = "int4", group_size: int = 32,
                 head: str = "int8", act_dtype: torch.dtype = torch.bfloat16,
                 kv_dtype: torch.dtype = torch.float32, layers: int | None = None,
                 head_vocab: int | None = None, cache_dir: str | Path | None = None,
                 threads: int | None = None) -> None:
        cfg = target.config
        if getattr(cfg, "hidden_act", "silu") != "silu":
            raise ValueError(f"lean draft supports SiLU MLPs only, not {cfg.hidden_act!r}")
        try:
            decoder = target.model
            blocks = decoder.layers
            rotary = decoder.rotary_emb
        except AttributeError as exc:
            raise ValueError(f"lean draft needs a Llama-style model (model.layers, model.rotary_emb): {exc}") from None
        if getattr(rotary, "rope_type", "default") not in ("default", "linear", "llama3", "yarn"):
            raise ValueError(f"lean draft does not support rope type {rotary.rope_type!r}")
        self.config = copy.deepcopy(cfg)
        self.config.num_hidden_layers = len(blocks) if layers is None else int(layers)
        if isinstance(getattr(self.config, "layer_types", None), list):
            self.config.layer_types = self.config.layer_types[: self.config.num_hidden_layers]
        self.num_heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.num_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.num_heads
        self.hidden = cfg.hidden_size
        self.eps = float(cfg.rms_norm_eps)
        self.quant, self.head_kind, self.group_size = quant, head, group_size
        self.act_dtype, self.kv_dtype = act_dtype, kv_dtype
        self.vocab_size = int(cfg.vocab_size)
        n = len(blocks) if layers is None else int(layers)
        if not 1 <= n <= len(blocks):
            raise ValueError(f"layers must be in 1..{len(blocks)}, got {n}")
        self.num_layers = n
        pk = {"kind": quant, "group_size": group_size, "act_dtype": act_dtype}
        for blk in list(blocks)[:n]:
            a = blk.self_attn
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                if not hasattr(a, name):
                    raise ValueError(f"lean draft needs self_attn.{name}")
            if getattr(a, "q_norm", None) is not None or getattr(a, "k_norm", None) is not None:
                raise ValueError("lean draft does not support q/k norms (Qwen3-style)")
        if head_vocab is not None and head_vocab < self.vocab_size and head == "int4":
            raise ValueError("a trimmed LM head needs head='int8' or 'dense'")
        variant = {"quant": quant, "group_size": group_size, "head": head, "act_dtype": str(act_dtype), "layers": n,
                       "head_vocab": head_vocab}
        path = packed_cache_path(cache_dir, target, variant) if cache_dir is not None else None
        packed = _load_packed(path) if path is not None else None
        with torch.no_grad():
            if packed is None:
                linears = []
                for blk in list(blocks)[:n]:
                    a, m = blk.self_attn, blk.mlp
                    linears.append([
                        PackedLinear(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
                                     _cat_bias(a.q_proj, a.k_proj, a.v_proj), **pk),
                        PackedLinear(a.o_proj.weight, a.o_proj.bias, **pk),
                        PackedLinear(torch.cat([m.gate_proj.weight, m.up_proj.weight]),
                                     _cat_bias(m.gate_proj, m.up_proj), **pk),
                        PackedLinear(m.down_proj.weight, m.down_proj.bias, **pk),
                    ])
                w, b = target.lm_head.weight, target.lm_head.bias
                if head_vocab is not None and head_vocab < self.vocab_size:
                    w, b = w[: int(head_vocab)], None if b is None else b[: int(head_vocab)]
                head_linear = PackedLinear(w, b, kind=head, group_size=group_size, act_dtype=act_dtype)
                if path is not None:
                    _save_packed(path, linears, head_linear)
            else:
                linears, head_linear = packed
            self.layers: list[_Layer] = [
                _Layer(attn_norm=blk.input_layernorm.weight.detach().to(kv_dtype), qkv=lin[0], o=lin[1],
                       mlp_norm=blk.post_attention_layernorm.weight.detach().to(kv_dtype), gate_up=lin[2],
                       down=lin[3])
                for blk, lin in zip(list(blocks)[:n], linears)]
            self.final_norm = decoder.norm.weight.detach().to(kv_dtype)
            self.lm_head = head_linear
            self.head_ids = None if head_linear.out_features >= self.vocab_size else \
                torch.arange(head_linear.out_features)  # a prefix: written as a slice
        self.embed = decoder.embed_tokens.weight  # shared with the target (row lookups only)
        self.inv_freq = rotary.inv_freq.detach().float().clone()
        self.attention_scaling = float(getattr(rotary, "attention_scaling", 1.0))
        self.intermediate = self.layers[0].gate_up.out_features // 2
        self._rope_cos = self._rope_sin = torch.empty(0)
        self.cache: LeanKVCache | None = None
        self.threads = threads

    # -- bookkeeping ---------------------------------------------------------------------
    @property
    def weight_bytes(self) -> int:
        """Bytes of packed weights read per step (decoder + LM head; the embedding row is negligible)."""
        return sum(l.qkv.nbytes + l.o.nbytes + l.gate_up.nbytes + l.down.nbytes for l in self.layers) + \
            self.lm_head.nbytes

    @property
    def length(self) -> int:
        """Positions (tokens) currently in the draft's KV cache."""
        return 0 if self.cache is None else self.cache.length

    @torch.inference_mode()
    def reset(self, capacity: int) -> None:
        """Start a request with an empty cache reserving ``capacity`` positions (tokens)."""
        self.cache = LeanKVCache(self.num_layers, self.kv_heads, self.head_dim, capacity, self.kv_dtype)

    @torch.inference_mode()
    def prefill_from_target_cache(self, target_cache: object, n_tokens: int | None = None,
                                  reserve: int = 256) -> int:
        """Start from the target's prompt K/V instead of a draft prefill (same layout).

        Args:
            target_cache: a transformers ``Cache`` (``.layers[i].keys/values``), a legacy
                tuple of ``(keys, values)`` per layer, or a list of such pairs; each
                ``(1, kv_heads, length, head_dim)``. Only the first ``num_layers`` are used.
            n_tokens: positions to copy (default: all the target has cached).
            reserve: extra positions (tokens) to reserve for the output.

        Returns:
            The number of positions now cached.
        """
        layers = getattr(target_cache, "layers", None)
        pairs = [(l.keys, l.values) for l in layers] if layers is not None else list(target_cache)
        pairs = pairs[: self.num_layers]
        n = pairs[0][0].shape[-2] if n_tokens is None else min(n_tokens, pairs[0][0].shape[-2])
        if self.cache is None or self.cache.capacity < n + reserve:
            self.reset(n + reserve)
        return self.cache.load_prefix(pairs, n)

    def crop(self, n: int) -> None:
        """Keep the first ``n`` cached positions (drop rejected drafted tokens)."""
        if self.cache is not None:
            self.cache.crop(n)

    def _rope(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        if end > self._rope_cos.shape[0]:
            size = max(end, 2 * self._rope_cos.shape[0], 1024)
            freqs = torch.arange(size, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
            emb = torch.cat([freqs, freqs], dim=-1)
            self._rope_cos = (emb.cos() * self.attention_scaling).to(self.kv_dtype)
            self._rope_sin = (emb.sin() * self.attention_scaling).to(self.kv_dtype)
        return self._rope_cos[start:end], self._rope_sin[start:end]

    # -- the forward ---------------------------------------------------------------------
    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(w.dtype)

    def forward_hidden(self, ids: torch.Tensor, start: int, kv_update) -> torch.Tensor:
        """See :meth:`_forward_hidden`; runs on :attr:`threads` intra-op threads when set."""
        before = torch.get_num_threads()
        switch = self.threads is not None and self.threads != before
        if switch:
            torch.set_num_threads(self.threads)
        try:
            return self._forward_hidden(ids, start, kv_update)
        finally:
            if switch:
                torch.set_num_threads(before)

    def _forward_hidden(self, ids: torch.Tensor, start: int, kv_update) -> torch.Tensor:
        """The decoder over ``ids`` (1-D int64, M tokens at positions ``start..start+M-1``).

        Args:
            kv_update: ``(layer, keys, values) -> (all_keys, all_values)``: writes the new
                ``(1, kv_heads, M, head_dim)`` keys/values after the cached ones and returns
                views of all ``start + M`` positions (a transformers ``Cache.update``).

        Returns:
            The final hidden states before the last norm, ``(M, hidden)`` in ``kv_dtype``.
        """
        m = ids.shape[0]
        end = start + m
        cos, sin = self._rope(start, end)
        cos, sin = cos[None], sin[None]  # (1, M, D)
        half = self.head_dim // 2
        h, kvh, d = self.num_heads, self.kv_heads, self.head_dim
        groups = h // kvh
        q_size, kv_size = h * d, kvh * d
        mask = None
        if m > 1:  # causal over the new positions; rows are (group, position) after the GQA fold
            pos = torch.arange(start, end)[:, None]
            mask = (torch.arange(end)[None, :] <= pos).repeat(groups, 1)
        x = self.embed[ids].to(self.kv_dtype)  # (M, hidden)
        for i, layer in enumerate(self.layers):
            qkv = layer.qkv(self._norm(x, layer.attn_norm)).to(self.kv_dtype)
            q = qkv[:, :q_size].view(m, h, d).transpose(0, 1)          # (H, M, D)
            k = qkv[:, q_size:q_size + kv_size].view(m, kvh, d).transpose(0, 1)
            v = qkv[:, q_size + kv_size:].view(m, kvh, d).transpose(0, 1)
            q = q * cos + torch.cat([-q[..., half:], q[..., :half]], dim=-1) * sin
            k = k * cos + torch.cat([-k[..., half:], k[..., :half]], dim=-1) * sin
            keys, values = kv_update(i, k[None], v[None])
            # Grouped-query attention without repeat_kv: fold each KV head's query heads
            # into its query rows, (1, kvh, groups*M, D) against (1, kvh, end, D).
            qg = q.reshape(1, kvh, groups * m, d)
            o = F.scaled_dot_product_attention(qg, keys, values, attn_mask=mask)
            o = o.view(h, m, d).transpose(0, 1).reshape(m, q_size)
            x = x + layer.o(o).to(self.kv_dtype)
            gu = layer.gate_up(self._norm(x, layer.mlp_norm))
            g, u = gu[:, : self.intermediate], gu[:, self.intermediate:]
            x = x + layer.down(F.silu(g) * u).to(self.kv_dtype)
        return x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head: ``(M, hidden)`` → float32 ``(M, vocab)`` (a trimmed head
        puts ``-inf`` on the ids it leaves out)."""
        out = self.lm_head(self._norm(hidden, self.final_norm)).float()
        if self.head_ids is None:
            return out
        full = torch.full((out.shape[0], self.vocab_size), float("-inf"))
        full[:, : out.shape[1]] = out
        return full

    @torch.inference_mode()
    def step(self, tokens: Sequence[int] | torch.Tensor, all_logits: bool = False) -> torch.Tensor:
        """Feed ``tokens`` after the cached positions; return the next-token logits.

        Args:
            tokens: M ≥ 1 token ids (a list or a 1-D int64 tensor).
            all_logits: return logits for every fed position (teacher forcing) instead of
                the last one.

        Returns:
            float32 logits, ``(vocab,)`` for the last position or ``(M, vocab)``.

        Raises:
            RuntimeError: no cache (call :meth:`reset` or :meth:`prefill_from_target_cache`).
        """
        if self.cache is None:
            raise RuntimeError("lean draft has no cache: call reset() or prefill_from_target_cache() first")
        ids = tokens if isinstance(tokens, torch.Tensor) else torch.tensor(list(tokens), dtype=torch.long)
        cache, start = self.cache, self.cache.length
        cache.reserve(start + ids.shape[0])
        x = self.forward_hidden(ids, start, cache.write)
        cache.length = start + ids.shape[0]
        logits = self.logits(x if all_logits else x[-1:])
        return logits if all_logits else logits[0]


# ----------------------------------------------------------------------------------------
# A transformers-like facade: the engine's DraftModelDrafter and calibration drive it
# ----------------------------------------------------------------------------------------
class LeanDraftLM(torch.nn.Module):
    """Wraps a :class:`LeanDraftModel` in the call convention of a transformers causal LM,
    so it can be the ``model`` of a :class:`~decoding.models.LoadedModel` draft:
    ``model(input_ids=(1, M) int64, cache=<transformers Cache>, use_cache=True,
    logits_to_keep=k)`` returns an object whose ``.logits`` is float32 ``(1, k or M, vocab)``.

    The cache is any transformers ``Cache`` whose ``update(keys, values, layer)`` writes
    after the cached positions and returns all of them
    (:class:`decoding.kv_cache.PreallocatedCache`: in place, cropped after rejections).
    ``config`` reports the target's KV layout and ``parameters()`` yields one float32
    anchor, so a drafter sees "same KV layout and dtype as the target" and starts from the
    target's prompt K/V (no draft prefill).

    Args:
        lean: the packed model.
        generation_config: the target's (the draft has no settings of its own).
    """

    def __init__(self, lean: LeanDraftModel, generation_config: object = None) -> None:
        super().__init__()
        self.lean = lean
        self.config = lean.config
        self.generation_config = generation_config
        self.anchor = torch.nn.Parameter(torch.zeros(1, dtype=lean.kv_dtype), requires_grad=False)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, cache: object = None, past_key_values: object = None,
                use_cache: bool = True, logits_to_keep: int = 0, **_: object) -> SimpleNamespace:
        """One pass over ``input_ids (1, M)`` after the cache's positions (see the class doc).

        Raises:
            ValueError: a batch larger than 1, or no cache.
        """
        cache = cache if cache is not None else past_key_values
        if cache is None:
            raise ValueError("the lean draft needs a KV cache (cache=PreallocatedCache(...))")
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"the lean draft runs one sequence at a time, got input_ids {tuple(input_ids.shape)}")
        start = cache.get_seq_length()
        x = self.lean.forward_hidden(input_ids[0], start, lambda i, k, v: cache.update(k, v, i))
        if logits_to_keep:
            x = x[-logits_to_keep:]
        return SimpleNamespace(logits=self.lean.logits(x)[None], past_key_values=cache)


# ----------------------------------------------------------------------------------------
# Calibration: does the draft pay at the working context?
# ----------------------------------------------------------------------------------------
#: Thresholds: a draft step at most 1 / 2.5 of the target's at the working context, and
#: agreement with the target on ≥ 80 % of a calibration answer's tokens. Issue 12 asked for
#: 1 / 1.8; since verification passes of a few tokens cost about one decode step
#: (:mod:`decoding.few_token_linear`), n-gram guesses verified in such passes cost ~0.6–0.9
#: of a step per token on generated spans, so a draft model at ~1 / 1.8 of a step per token
#: (98 % agreement) only ties with them. Measured with the embedded target, 10 questions per
#: set, six paired runs: with the draft attached at 1 / 1.74–1 / 2.15, our policy ran at
#: 0.89–1.08× the speed of n-gram drafting alone (median 0.92×). Below 1 / 2.5 the draft's
#: ~0.5 step per token would beat the n-gram guesses by ~20 %.
MIN_STEP_RATIO = 2.5
MIN_AGREEMENT = 0.80

_CALIBRATION_PASSAGE = (
    "[{n}] ELOG operations #{n}: dc-pool-0{m} went read-only after a disk failure in RAID set {m}. "
    "The shifter ran `pool disable -rdonly dc-pool-0{m}` in the dCache admin shell, opened GGUS "
    "ticket {t} and drained the transfers with `fts-set-priority --site T1_{m}`. After the rebuild "
    "finished, the domain was restarted with `systemctl restart dcache@dc-pool-0{m}Domain.service` "
    "and the pool was enabled again; checksums of the 312 files written during the incident were "
    "verified against the catalogue and two were re-transferred.\n"
)


def calibration_prompt(tokenizer: object, context_tokens: int) -> list[int]:
    """A built-in ops-log RAG prompt of about ``context_tokens`` tokens (chat template when
    the tokenizer has one), for calibrating without the copilot's store."""
    passages, n = [], 0
    while True:
        n += 1
        passages.append(_CALIBRATION_PASSAGE.format(n=n, m=n % 9 + 1, t=170000 + 37 * n))
        text = ("Answer from the passages and cite them as [n].\n\n" + "".join(passages) +
                "\nQuestion: how was the read-only pool brought back, step by step?")
        msgs = [{"role": "user", "content": text}]
        try:
            out = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            ids = list(out["input_ids"] if hasattr(out, "keys") else out)  # transformers 5: a BatchEncoding
            if ids and isinstance(ids[0], list):
                ids = ids[0]
        except Exception:  # noqa: BLE001 - no chat template: plain text
            ids = tokenizer.encode(text)
        if len(ids) >= context_tokens or n > 200:
            return [int(i) for i in ids]


@dataclass
class DraftCalibration:
    """What :func:`measure_lean_draft` found at the working context.

    Attributes:
        accept: the draft pays (both thresholds met).
        reason: one line for the log, ``/readyz`` and ``copilot config``.
        target_ms, draft_ms: median one-token step times (ms), measured interleaved.
        ratio: median of the paired ``target_ms / draft_ms`` ratios.
        agreement: teacher-forced top-1 agreement on the calibration answer, in [0, 1].
        context_tokens: positions in the cache while timing (tokens).
    """

    accept: bool
    reason: str
    target_ms: float
    draft_ms: float
    ratio: float
    agreement: float
    context_tokens: int


@torch.inference_mode()
def measure_lean_draft(target: torch.nn.Module, lean: LeanDraftModel, prompt_ids: Sequence[int],
                       answer_tokens: int = 32, repeats: int = 15, min_ratio: float = MIN_STEP_RATIO,
                       min_agreement: float = MIN_AGREEMENT) -> DraftCalibration:
    """Time the draft's step against the target's at ``len(prompt_ids)`` tokens of context
    and measure their agreement on the target's greedy answer to ``prompt_ids``.

    The target prefills ``prompt_ids[:-1]`` once (a :class:`~decoding.kv_cache.PreallocatedCache`);
    the draft copies that K/V (:meth:`LeanDraftModel.prefill_from_target_cache`). Timing:
    ``repeats`` A/B pairs of one-token steps, each cropped back (medians; a noisy shared CPU
    moves both alike). Agreement: ``answer_tokens`` greedy target steps, the draft fed the
    same tokens one at a time, argmax compared at each position.

    Args:
        target: the target's transformers model (fp32 on CPU for the embedded default).
        lean: the draft (its cache is replaced).
        prompt_ids: a prompt at the working context (≥ 2 tokens; ~1,000–1,400 for RAG).

    Returns:
        A :class:`DraftCalibration`; ``accept`` iff ratio ≥ ``min_ratio`` and agreement ≥
        ``min_agreement``.
    """
    from decoding.kv_cache import PreallocatedCache, crop_cache

    ids = [int(t) for t in prompt_ids]
    if len(ids) < 2:
        raise ValueError("calibration needs a prompt of at least 2 tokens")
    c = len(ids) - 1
    cache = PreallocatedCache(c + answer_tokens + 8)
    target(input_ids=torch.tensor([ids[:-1]]), cache=cache, use_cache=True, logits_to_keep=1)
    lean.prefill_from_target_cache(cache, c, reserve=answer_tokens + 8)
    step_in = torch.tensor([[ids[-1]]])
    t_ms, d_ms = [], []
    for r in range(repeats + 2):
        t0 = time.perf_counter()
        target(input_ids=step_in, cache=cache, use_cache=True, logits_to_keep=1)
        t1 = time.perf_counter()
        crop_cache(cache, c)
        lean.step([ids[-1]])
        t2 = time.perf_counter()
        lean.crop(c)
        if r >= 2:  # warm-up
            t_ms.append((t1 - t0) * 1e3)
            d_ms.append((t2 - t1) * 1e3)
    ratio = sorted(a / b for a, b in zip(t_ms, d_ms))[len(t_ms) // 2]
    hits, fed = 0, ids[-1]
    for _ in range(answer_tokens):
        nxt = int(target(input_ids=torch.tensor([[fed]]), cache=cache, use_cache=True,
                         logits_to_keep=1).logits[0, -1].argmax())
        hits += int(int(lean.step([fed]).argmax()) == nxt)
        fed = nxt
    agreement = hits / answer_tokens
    t_med, d_med = sorted(t_ms)[len(t_ms) // 2], sorted(d_ms)[len(d_ms) // 2]
    accept = ratio >= min_ratio and agreement >= min_agreement
    verdict = "pays" if accept else "does not pay"
    reason = (f"derived:int4 {verdict} at {c} tokens of context: step {d_med:.1f} ms vs target {t_med:.1f} ms "
              f"({ratio:.2f}x cheaper, need >= {min_ratio}x), agreement {agreement:.0%} on {answer_tokens} "
              f"answer tokens (need >= {min_agreement:.0%})")
    lean.cache = None
    return DraftCalibration(accept, reason, t_med, d_med, ratio, agreement, c)


def calibrate_lean_draft(target: LoadedModel, lean: LeanDraftModel, prompt_ids: Sequence[int] | None = None,
                         context_tokens: int = 1200, **kwargs: object) -> tuple[bool, str]:
    """``(accept, reason)`` of :func:`measure_lean_draft` at the working context.

    Args:
        target: the target :class:`~decoding.models.LoadedModel`.
        prompt_ids: a real RAG prompt; ``None`` = :func:`calibration_prompt` of
            ``context_tokens`` tokens (~1,200: the copilot's working context).
        kwargs: passed to :func:`measure_lean_draft` (``answer_tokens``, ``repeats``,
            ``min_ratio``, ``min_agreement``).
    """
    ids = list(prompt_ids) if prompt_ids is not None else calibration_prompt(target.tokenizer, context_tokens)
    result = measure_lean_draft(target.model, lean, ids, **kwargs)
    return result.accept, result.reason


# ----------------------------------------------------------------------------------------
# Building in the background (serve with n-gram drafting meanwhile)
# ----------------------------------------------------------------------------------------
class LeanDraftLoader:
    """Builds the ``derived:int4`` draft (packing, or loading the packed cache) and
    calibrates it in a daemon thread, so a server answers with n-gram drafting meanwhile.

    Args:
        target: the target :class:`~decoding.models.LoadedModel`.
        cache_dir: where packed weights are cached (the data dir's model folder).
        calibrate: run :func:`measure_lean_draft` and keep the draft only if it pays.
        prompt_ids: calibration prompt (``None`` = built-in, ``context_tokens`` long).
        context_tokens: the working context to calibrate at (tokens).
        variant: :class:`LeanDraftModel` keyword arguments (default: :data:`DEFAULT_VARIANT`).
        require_pay: keep the draft only when its calibration pays (else: keep it whatever
            the calibration says, which is still measured and reported).

    After :meth:`start`: :meth:`ready` is True once a draft that pays is available as
    :attr:`draft` (a :class:`~decoding.models.LoadedModel` wrapping :class:`LeanDraftLM`);
    :meth:`done` once the attempt finished either way; :attr:`reason` says why not (also
    logged), :attr:`calibration` holds the numbers.
    """

    def __init__(self, target: LoadedModel, cache_dir: str | Path | None = None, *, calibrate: bool = True,
                 prompt_ids: Sequence[int] | None = None, context_tokens: int = 1200,
                 variant: dict | None = None, require_pay: bool = True) -> None:
        self.target, self.cache_dir, self.do_calibrate = target, cache_dir, calibrate
        self.require_pay = require_pay
        self.prompt_ids, self.context_tokens = prompt_ids, context_tokens
        self.variant = dict(DEFAULT_VARIANT if variant is None else variant)
        self.draft: LoadedModel | None = None
        self.calibration: DraftCalibration | None = None
        self.reason = "derived:int4: not started"
        self.build_s: float | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LeanDraftLoader:
        """Start the background build (once); returns self."""
        if self._thread is None:
            self.reason = "derived:int4: building"
            self._thread = threading.Thread(target=self._run, name="lean-draft-build", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        try:
            t0 = time.perf_counter()
            loaded = build_lean_draft(self.target, self.cache_dir, **self.variant)
            self.build_s = time.perf_counter() - t0
            if self.do_calibrate:
                ids = self.prompt_ids or calibration_prompt(self.target.tokenizer, self.context_tokens)
                self.calibration = measure_lean_draft(self.target.model, loaded.model.lean, ids)
                self.reason = self.calibration.reason
                if not self.calibration.accept and self.require_pay:
                    log.info("%s: no draft model", self.reason)
                    return
            else:
                self.reason = "derived:int4 loaded (not calibrated)"
            self.draft = loaded
            log.info("%s (built in %.1f s)", self.reason, self.build_s)
        except Exception as exc:  # noqa: BLE001 - any failure means "no draft", said why, serving goes on
            self.reason = f"derived:int4 unavailable: {type(exc).__name__}: {exc}"
            log.warning("%s", self.reason)
        finally:
            self._done.set()

    def done(self) -> bool:
        """The attempt finished (with or without a draft)."""
        return self._done.is_set()

    def ready(self) -> bool:
        """A draft that pays is available as :attr:`draft`."""
        return self._done.is_set() and self.draft is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until done (or ``timeout`` seconds); returns :meth:`ready`."""
        self._done.wait(timeout)
        return self.ready()


#: The ``derived:int4`` recipe (see evals/draft_cost.py for the measurements behind it).
#: One thread: on the shared 2-core CPU the packed int4 kernel's 2-thread split collapses
#: under contention (1,183 ms vs 76 ms on one thread at 1,200 tokens, same run), and one
#: thread still costs only ~1.25x the 2-thread step when the machine is quiet.
DEFAULT_VARIANT: dict = {"quant": "int4", "group_size": 32, "head": "int8", "threads": 1}


def build_lean_draft(target: LoadedModel, cache_dir: str | Path | None = None, **variant: object) -> LoadedModel:
    """The lean draft as a :class:`~decoding.models.LoadedModel` (model: :class:`LeanDraftLM`,
    the target's tokenizer), packed from the target's weights or loaded from ``cache_dir``.

    Raises:
        ValueError: the target's architecture is not supported (see :class:`LeanDraftModel`).
    """
    from decoding.models import LoadedModel

    kwargs = {**DEFAULT_VARIANT, **variant}
    lean = LeanDraftModel(target.model, cache_dir=cache_dir, **kwargs)
    model = LeanDraftLM(lean, getattr(target.model, "generation_config", None))
    return LoadedModel(model, target.tokenizer, f"{target.name} (lean int4 draft)")
