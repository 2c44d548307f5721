"""Engine assembly, written once: load the target and its draft model, build the engine.

The service (:class:`copilot.model_host.ModelHost`, and through it the CLI) and the evals
(:func:`evals.harness.replay_setup`) build their engines here. A ``derived:int4`` draft is not
loaded here: it is built and calibrated after start-up (:func:`decoding.drafters.plan.lean_draft_loader`)
and attached with :meth:`~decoding.engine.SpeculativeEngine.attach_draft`.
"""

from __future__ import annotations

from decoding.backends.models import LoadOptions, load_target
from decoding.core import DEFAULT_ENGINE_CONFIG, EngineConfig
from decoding.drafters.plan import load_draft
from decoding.engine import SpeculativeEngine


def build_engine(target_model: str, draft_model: str, load: LoadOptions,
                 config: EngineConfig = DEFAULT_ENGINE_CONFIG) -> SpeculativeEngine:
    """The engine over ``target_model`` with the draft model ``draft_model`` names.

    Args:
        target_model: a Hugging Face id, a local folder, a GGUF file or an embedded model.
        draft_model: the draft-model setting (``""`` none, ``"auto"``, ``"derived:..."`` or a
            model; :func:`decoding.drafters.plan.load_draft`).
        load: how the target (and a draft model, on the same device and dtype) is loaded.
        config: the engine's knobs.

    Raises:
        ModelLoadError: the target or the draft cannot be loaded.
        ValueError: an unknown backend or ``derived:`` spec (:func:`~decoding.backends.models.resolve_backend`,
            :func:`~decoding.drafters.plan.load_draft`).
    """
    target = load_target(target_model, load)
    draft = load_draft(draft_model, target, target_model=target_model, device=load.device, dtype=load.dtype,
                       cache_dir=load.cache_dir)
    return SpeculativeEngine(target, draft, config)
