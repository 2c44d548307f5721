"""Exact speculative decoding: token ids in, token ids out.

This package knows nothing of retrieval. The engine (:mod:`decoding.engine`)
verifies proposals from drafters (:mod:`decoding.ngram_drafter`,
:mod:`decoding.draft_model_drafter`) chosen per round by a cost-aware policy
(:mod:`decoding.policy`), and commits exactly what plain greedy decoding of the
target model would emit (or, when sampling, a sample from the target's own
distribution).
"""

from decoding.config import GenerationConfig
from decoding.engine import GenerationResult, SpeculativeEngine

__all__ = ["GenerationConfig", "GenerationResult", "SpeculativeEngine"]
