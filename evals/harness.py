"""Shared set-up for the evals: the real store, retrieval and prompt path, and the models."""

from __future__ import annotations

import logging
import platform
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import GenerationConfig as HFGenerationConfig

from copilot.config import Settings
from copilot.service import CopilotService
from decoding import SpeculativeEngine
from evals.questions import Question
from ingestion.pipeline import ingest_paths

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
    """The service (store + engine) the evals drive, and where the store lives."""

    service: CopilotService
    settings: Settings
    tmpdir: tempfile.TemporaryDirectory | None

    @property
    def engine(self) -> SpeculativeEngine:
        assert self.service.engine is not None
        return self.service.engine

    def close(self) -> None:
        if self.tmpdir is not None:
            self.tmpdir.cleanup()


def build_setup(corpus: Path | None, data_dir: Path | None, *, load_models: bool = True,
                draft_model: str | None = None) -> EvalSetup:
    """Ingest ``corpus`` into a temporary store (or reuse ``data_dir``) and load the models.

    The settings come from ``COPILOT_*`` like the service's; ``draft_model`` overrides
    the configured draft model. Converted models stay cached where the service keeps them.
    """
    base = Settings(**({"draft_model": draft_model} if draft_model is not None else {}))
    tmp = None
    if data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="opscopilot-eval-")
        data_dir = Path(tmp.name)
    settings = base.model_copy(update={"data_dir": data_dir, "model_dir": base.model_cache_dir})
    service = CopilotService.from_settings(settings, load_models=load_models)
    if corpus is not None:
        report = ingest_paths([corpus], service.store, progress=False).to_dict()
        log.info("corpus %s: %s", corpus, report["counts"])
    return EvalSetup(service, settings, tmp)


def build_cases(setup: EvalSetup, questions: list[Question], max_new_tokens: int) -> list[Case]:
    """Run every question through the real retrieval + prompt path."""
    cases = []
    config = setup.service.generation_config(max_new_tokens)
    for q in questions:
        prepared = setup.service.prepare(q.question, config=config)
        cases.append(Case(q, prepared.prompt.input_ids, prepared.prompt.context_ids,
                          [s.doc_id for s in prepared.prompt.sources]))
    return cases


def hardware_summary(setup: EvalSetup) -> dict:
    """Where the eval ran: CPU/GPU, threads, torch version, model, dtype."""
    target = setup.engine.target if setup.service.engine else None
    device = target.device if target else torch.device("cpu")
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }
    if target is not None:
        info.update(target_model=target.name, dtype=str(target.dtype).removeprefix("torch."),
                    draft_model=setup.engine.draft.name if setup.engine.draft else None,
                    answer_history=setup.engine.history.max_answers)
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

