"""Greedy exactness on the embedded SmolLM2-135M target: our loop == model.generate."""

from __future__ import annotations

import pytest
import torch

from decoding import Budget, GenerationConfig, Speculation

pytestmark = pytest.mark.slow

CONTEXT = (
    "2026-01-12 dCache pool dc-pool-07 went offline after a disk failure. Fixed with "
    "`dcache pool disable dc-pool-07 && systemctl restart dcache@dc-pool-07.service`. "
    "FTS transfers to FNAL failed with SRM_AUTHORIZATION_FAILURE: the VOMS proxy had expired; "
    "renewed with voms-proxy-init --voms cms --valid 96:00."
)

PROMPTS = [
    ("copy-heavy", f"Context: {CONTEXT}\nWhich command restarted the pool? Quote it exactly."),
    ("copy-heavy-2", f"Context: {CONTEXT}\nHow was the SRM_AUTHORIZATION_FAILURE fixed? Quote the command."),
    ("repeat", "Repeat exactly: voms-proxy-init --voms cms --valid 96:00; voms-proxy-init --voms cms --valid 96:00"),
    ("no-match", "Write a haiku about autumn rain."),
    ("short", "Hi"),
]


def _chat_ids(tokenizer, text: str) -> list[int]:
    out = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.mark.parametrize("name,text", PROMPTS, ids=[p[0] for p in PROMPTS])
def test_every_mode_equals_generate(embedded_target, embedded_engine, name, text):
    tok = embedded_target.tokenizer
    ids = _chat_ids(tok, text)
    with torch.inference_mode():
        ref = embedded_target.model.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False,
                                             pad_token_id=tok.eos_token_id)[0, len(ids):].tolist()
    contexts = [tok(CONTEXT, add_special_tokens=False)["input_ids"]]
    for mode in ("off", "ngram", "auto"):
        result = embedded_engine.generate(ids, GenerationConfig(budget=Budget(max_new_tokens=40),
                                                                speculation=Speculation(drafting=mode)), contexts)
        assert result.token_ids == ref, (name, mode)
        assert result.stats.new_tokens == len(ref)


def test_ngram_drafter_accepts_on_copy_heavy_prompt(embedded_target, embedded_engine):
    tok = embedded_target.tokenizer
    ids = _chat_ids(tok, PROMPTS[2][1])
    # fixed γ: this checks the drafter's acceptance, not what the (shared, learning) policy decides
    result = embedded_engine.generate(ids, GenerationConfig(budget=Budget(max_new_tokens=40),
                                                            speculation=Speculation(drafting="ngram", mode="fixed")))
    stats = result.stats
    assert stats.drafters["ngram"].accepted > 0
    assert stats.tau > 1.0
    assert stats.target_passes < stats.new_tokens
