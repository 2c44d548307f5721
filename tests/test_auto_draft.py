"""``COPILOT_DRAFT_MODEL=auto``: on CPU the service builds ``derived:int4`` in the background,
serves with n-gram drafting meanwhile, and attaches the draft only when its calibration pays;
the outcome is in ``/readyz`` and ``copilot config``."""

from __future__ import annotations

import pytest

from copilot.config import Settings
from copilot.service import CopilotService
from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.backends.embedded import QWEN_CODER_05B, QWEN_CODER_15B
from decoding.build import auto_draft_plan, draft_model_plan, lean_draft_loader, load_draft
from decoding.drafters.derived import AUTO_DRAFT, LEAN_DRAFT
from decoding.planning.policy import CostModel

COSTS = CostModel(verify_ms=(10.0, 10.5, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0))


def test_auto_is_the_default_and_a_cpu_recipe(tmp_path):
    settings = Settings(data_dir=tmp_path, _env_file=None)
    assert settings.draft_model == AUTO_DRAFT
    target = settings.target_model
    assert auto_draft_plan(AUTO_DRAFT, target, "cpu") == "derived:int4"
    assert auto_draft_plan(AUTO_DRAFT, target, "cuda") is None
    assert auto_draft_plan("", target, "cpu") is None
    assert auto_draft_plan(AUTO_DRAFT, QWEN_CODER_15B.name, "cuda") == QWEN_CODER_05B.name
    assert "background" in draft_model_plan(AUTO_DRAFT, target, "cpu")
    assert "none on this device" in draft_model_plan(AUTO_DRAFT, target, "cuda")
    assert draft_model_plan("", target, "cpu").startswith("none")
    assert draft_model_plan("derived:layers:1", target, "cpu") == "derived:layers:1, loaded at start"


def test_the_plan_says_what_is_loaded_and_what_is_built(tiny_models, tmp_path):
    """``load_draft`` loads what is loaded with the target; ``lean_draft_loader`` is the
    derived:int4 build: for ``auto`` it keeps the draft only when it pays, asked for by
    name it keeps it whatever the calibration says."""
    target = tiny_models.load("small")
    where = {"target_model": target.name, "device": "cpu"}
    for spec in ("", AUTO_DRAFT, LEAN_DRAFT):
        assert load_draft(spec, target, dtype="float32", cache_dir=tmp_path, **where) is None
    layers = load_draft("derived:layers:1", target, dtype="float32", cache_dir=tmp_path, **where)
    assert layers is not None and layers.model.config.num_hidden_layers == 1
    assert lean_draft_loader("", target, cache_dir=tmp_path, **where) is None
    assert lean_draft_loader("derived:layers:1", target, cache_dir=tmp_path, **where) is None
    assert lean_draft_loader(AUTO_DRAFT, target, target_model=target.name, device="cuda", cache_dir=tmp_path) is None
    assert lean_draft_loader(AUTO_DRAFT, target, cache_dir=tmp_path, **where).require_pay is True
    assert lean_draft_loader(LEAN_DRAFT, target, cache_dir=tmp_path, **where).require_pay is False


def test_the_service_serves_while_the_draft_builds_then_reports_the_outcome(tiny_models, light_store, tmp_path):
    target = tiny_models.load("large")
    engine = SpeculativeEngine(target, costs=COSTS)
    settings = Settings(data_dir=tmp_path, device="cpu", draft_model="auto", _env_file=None)
    service = CopilotService(settings, light_store, engine)
    assert engine.core.draft is None and "background" in service.models.draft_status
    prompt = target.tokenizer("disk node restart xrootd service", add_special_tokens=False)["input_ids"]
    service.models.start_auto_draft()
    plain = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=12),
                                                     speculation=Speculation(drafting="off")))  # serves meanwhile
    service.models.wait_for_draft(300)
    status = service.models.draft_status
    assert status.startswith("derived:int4") and "building" not in status, status
    if engine.core.draft is not None:  # attached: it pays at this size; the output is still exact
        assert [d.name for d in engine.core.drafters] == ["ngram", "draft_model"]
        out = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=12),
                                                       speculation=Speculation(drafting="draft_model")))
        assert out.token_ids == plain.token_ids
    else:  # refused: said why, no draft-model drafter
        assert [d.name for d in engine.core.drafters] == ["ngram"]


def test_readyz_and_config_name_the_draft_model(light_app, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from copilot.cli.main import app

    with TestClient(light_app()) as c:
        assert c.get("/readyz").json()["draft_model"] == "no target model is loaded"
    result = CliRunner().invoke(app, ["config"], env={"COPILOT_DRAFT_MODEL": "auto", "COPILOT_DEVICE": "cpu",
                                                      "COPILOT_BACKEND": "torch", "COPILOT_DATA_DIR": str(tmp_path)})
    assert result.exit_code == 0 and "derived:int4 built in the background" in result.output


def test_an_unknown_draft_spec_is_refused_by_name(tiny_models):
    from decoding.drafters.derived import derive_draft

    with pytest.raises(ValueError, match="derived:int5"):
        derive_draft(tiny_models.load("small"), "derived:int5")


def test_a_draft_attached_after_start_is_used_and_exact(tiny_models):
    from decoding.drafters.derived import derive_draft

    target = tiny_models.load("large")
    engine = SpeculativeEngine(target, costs=COSTS)
    prompt = target.tokenizer("disk node restart xrootd service", add_special_tokens=False)["input_ids"]
    plain = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=16),
                                                     speculation=Speculation(drafting="off")))
    engine.attach_draft(derive_draft(target, "derived:int4"), step_ms=1.0, min_confidence=0.0)
    out = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=16),
                                                   speculation=Speculation(drafting="draft_model", mode="fixed",
                                                                           num_speculative_tokens=4)))
    assert out.token_ids == plain.token_ids and out.stats.to_dict()["drafters"]["draft_model"]["proposed"] > 0
    assert engine.core.drafters[-1]._cache is None  # it drafts over the target's KV cache: no copy of its own
    engine.attach_draft(derive_draft(target, "derived:int4"), step_ms=2.0)  # replaces, never duplicates
    assert [d.name for d in engine.core.drafters] == ["ngram", "draft_model"] and engine.core.costs.draft_step_ms == 2.0


def test_latency_eval_names_why_assisted_generation_cannot_time_the_lean_draft(tiny_models):
    from decoding.drafters.derived import derive_draft
    from evals.latency import LEAN_DRAFT_REASON, latency_modes, skipped_modes

    target = tiny_models.load("small")
    engine = SpeculativeEngine(target, derive_draft(target, "derived:int4"), costs=CostModel((10.0, 11.0), 1.0))
    assert "hf_assisted" not in latency_modes(engine) and "ours_draft_model" in latency_modes(engine)
    assert skipped_modes(engine) == {"hf_assisted": LEAN_DRAFT_REASON}
