"""Shared set-up for the evals: the real store, retrieval and prompt path, and the models.

The decoding evals (exactness, latency) need only the :class:`Case` list: it can be built
here through the real store and prompt path, saved with :func:`save_cases`, and replayed
on another machine (a GPU box with torch and transformers alone) through
:func:`replay_setup` — this module imports the copilot and ingestion packages lazily.
"""

from __future__ import annotations

import json
import logging
import platform
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import GenerationConfig as HFGenerationConfig

from copilot.answer.question import GenerationParams, QuestionRequest
from decoding import SpeculativeEngine
from decoding.backends.cpu import cpu_report
from evals.questions import Question

if TYPE_CHECKING:
    from copilot.config import Settings
    from copilot.service import CopilotService

#: Version of the cases file written by :func:`save_cases`.
CASES_FORMAT = 1

log = logging.getLogger(__name__)


@dataclass
class Case:
    """One question turned into what the decoders see.

    Attributes:
        question: the eval question.
        prompt_ids: chat-templated prompt token ids (the real prompt path).
        context_ids: retrieved passages' token ids (n-gram drafter seed).
        retrieved_doc_ids: document ids of the sources in the prompt, in order.
    """

    question: Question
    prompt_ids: list[int]
    context_ids: list[list[int]]
    retrieved_doc_ids: list[str] = field(default_factory=list)


@dataclass
class EvalSetup:
    """What the evals drive: the service (store + engine) and where the store lives, or,
    when replaying saved cases, the engine alone (``service`` and ``settings`` ``None``).

    Attributes:
        loop_span: the loop stop's span as the service runs it (tokens; 0 = off).
    """

    service: CopilotService | None
    settings: Settings | None
    tmpdir: tempfile.TemporaryDirectory | None
    replay_engine: SpeculativeEngine | None = None
    loop_span: int = 0

    @property
    def engine(self) -> SpeculativeEngine:
        """The decoding engine (models loaded)."""
        engine = self.replay_engine or (self.service.models.engine if self.service else None)
        assert engine is not None, "the eval set-up was built without models"
        return engine

    def close(self) -> None:
        if self.tmpdir is not None:
            self.tmpdir.cleanup()


def build_setup(corpus: Path | None, data_dir: Path | None, *, load_models: bool = True,
                draft_model: str | None = None) -> EvalSetup:
    """Ingest ``corpus`` into a temporary store (or reuse ``data_dir``) and load the models.

    The settings come from ``COPILOT_*`` like the service's; ``draft_model`` overrides
    the configured draft model. Converted models stay cached where the service keeps them.
    """
    from copilot.config import Settings
    from copilot.service import CopilotService
    from ingestion.pipeline import ingest_paths

    base = Settings(**({"draft_model": draft_model} if draft_model is not None else {}))
    tmp = None
    if data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="opscopilot-eval-")
        data_dir = Path(tmp.name)
    settings = base.model_copy(update={"data_dir": data_dir, "model_dir": base.model_cache_dir})
    service = CopilotService.from_settings(settings, load_models=load_models)
    service.models.wait_for_draft()  # evals measure the engine as it serves once warm
    if service.models.engine is not None:
        log.info("draft model: %s", service.models.draft_status)
    if corpus is not None:
        report = ingest_paths([corpus], service.store, progress=False).to_dict()
        log.info("corpus %s: %s", corpus, report["counts"])
    return EvalSetup(service, settings, tmp, loop_span=service_loop_span(settings))


def service_loop_span(settings: Settings) -> int:
    """The loop stop's span as the service runs it: ``loop_span`` when ``loop_stop`` is on, else 0."""
    return settings.loop_span if settings.loop_stop else 0


def replay_setup(meta: dict, *, device: str = "auto", dtype: str = "auto", draft_model: str | None = None,
                 model_dir: Path = Path(".opscopilot/models"), backend: str = "auto") -> EvalSetup:
    """The engine for replaying saved cases: the target named in the cases file (``meta``
    from :func:`load_cases`) on ``device``/``dtype``, with no store.

    The draft model is set up as the service sets it up (:mod:`decoding.build`):
    ``derived:int4`` (or what ``auto`` plans on CPU) is built and calibrated and attached
    with its measured step cost and agreement (the policy's prior); ``auto`` attaches it
    only when the calibration pays. Other specs are loaded as models.

    Args:
        draft_model: a draft model id/path or ``derived:...`` spec (default: the file's).
        backend: what runs the target (:func:`decoding.backends.models.resolve_backend`).
        model_dir: where the embedded model is dequantized and cached.
    Raises:
        decoding.backends.models.ModelLoadError: the target or draft cannot be loaded.
    """
    from decoding.backends.models import LoadOptions
    from decoding.build import attach_when_ready, build_engine, lean_draft_loader

    name = meta["target_model"]
    spec = (draft_model if draft_model is not None else meta.get("draft_model")) or ""
    engine = build_engine(name, spec, LoadOptions(backend=backend, device=device, dtype=dtype, cache_dir=model_dir))
    loader = lean_draft_loader(spec, engine.target, target_model=name, device=device, cache_dir=model_dir)
    if loader is not None:
        attach_when_ready(engine, loader.start(), spec)
    return EvalSetup(None, None, None, replay_engine=engine, loop_span=int(meta.get("loop_span", 0)))


def build_cases(setup: EvalSetup, questions: list[Question], max_new_tokens: int) -> list[Case]:
    """Run every question through the real retrieval + prompt path. A question the service
    answers "not found" (:mod:`copilot.answer.grounding`) is left out: no model runs for it, so there
    is no decoding to time or check."""
    cases = []
    for q in questions:
        asked = QuestionRequest(q.question, generation=GenerationParams(max_new_tokens=max_new_tokens))
        prepared = setup.service.prepare(setup.service.question(asked))
        if not prepared.grounding.answerable:
            log.info("%s: answered 'not found' without the model (%s): no case", q.id, prepared.grounding.reason)
            continue
        cases.append(Case(q, prepared.prompt.input_ids, prepared.prompt.context_ids,
                          [s.doc_id for s in prepared.prompt.sources]))
    return cases


def save_cases(cases: list[Case], path: Path, setup: EvalSetup, max_new_tokens: int) -> None:
    """Write ``cases`` (prompt and context token ids as the service builds them) and what is
    needed to replay them — target model, draft model, loop span, token budget — as JSON."""
    settings = setup.settings
    meta = {"format": CASES_FORMAT, "target_model": settings.target_model if settings else setup.engine.target.name,
            "draft_model": settings.draft_model if settings else None, "loop_span": setup.loop_span,
            "max_new_tokens": max_new_tokens}
    rows = [{"question": asdict(c.question), "prompt_ids": c.prompt_ids, "context_ids": c.context_ids,
             "retrieved_doc_ids": c.retrieved_doc_ids} for c in cases]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"meta": meta, "cases": rows}))


def load_cases(path: Path) -> tuple[dict, list[Case]]:
    """Read a file written by :func:`save_cases`: ``(meta, cases)``.

    Raises:
        ValueError: not a cases file, or of another format version (the message says which).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        meta, rows = data["meta"], data["cases"]
        if meta.get("format") != CASES_FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, expected {CASES_FORMAT}")
        cases = [Case(Question(**r["question"]), [int(t) for t in r["prompt_ids"]],
                      [[int(t) for t in c] for c in r["context_ids"]], list(r.get("retrieved_doc_ids", [])))
                 for r in rows]
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not an eval cases file ({exc})") from exc
    return meta, cases


def hardware_summary(setup: EvalSetup) -> dict:
    """Where the eval ran: CPU/GPU, threads, torch version, model, dtype."""
    target = setup.engine.target if (setup.replay_engine or (setup.service and setup.service.models.engine)) else None
    device = target.device if target else torch.device("cpu")
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu": cpu_report().summary(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }
    if target is not None:
        info.update(target_model=target.name, backend=target.backend, dtype=str(target.dtype).removeprefix("torch."),
                    draft_model=setup.engine.core.draft.name if setup.engine.core.draft else None,
                    answer_history=setup.engine.core.history.max_answers)
    return info


def plain_greedy_kwargs(engine: SpeculativeEngine, input_ids: torch.Tensor, max_new_tokens: int,
                        **generation: object) -> dict:
    """``generate()`` arguments for greedy decoding of ``input_ids`` ``(1, n)``.

    A fresh ``transformers.GenerationConfig`` (plus ``generation``, e.g.
    ``prompt_lookup_num_tokens``) replaces the checkpoint's, so logits processors it may
    enable (``repetition_penalty``, ``no_repeat_ngram_size``, ...) do not apply: the engine
    decodes plain greedy. EOS ids are the engine's.
    """
    eos = list(engine.target.eos_token_ids()) or None
    config = HFGenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos,
                                pad_token_id=(eos or [0])[0], **generation)
    return dict(generation_config=config, attention_mask=torch.ones_like(input_ids))

