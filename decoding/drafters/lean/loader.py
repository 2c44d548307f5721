"""Building the ``derived:int4`` draft: at once (:func:`build_lean_draft`), or packed and
calibrated on a daemon thread while a server answers with n-gram drafting
(:class:`LeanDraftLoader`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from decoding.backends.models import LoadedModel
from decoding.drafters.lean.calibration import CalibrationCancelled, DraftCalibration, measure_lean_draft
from decoding.drafters.lean.model import LeanDraftModel, LeanVariant
from decoding.planning.calibration import calibration_prompt

log = logging.getLogger(__name__)

#: The ``derived:int4`` recipe: int4 decoder linears in groups of 32, an int8 LM head (see
#: evals/draft_cost.py for the measurements behind it). One thread: on the shared 2-core CPU the
#: packed int4 kernel's 2-thread split collapses under contention (1,183 ms vs 76 ms on one
#: thread at 1,200 tokens, same run), and one thread still costs only ~1.25x the 2-thread step
#: when the machine is quiet.
DEFAULT_VARIANT = LeanVariant(quant="int4", group_size=32, head="int8", threads=1)


def build_lean_draft(target: LoadedModel, cache_dir: str | Path | None = None,
                     variant: LeanVariant = DEFAULT_VARIANT) -> LoadedModel:
    """The lean draft as a :class:`~decoding.backends.models.LoadedModel` (model: a
    :class:`~decoding.drafters.lean.model.LeanDraftModel`, the target's tokenizer), packed from
    the target's weights or loaded from ``cache_dir``.

    Raises:
        ValueError: the target's architecture is not supported
            (:func:`~decoding.drafters.lean.model.check_supported`).
    """
    return as_loaded_model(LeanDraftModel(target.model, variant, cache_dir), target)


def as_loaded_model(lean: LeanDraftModel, target: LoadedModel) -> LoadedModel:
    """``lean`` as a draft :class:`~decoding.backends.models.LoadedModel` with the target's tokenizer."""
    # LoadedModel.model is typed as a transformers model; the lean draft keeps its call
    # convention (forward, config, generation_config, parameters) without being one.
    return LoadedModel(lean, target.tokenizer, f"{target.name} (lean int4 draft)")  # type: ignore[arg-type]


class LeanDraftLoader:
    """Builds the ``derived:int4`` draft (packing, or loading the packed cache) and
    calibrates it in a daemon thread, so a server answers with n-gram drafting meanwhile.

    Args:
        target: the target :class:`~decoding.backends.models.LoadedModel`.
        cache_dir: where packed weights are cached (the data dir's model folder).
        calibrate: run :func:`~decoding.drafters.lean.calibration.measure_lean_draft`.
        prompt_ids: calibration prompt (``None`` = built-in, ``context_tokens`` long:
            :func:`decoding.planning.calibration.calibration_prompt`).
        context_tokens: the working context to calibrate at (tokens).
        variant: how the draft is packed and run (:class:`~decoding.drafters.lean.model.LeanVariant`).
        require_pay: keep the draft only when its calibration pays (else: keep it whatever
            the calibration says, which is still measured and reported).

    After :meth:`start`: :meth:`ready` is True once a draft is available as :attr:`draft`
    (a :class:`~decoding.backends.models.LoadedModel`); :meth:`done` once the attempt finished
    either way; :attr:`reason` says why not (also logged), :attr:`calibration` holds the
    numbers.
    """

    def __init__(self, target: LoadedModel, cache_dir: str | Path | None = None, *, calibrate: bool = True,
                 prompt_ids: Sequence[int] | None = None, context_tokens: int = 1200,
                 variant: LeanVariant = DEFAULT_VARIANT, require_pay: bool = True) -> None:
        self.target, self.cache_dir, self.do_calibrate = target, cache_dir, calibrate
        self.require_pay = require_pay
        self.prompt_ids, self.context_tokens = prompt_ids, context_tokens
        self.variant = variant
        self.draft: LoadedModel | None = None
        self.calibration: DraftCalibration | None = None
        self.reason = "derived:int4: not started"
        self.build_s: float | None = None
        self._done = threading.Event()
        self._stop = threading.Event()
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
            lean = LeanDraftModel(self.target.model, self.variant, self.cache_dir)
            self.build_s = time.perf_counter() - t0
            if self.do_calibrate:
                ids = self.prompt_ids or calibration_prompt(self.target.tokenizer, self.context_tokens)
                self.calibration = measure_lean_draft(self.target.model, lean, ids, should_stop=self._stop.is_set)
                self.reason = self.calibration.reason
                if not self.calibration.accept and self.require_pay:
                    log.info("%s: no draft model", self.reason)
                    return
            else:
                self.reason = "derived:int4 loaded (not calibrated)"
            self.draft = as_loaded_model(lean, self.target)
            log.info("%s (built in %.1f s)", self.reason, self.build_s)
        except CalibrationCancelled:
            self.reason = "derived:int4: cancelled (the server is stopping)"
            log.info("%s", self.reason)
        except Exception as exc:  # noqa: BLE001 - any failure means "no draft", said why, serving goes on
            self.reason = f"derived:int4 unavailable: {type(exc).__name__}: {exc}"
            log.warning("%s", self.reason)
        finally:
            self._done.set()

    def cancel(self, timeout_s: float | None = 60.0) -> None:
        """Stop the build at its next calibration step and wait for the thread (up to
        ``timeout_s`` seconds), so that no thread is inside torch when the process exits (a
        daemon thread there aborts the interpreter: "terminate called without an active
        exception", exit 134)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def done(self) -> bool:
        """The attempt finished (with or without a draft)."""
        return self._done.is_set()

    def ready(self) -> bool:
        """A draft is available as :attr:`draft`."""
        return self._done.is_set() and self.draft is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until done (or ``timeout`` seconds); returns :meth:`ready`."""
        self._done.wait(timeout)
        return self.ready()
