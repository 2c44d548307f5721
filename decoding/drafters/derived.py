"""Draft models derived from the target when no smaller same-family model is available.

Three derivations, all with the target's tokenizer (so the vocabulary check passes):

- ``derived:layers:N`` — the target's first N decoder layers + final norm + LM head,
  sharing the target's weights (no copy): self-speculative decoding, Zhang et al. 2023
  (arXiv:2309.08168), without its layer search. Its KV layout differs from the target's,
  so it keeps a KV cache of its own and prefills the prompt itself.
- ``derived:int8`` — a copy with int8 weight-only linears (torchao
  ``Int8WeightOnlyConfig``); the target's KV layout and dtype, so it drafts over the
  target's own KV cache (no prefill, no copy).
- ``derived:int4`` — the target's decoder linears packed as int4 (groups of 32: the
  embedded SmolLM2's own Q4_1 groups), LM head int8, run by a gpt-fast-style forward with
  no transformers module stack (:mod:`decoding.drafters.lean`; torch's own packed kernels,
  no torchao). The target's KV layout and dtype, so it drafts over the target's KV cache.
  Packed weights are cached under ``cache_dir``. Whether it pays is measured at the
  working context: :func:`decoding.drafters.lean.measure_lean_draft`, run by
  :class:`decoding.drafters.lean.LeanDraftLoader` (``evals/draft_cost.py`` has the numbers).

Measured on the 2-core CPU (see ``copilot eval latency``): ``derived:layers:N`` and
``derived:int8`` are not cheaper enough than the fp32 target to pay. The default
draft-model setting is :data:`AUTO_DRAFT` (:mod:`decoding.build`): on a CPU the
``derived:int4`` draft is built in the background and kept only when its calibration pays;
without a draft model the policy decodes plainly when the n-gram drafter has nothing.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from decoding.backends.models import LoadedModel
from decoding.backends.quiet import quiet_torchao

DERIVED_PREFIX = "derived:"
#: The draft-model setting that plans the draft model from the target and the device
#: (:func:`decoding.build.auto_draft_plan`).
AUTO_DRAFT = "auto"
#: The lean packed-int4 draft (:mod:`decoding.drafters.lean`), calibrated when it is built.
LEAN_DRAFT = "derived:int4"


def derive_draft(target: LoadedModel, spec: str, cache_dir: str | Path | None = None) -> LoadedModel:
    """Build the draft named by ``spec`` (``derived:int4``, ``derived:int8`` or ``derived:layers:N``).

    ``cache_dir``: where ``derived:int4`` caches its packed weights (``None`` = none).

    Raises:
        ValueError: an unknown spec, or N outside 1..num_hidden_layers, or ``derived:int4``
            on a target that is not Llama-style (the message says what is missing).
        ImportError: ``derived:int8`` without torchao installed (it is optional, and the
            int8 copy does not pay on CPU). torchao is imported here only, quietly
            (:func:`decoding.backends.quiet.quiet_torchao`).
    """
    kind = spec.removeprefix(DERIVED_PREFIX)
    if kind == "int4":
        from decoding.drafters.lean import build_lean_draft

        return build_lean_draft(target, cache_dir)
    if kind == "int8":
        return _int8_copy(target)
    if kind.startswith("layers:"):
        try:
            n = int(kind.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"bad draft spec {spec!r}: expected derived:layers:N with an integer N") from None
        return _first_layers(target, n)
    raise ValueError(f"unknown derived draft {spec!r}: use derived:int4, derived:int8 or derived:layers:N")


def _first_layers(target: LoadedModel, n: int) -> LoadedModel:
    total = target.model.config.num_hidden_layers
    if not 1 <= n <= total:
        raise ValueError(f"derived:layers:{n}: N must be in 1..{total}")
    config = copy.deepcopy(target.model.config)
    config.num_hidden_layers = n
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:n]
    with torch.device("meta"):
        draft = AutoModelForCausalLM.from_config(config, dtype=target.dtype)
    # Share the target's modules: no weight copy.
    draft.model.embed_tokens = target.model.model.embed_tokens
    draft.model.layers = torch.nn.ModuleList(target.model.model.layers[:n])
    draft.model.norm = target.model.model.norm
    draft.model.rotary_emb = target.model.model.rotary_emb
    draft.lm_head = target.model.lm_head
    draft.generation_config = target.model.generation_config
    return LoadedModel(draft.eval(), target.tokenizer, f"{target.name} (first {n} layers)")


def _int8_copy(target: LoadedModel) -> LoadedModel:
    try:
        with quiet_torchao():
            from torchao.quantization import Int8WeightOnlyConfig, quantize_
    except ImportError as exc:
        raise ImportError("derived:int8 needs torchao: pip install --no-deps torchao==0.18.0") from exc

    draft = copy.deepcopy(target.model)
    quantize_(draft, Int8WeightOnlyConfig(), filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear))
    return LoadedModel(draft.eval(), target.tokenizer, f"{target.name} (int8 weight-only)")
