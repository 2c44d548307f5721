"""Exact speculative decoding: token ids in, token ids out.

This package knows nothing of retrieval. The engine (:mod:`decoding.engine`)
verifies proposals from a list of drafters (:mod:`decoding.drafters.base` is the interface;
:mod:`decoding.drafters.ngram` and :mod:`decoding.drafters.draft_model` the built-in ones)
chosen per round by a cost-aware policy (:mod:`decoding.planning.policy`), and commits exactly
what plain greedy decoding of the target model would emit (or, when sampling, a sample
from the target's own distribution).
"""

from decoding.backends.quiet import quiet_torchao

# transformers imports torchao (when installed) with its model code, and torchao prints its
# CUDA-extension load failures and torch's register_constant deprecation warnings at import:
# import that code once here, quietly, before anything else pulls it in.
with quiet_torchao():
    import transformers.modeling_utils  # noqa: E402,F401

from decoding.config import Budget, GenerationConfig, Sampling, Speculation, SpeculationMode  # noqa: E402
from decoding.drafters.base import Draft, Drafter, DraftingMode, DraftRequest, Offer  # noqa: E402
from decoding.engine import SpeculativeEngine  # noqa: E402
from decoding.request import GenerationResult  # noqa: E402

__all__ = ["Budget", "Draft", "Drafter", "DraftingMode", "DraftRequest", "GenerationConfig", "GenerationResult",
           "Offer", "Sampling", "SpeculativeEngine", "Speculation", "SpeculationMode"]
