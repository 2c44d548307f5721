"""The model host: the models the service answers with, for as long as the process lives.

:class:`ModelHost` owns the engine — the in-process :class:`~decoding.engine.SpeculativeEngine`
(built by :func:`decoding.build.build_engine`), a model server's
:class:`~copilot.serving.remote_target.RemoteEngine`, or none (retrieval only) — and the
background build of the ``derived:int4`` draft model and its status, and answers what the
API reports of the models: the name, the context window, token counts and the OpenAI
``system_fingerprint``.
"""

from __future__ import annotations

import hashlib
import logging
import threading

from copilot.config import Settings
from copilot.serving.remote_target import RemoteEngine, remote_engine
from decoding.backends.models import LoadOptions
from decoding.build import attach_when_ready, build_engine, draft_model_plan, lean_draft_loader
from decoding.core import EngineConfig
from decoding.drafters.derived import LEAN_DRAFT
from decoding.drafters.lean import LeanDraftLoader
from decoding.drafters.ngram import AnswerHistory
from decoding.engine import SpeculativeEngine

log = logging.getLogger(__name__)

Engine = SpeculativeEngine | RemoteEngine


def load_engine(settings: Settings) -> Engine:
    """The engine ``settings`` configure: the model server at ``target_url``, else the target
    (and draft) model loaded here (:func:`decoding.build.build_engine`).

    Raises:
        ModelLoadError: a model (or the served model's tokenizer) cannot be loaded.
        RemoteTargetError: no ``target_served_model`` and the server lists none.
    """
    if settings.target_url:
        return remote_engine(settings)
    load = LoadOptions(backend=settings.backend, device=settings.device, dtype=settings.dtype,
                       cache_dir=settings.model_cache_dir, n_seq_max=settings.max_batch + max(settings.prefix_cache, 2),
                       max_model_len=settings.max_model_len, kv_window=settings.kv_window,
                       kv_cache_type=settings.kv_cache_type)
    config = EngineConfig(max_ngram=settings.max_ngram, min_ngram=settings.min_ngram,
                          answer_history=settings.answer_history,
                          num_speculative_tokens=settings.num_speculative_tokens,
                          prefix_cache_entries=settings.prefix_cache)
    return build_engine(settings.target_model, settings.draft_model or "", load, config)


class ModelHost:
    """The engine and the background draft build (see the module docstring).

    Args:
        settings: the effective settings (model names, device, draft model; what the
            fingerprint hashes).
        engine: the decoding engine, or an external model server; ``None`` = no model.
    """

    def __init__(self, settings: Settings, engine: Engine | None) -> None:
        self.settings = settings
        self.engine = engine
        self._draft_loader: LeanDraftLoader | None = None
        self._draft_attach: threading.Thread | None = None
        if engine is None:
            self._draft_status = "no target model is loaded"
        elif isinstance(engine, RemoteEngine):
            self._draft_status = f"none here: the model server at {engine.target.url} decodes"
        elif isinstance(engine, SpeculativeEngine) and engine.core.draft is not None:
            self._draft_status = f"{engine.core.draft.name}: loaded"
        else:
            backend = engine.target.backend
            self._draft_status = draft_model_plan(settings.draft_model or "", settings.target_model, settings.device,
                                                  backend)

    @property
    def draft_status(self) -> str:
        """Which draft model the engine uses, or why none (for ``/readyz`` and the log); while a
        background build is being attached, ``"... (attaching)"``."""
        loader = self._draft_loader
        if loader is None:
            return self._draft_status
        attaching = self._draft_attach is not None and self._draft_attach.is_alive() and loader.done()
        return f"{loader.reason} (attaching)" if attaching else loader.reason

    def start_auto_draft(self) -> None:
        """Build and calibrate ``derived:int4`` (:func:`~decoding.build.lean_draft_loader`)
        and attach it to the engine with its measured step cost and agreement (the policy's
        prior for it). ``draft_model = "auto"`` on CPU: on a background thread while the
        engine serves with n-gram drafting, attached only when its calibration pays (else the
        reason is logged). ``draft_model = "derived:int4"``: here and now, attached whatever
        its calibration says (asked for explicitly)."""
        settings, engine = self.settings, self.engine
        if not isinstance(engine, SpeculativeEngine) or self._draft_loader is not None:
            return
        loader = lean_draft_loader(settings.draft_model or "", engine.target, target_model=settings.target_model,
                                   device=settings.device, cache_dir=settings.model_cache_dir)
        if loader is None:
            return
        self._draft_loader = loader.start()
        self._draft_attach = threading.Thread(target=attach_when_ready, args=(engine, loader, settings.draft_model),
                                              name="draft-attach", daemon=True)
        self._draft_attach.start()
        if settings.draft_model == LEAN_DRAFT:
            self.wait_for_draft()

    def stop_background(self, timeout_s: float = 60.0) -> None:
        """Cancel a background draft build and join its threads (seconds), before the process exits."""
        if self._draft_loader is not None:
            self._draft_loader.cancel(timeout_s)
        self.wait_for_draft(timeout_s)

    def wait_for_draft(self, timeout_s: float | None = None) -> None:
        """Block until the background draft build (if any) is attached or refused (seconds)."""
        if self._draft_attach is not None:
            self._draft_attach.join(timeout_s)

    def loaded(self) -> Engine:
        """The engine.

        Raises:
            RuntimeError: no model is loaded.
        """
        if self.engine is None:
            raise RuntimeError("no target model is loaded")
        return self.engine

    @property
    def model_name(self) -> str:
        """The target model's id or path as configured."""
        return self.settings.target_model

    @property
    def context_length(self) -> int | None:
        """The context window in tokens: the target's ``max_positions`` (capped by
        ``max_model_len`` when it was loaded); ``None`` without a model."""
        return None if self.engine is None else self.engine.target.max_positions

    def count_tokens(self, text: str) -> int:
        """Number of target-tokenizer tokens in ``text`` (no special tokens; 0 without a model)."""
        if not text or self.engine is None:
            return 0
        return len(self.engine.target.tokenizer(text, add_special_tokens=False)["input_ids"])

    @property
    def answer_history(self) -> AnswerHistory | None:
        """The earlier answers the in-process engine drafts from; ``None`` for a model server
        (it keeps none here) or without a model."""
        return self.engine.core.history if isinstance(self.engine, SpeculativeEngine) else None

    def fingerprint(self, style_name: str, max_sources: int) -> str:
        """OpenAI's ``system_fingerprint``: ``fp_`` and 12 hex digits of a hash of what decides
        an answer besides the request — the target and embedding models, dtype, device, the
        prompt style (``style_name``), the sources per question (``max_sources``) and the
        retrieval and answer settings. It changes when any of them does."""
        s = self.settings
        backend = self.engine.target.backend if self.engine is not None else s.backend
        parts = (s.target_model, backend, s.dtype, s.device, s.embedding_model or "default", style_name,
                 max_sources, s.max_prompt_tokens, s.min_support, s.loop_stop, s.loop_span)
        return "fp_" + hashlib.sha256(repr(parts).encode()).hexdigest()[:12]
