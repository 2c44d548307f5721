"""Engine assembly, written once: which draft model a configuration gets, load the target and
that draft model, build the engine.

The service (:class:`copilot.model_host.ModelHost`, and through it the CLI) and the evals
(:func:`evals.harness.replay_setup`) build their engines here (:func:`build_engine`). A draft-model
setting is empty (none: the n-gram drafter alone), a model to load with the target (an embedded
name, a Hugging Face id or local path, ``derived:int8``, ``derived:layers:N``), ``derived:int4``
(:mod:`decoding.drafters.lean`: built and calibrated after start-up, :func:`lean_draft_loader`, and
attached with :meth:`~decoding.engine.SpeculativeEngine.attach_draft` whatever the calibration
says) or ``auto``:

- the embedded Qwen2.5-Coder 0.5B for the embedded 1.5B target (same family, same tokenizer);
- on a CPU otherwise ``derived:int4``, built in the background while the engine serves with
  n-gram drafting, and attached only when its calibration at the working context shows it
  pays (:data:`~decoding.drafters.lean.calibration.MIN_STEP_RATIO`,
  :data:`~decoding.drafters.lean.calibration.MIN_AGREEMENT`);
- none elsewhere.

The functions take the settings' values as arguments; the service (``copilot``) and the
evals call them with theirs.
"""

from __future__ import annotations

import logging
from pathlib import Path

from decoding.backends.embedded import QWEN_CODER_05B, QWEN_CODER_15B, find_embedded
from decoding.backends.models import LoadedModel, LoadOptions, load_model, load_target, resolve_device
from decoding.backends.target import Target
from decoding.core import DEFAULT_ENGINE_CONFIG, EngineConfig
from decoding.drafters.derived import AUTO_DRAFT, DERIVED_PREFIX, LEAN_DRAFT, derive_draft
from decoding.drafters.lean.calibration import MIN_AGREEMENT, MIN_STEP_RATIO
from decoding.drafters.lean.loader import LeanDraftLoader
from decoding.engine import SpeculativeEngine

log = logging.getLogger(__name__)


def auto_draft_plan(draft_model: str, target_model: str, device: str, backend: str = "torch") -> str | None:
    """What ``draft_model = "auto"`` uses for ``target_model`` on ``device`` (``"auto"``,
    ``"cpu"``, ``"cuda:0"``...) and the target's ``backend``: the embedded 0.5B name,
    :data:`LEAN_DRAFT` or ``None`` (none). ``None`` also when ``draft_model`` is not ``"auto"``,
    and on the llama.cpp backend: there a verification pass over k tokens costs about k/2
    one-token steps and the 0.5B's step half the 1.5B's, so no draft model pays
    (``evals/results/README.md``, "llama.cpp backend")."""
    if draft_model != AUTO_DRAFT or backend != "torch":
        return None
    if find_embedded(target_model) is QWEN_CODER_15B:
        return QWEN_CODER_05B.name
    return LEAN_DRAFT if resolve_device(device).type == "cpu" else None


def draft_model_plan(draft_model: str | None, target_model: str, device: str, backend: str = "torch") -> str:
    """One line for ``copilot config``: which draft model will be loaded and how."""
    if not draft_model:
        return "none (no draft model is configured): the n-gram drafter alone"
    if draft_model != AUTO_DRAFT:
        return f"{draft_model}, loaded at start"
    if backend != "torch":
        return (f"auto: none on the {backend} backend (no draft model pays there: evals/results/README.md): the "
                "n-gram drafter alone")
    plan = auto_draft_plan(draft_model, target_model, device)
    if plan == LEAN_DRAFT:
        return ("auto: derived:int4 built in the background at start (n-gram drafting meanwhile) and kept "
                f"only if its calibration shows it >= {MIN_STEP_RATIO}x cheaper per step than the target and "
                f"agreeing on >= {MIN_AGREEMENT:.0%} of tokens; the outcome is logged and in /readyz")
    if plan:
        return f"auto: {plan} (same family and tokenizer), loaded at start"
    return "auto: none on this device (derived:int4 is a CPU recipe): the n-gram drafter alone"


def load_draft(draft_model: str, target: Target, *, target_model: str, device: str, dtype: str,
               cache_dir: str | Path) -> LoadedModel | None:
    """The draft model to load with the target: none, one derived from the target, the
    same-family embedded draft (``auto`` with the embedded 1.5B target) or any HF id/path.
    ``derived:int4`` (asked for, or what ``auto`` plans) is ``None`` here: it is built by
    :func:`lean_draft_loader` instead, which calibrates it.

    Args:
        draft_model: the draft-model setting.
        target: the loaded target (derived drafts are made from it).
        target_model, device, dtype: the target's settings (``auto`` plans from them; a
            model is loaded with them).
        cache_dir: where models are cached (and ``derived:`` packed weights).

    Raises:
        decoding.backends.embedded.ModelLoadError: the draft model cannot be loaded.
        ValueError: an unknown ``derived:`` spec, or one asked of a target that is not a torch model.
    """
    spec = auto_draft_plan(draft_model, target_model, device, target.backend) if draft_model == AUTO_DRAFT \
        else draft_model
    if spec and spec.startswith(DERIVED_PREFIX) and not isinstance(target, LoadedModel):
        raise ValueError(f"draft_model {spec!r} is derived from a torch target's weights; the target runs on "
                         f"{target.backend}: leave draft_model empty or auto, or name a model")
    if not spec or spec == LEAN_DRAFT:
        return None
    if spec.startswith(DERIVED_PREFIX):
        assert isinstance(target, LoadedModel)
        return derive_draft(target, spec, cache_dir=cache_dir)
    return load_model(spec, device=device, dtype=dtype, cache_dir=cache_dir)


def lean_draft_loader(draft_model: str, target: Target, *, target_model: str, device: str,
                      cache_dir: str | Path | None) -> LeanDraftLoader | None:
    """The ``derived:int4`` build this setting asks for (not started), or ``None``: for
    ``auto`` (when it plans ``derived:int4``) one that keeps the draft only when its
    calibration pays; for ``derived:int4`` one that keeps it whatever the calibration says
    (asked for explicitly). Always ``None`` for a target that is not a torch model."""
    if not isinstance(target, LoadedModel):
        return None
    explicit = draft_model == LEAN_DRAFT
    if not explicit and auto_draft_plan(draft_model, target_model, device) != LEAN_DRAFT:
        return None
    return LeanDraftLoader(target, cache_dir, require_pay=not explicit)


def attach_when_ready(engine: SpeculativeEngine, loader: LeanDraftLoader, label: str) -> None:
    """Block until ``loader`` is done; attach its draft to ``engine`` with its measured step
    cost and agreement (the policy's prior for it) when it has a calibrated one, and log the
    outcome under ``label`` (the draft-model setting)."""
    draft = loader.draft if loader.wait() else None
    if draft is not None and loader.calibration is not None:
        engine.attach_draft(draft, loader.calibration.draft_ms, agreement=loader.calibration.agreement)
    log.info("draft model (%s): %s", label, loader.reason)


def build_engine(target_model: str, draft_model: str, load: LoadOptions,
                 config: EngineConfig = DEFAULT_ENGINE_CONFIG) -> SpeculativeEngine:
    """The engine over ``target_model`` with the draft model ``draft_model`` names.

    Args:
        target_model: a Hugging Face id, a local folder, a GGUF file or an embedded model.
        draft_model: the draft-model setting (``""`` none, ``"auto"``, ``"derived:..."`` or a
            model; :func:`load_draft`).
        load: how the target (and a draft model, on the same device and dtype) is loaded.
        config: the engine's knobs.

    Raises:
        ModelLoadError: the target or the draft cannot be loaded.
        ValueError: an unknown backend or ``derived:`` spec (:func:`~decoding.backends.models.resolve_backend`,
            :func:`load_draft`).
    """
    target = load_target(target_model, load)
    draft = load_draft(draft_model, target, target_model=target_model, device=load.device, dtype=load.dtype,
                       cache_dir=load.cache_dir)
    return SpeculativeEngine(target, draft, config)
