"""Packed linear layers of the lean draft: int4 groups, int8 rows or dense (gpt-fast ``quantize.py``).

- ``int4``: 4-bit asymmetric groups of ``group_size`` along the input dimension (a scale
  and a zero per group), multiplied by ``torch.ops.aten._weight_int4pack_mm_for_cpu``. The
  embedded SmolLM2 target is a dequantized Q4_1 GGUF (groups of 32, scale + min), so at
  group size 32 the int4 codes reproduce its decoder weights exactly; only the scales are
  rounded to the activation dtype.
- ``int8``: per-output-channel symmetric int8, ``torch.ops.aten._weight_int8pack_mm``.
- ``dense``: the weights as they are, in the activation dtype (a reference / fallback).
"""

from __future__ import annotations

from typing import Any

import torch

QUANT_KINDS = ("int4", "int8", "dense")
INT4_GROUP_SIZES = (32, 64, 128, 256)

#: What :meth:`PackedLinear.state` returns: tensors and metadata, loadable with
#: ``torch.load(weights_only=True)``.
PackedState = dict[str, Any]


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
        self.out_features, self.in_features = int(w.shape[0]), int(w.shape[1])
        self.kind, self.group_size, self.act_dtype = kind, group_size, act_dtype
        self.bias = None if bias is None else bias.detach().to(act_dtype)
        self.scales: torch.Tensor | None = None
        if kind == "int4":
            if group_size not in INT4_GROUP_SIZES or self.in_features % group_size:
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

    def state(self) -> PackedState:
        """The packed tensors and their metadata (for :meth:`from_state` / the disk cache)."""
        return {"kind": self.kind, "group_size": self.group_size, "act_dtype": str(self.act_dtype),
                "shape": (self.out_features, self.in_features), "weight": self.weight, "scales": self.scales,
                "bias": self.bias}

    @classmethod
    def from_state(cls, state: PackedState) -> PackedLinear:
        """Rebuild from :meth:`state` without quantizing again."""
        self = cls.__new__(cls)
        self.kind, self.group_size = str(state["kind"]), int(state["group_size"])
        self.act_dtype = getattr(torch, str(state["act_dtype"]).removeprefix("torch."))
        self.out_features, self.in_features = (int(n) for n in state["shape"])
        self.weight, self.scales, self.bias = state["weight"], state["scales"], state["bias"]
        return self

    @property
    def nbytes(self) -> int:
        """Bytes of packed weight + scales (+ bias) read per call."""
        tensors = [t for t in (self.weight, self.scales, self.bias) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.act_dtype)
        y: torch.Tensor
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


def quantize_int8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: ``w ≈ codes * scales[:, None]``.

    Returns:
        ``(codes int8 (N, K), scales float32 (N,))``.
    """
    scales = (w.float().abs().amax(dim=1) / 127).clamp(min=1e-12)
    codes = (w.float() / scales[:, None]).round().clamp(-127, 127).to(torch.int8)
    return codes.contiguous(), scales
