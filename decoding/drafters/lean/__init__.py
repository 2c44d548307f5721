"""A lean, quantized copy of a Llama-family target as a draft model (gpt-fast style).

Why: a quantized copy of the target agrees with it on almost every token, but run
through the transformers module stack its one-token step costs *more* than the fp32
target's at the RAG working context (47 ms vs 42.5 ms at 1,200 tokens on 2 CPU
threads, issue 12): per step it pays for ~30 layers × dozens of Python modules, hooks,
mask builders and dtype conversions, while its int4 weights need only ~3 ms of memory
bandwidth. Here the draft's forward is a dozen tensor ops per layer called directly.

One module per job:

- :mod:`~decoding.drafters.lean.quantize` — the packed linears (int4 groups, int8 rows, dense).
  Decoder linears are int4 in groups of 32 (the embedded SmolLM2's own Q4_1 groups); the
  LM head is int8 per channel (int4 there costs agreement: 74 % vs 97 %, issue 12); the
  embedding is the target's own tensor (a row lookup, shared, no copy).
- :mod:`~decoding.drafters.lean.disk_cache` — packed weights cached per target fingerprint.
- :mod:`~decoding.drafters.lean.model` — :class:`LeanDraftModel`, its forward, called like a
  transformers causal LM over a transformers ``Cache``. On this AVX2 CPU the packed
  kernels are fast only with bfloat16 activations (fp32 input falls back to a scalar path
  ~10× slower), so the matmuls run in bfloat16 while the residual stream, norms and
  attention stay in float32, the target's KV dtype: the draft attends over the target's
  own KV cache (:mod:`decoding.drafters.draft_model`).
- :mod:`~decoding.drafters.lean.calibration` — whether it pays at the working context.
- :mod:`~decoding.drafters.lean.loader` — building it, at once or on a background thread.

Which draft the copilot uses when (``auto``, ``derived:int4``, a model id) is planned in
:mod:`decoding.build`.

Speculative decoding itself (the target verifies, so the output is the target's
greedy / sampled output whatever this draft proposes): Leviathan et al. 2023
(arXiv:2211.17192). Sharing the target's prompt KV with a cheaper draft at long context:
MagicDec (arXiv:2408.11049).
"""

from decoding.drafters.lean.calibration import (
    MIN_AGREEMENT,
    MIN_STEP_RATIO,
    DraftCalibration,
    PayThresholds,
    measure_lean_draft,
)
from decoding.drafters.lean.disk_cache import PACKED_FORMAT, packed_cache_path, target_fingerprint
from decoding.drafters.lean.loader import DEFAULT_VARIANT, LeanDraftLoader, build_lean_draft
from decoding.drafters.lean.model import LeanDraftModel, LeanDraftOutput, LeanVariant, check_supported
from decoding.drafters.lean.quantize import QUANT_KINDS, PackedLinear, quantize_int4_groups, quantize_int8_rows
from decoding.planning.calibration import calibration_prompt

__all__ = ["DEFAULT_VARIANT", "MIN_AGREEMENT", "MIN_STEP_RATIO", "PACKED_FORMAT", "QUANT_KINDS", "DraftCalibration",
           "PayThresholds", "LeanDraftLoader", "LeanDraftModel", "LeanDraftOutput", "LeanVariant", "PackedLinear",
           "build_lean_draft",
           "calibration_prompt", "check_supported", "measure_lean_draft", "packed_cache_path",
           "quantize_int4_groups", "quantize_int8_rows", "target_fingerprint"]
