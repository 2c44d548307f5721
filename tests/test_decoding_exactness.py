"""Greedy exactness, property style: the engine emits plain greedy decoding of the target.

Seeded loops over random prompts on tiny random Llama models (small and large
vocabularies; random, repetitive and text prompts), every drafting mode, budgets
0..N, with and without EOS and stop strings, random γ (fixed or the policy's), n-gram
sizes, draft models and policy costs, with and without the loop stop (its cut checked against a
brute-force statement of its definition). Each case also checks that the streamed deltas add
up to the text.
"""

from __future__ import annotations

import random

import pytest
import torch

from decoding import Budget, GenerationConfig, Speculation, SpeculativeEngine
from decoding.core import EngineConfig
from decoding.planning.policy import CostModel

pytestmark = pytest.mark.usefixtures("torch_one_thread")

MODES = ("off", "ngram", "draft_model", "auto")
N_MAX = 40  # longest budget tried (reference greedy length)
TEXTS = ["restart the xrootd service on the disk node", "café ✓ the ticket is fixed", "the disk is full",
         "ticket link fixed: renew host cert 東京 🚀", "queue storage pool drain — job failed timeout"]
COSTS = [
    CostModel(verify_ms=(1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12, 1.14, 1.16, 1.18, 1.2), draft_step_ms=0.05),
    CostModel(verify_ms=(1.0, 1.1, 1.3, 1.6, 1.7, 1.8, 1.85, 1.9, 1.95), draft_step_ms=0.3),
    CostModel(verify_ms=(1.0, 2.0, 3.0, 4.0), draft_step_ms=0.9),  # speculation hardly ever pays
]


def random_prompt(rng: random.Random, tok, vocab: int) -> list[int]:
    kind = rng.choice(["random", "repetitive", "text", "one"])
    if kind == "one":
        return [rng.randrange(vocab)]
    if kind == "text":
        return tok.encode(" ".join(rng.sample(TEXTS, rng.randint(1, 3))))
    if kind == "random":
        return [rng.randrange(vocab) for _ in range(rng.randint(1, 60))]
    pattern = [rng.randrange(vocab) for _ in range(rng.randint(1, 6))]
    prompt = (pattern * 20)[: rng.randint(2, 50)]
    for _ in range(rng.randint(0, 3)):  # a little noise
        prompt[rng.randrange(len(prompt))] = rng.randrange(vocab)
    return prompt


def random_stop_strings(rng: random.Random, text: str) -> tuple[str, ...]:
    """Substrings of the greedy text (often spanning tokens), sometimes one that never occurs."""
    stops = []
    for _ in range(rng.randint(1, 2)):
        if text and rng.random() < 0.8:
            i = rng.randrange(len(text))
            s = text[i : i + rng.randint(1, 4)]
            if s and "\ufffd" not in s:
                stops.append(s)
        else:
            stops.append("<never~stop>")
    return tuple(stops) or ("<never~stop>",)


def random_eos(rng: random.Random, ref: list[int]):
    choice = rng.choice(["model", "none", "one", "two"])
    if choice == "model":
        return None
    if choice == "none":
        return ()
    picks = [ref[rng.randrange(len(ref))] for _ in range(1 if choice == "one" else 2)]
    return tuple(picks)


def random_contexts(rng: random.Random, ref: list[int], vocab: int) -> list[list[int]]:
    """Passages that contain stretches of the greedy continuation (so n-gram drafts get
    accepted) between random tokens, plus an unrelated one."""
    contexts = []
    for _ in range(rng.randint(0, 3)):
        a = rng.randrange(len(ref))
        b = min(len(ref), a + rng.randint(2, 15))
        noise = [rng.randrange(vocab) for _ in range(rng.randint(0, 5))]
        contexts.append(noise + ref[a:b] + noise[::-1])
    if rng.random() < 0.5:
        contexts.append([rng.randrange(vocab) for _ in range(rng.randint(1, 30))])
    return contexts


def run_case(tiny_models, target: str, seed: int) -> None:
    rng = random.Random(f"{target}-{seed}")
    loaded = tiny_models.load(target)
    tok, vocab = loaded.tokenizer, loaded.model.config.vocab_size
    prompt = random_prompt(rng, tok, vocab)
    ref = tiny_models.greedy(target, prompt, N_MAX)
    ref_text = tok.decode(ref, skip_special_tokens=True)
    for mode in MODES:
        # drafts: a 1-layer truncation (own prefill) or a perturbed copy (shares the target's prompt KV)
        use_draft = mode == "draft_model" or (mode == "auto" and rng.random() < 0.7)
        draft = tiny_models.load(f"{target}_{rng.choice(['trunc', 'noisy'])}") if use_draft else None
        max_ngram = rng.randint(1, 5)
        costs = rng.choice(COSTS[:2] * 3 + COSTS[2:])
        engine_config = EngineConfig(max_ngram=max_ngram, min_ngram=rng.randint(1, min(max_ngram, 3)),
                                     draft_min_confidence=rng.choice([0.0, 0.0, 0.02, 0.2]))
        engine = SpeculativeEngine(loaded, draft, engine_config, costs=costs)
        budget = rng.choice([0, 1, 2, 3]) if rng.random() < 0.2 else rng.randint(4, N_MAX)
        eos = random_eos(rng, ref)
        stops = random_stop_strings(rng, ref_text) if rng.random() < 0.5 else ()
        loop_span = rng.choice([0, 0, 1, 2, 3, 5, 8, 12])
        gamma = rng.randint(1, 17)
        fixed = mode in ("ngram", "draft_model") and rng.random() < 0.5
        config = GenerationConfig(budget=Budget(max_new_tokens=budget, eos_token_ids=eos, stop_strings=stops,
                                                loop_span=loop_span),
                                  speculation=Speculation(mode="fixed" if fixed else "adaptive", drafting=mode,
                                                          num_speculative_tokens=gamma))
        contexts = random_contexts(rng, ref, vocab) if mode in ("ngram", "auto") else []
        where = f"{target} seed={seed} prompt={prompt} {config} contexts={contexts}"

        events = list(engine.stream(prompt, config, contexts))
        result = events[-1].result
        ids, text, reason = tiny_models.expected(target, prompt, budget, eos, stops, loop_span)
        assert result.token_ids == ids, where
        assert result.text == text, where
        assert result.finish_reason == reason, where
        assert "".join(e.delta for e in events) == result.text, where
        streamed = [t for e in events for t in e.token_ids]
        assert streamed[:len(ids)] == ids and (reason == "repetition" or streamed == ids), where
        stats = result.stats
        assert stats.new_tokens == len(ids) <= budget
        if ids:  # every decode-phase pass commits >= 1 token; the first token comes from the prefill
            assert stats.decode_tokens == len(ids) - 1
            low = 0 if reason == "repetition" else 1  # cut repeats do not count
            assert low <= (stats.tau if stats.target_passes else 1) <= config.speculation.num_speculative_tokens + 1
        for d in stats.drafters.values():
            assert 0 <= d.accepted <= d.proposed
        if mode == "off":
            assert stats.drafters == {} and (stats.tau in (0.0, 1.0) or reason == "repetition" and stats.tau < 1)


@pytest.mark.parametrize("seed", range(40))
def test_greedy_exact_small_vocab(tiny_models, seed):
    run_case(tiny_models, "small", seed)


@pytest.mark.parametrize("seed", range(40))
def test_greedy_exact_large_vocab(tiny_models, seed):
    run_case(tiny_models, "large", seed)


@pytest.mark.parametrize("target", ["small", "large"])
def test_greedy_exact_through_one_engine_with_its_answer_history(tiny_models, target, monkeypatch):
    """One engine serves many related prompts (repeats, prefixes, shared text), so earlier
    answers are in its history and get drafted from: every output is still plain greedy."""
    from decoding.drafters.ngram import AnswerHistory

    matched = []
    occurrences = AnswerHistory.occurrences

    def counting_occurrences(self, *args):
        found = occurrences(self, *args)
        matched.extend(found)
        return found

    monkeypatch.setattr(AnswerHistory, "occurrences", counting_occurrences)
    rng = random.Random(f"history-{target}")
    loaded = tiny_models.load(target)
    tok, vocab = loaded.tokenizer, loaded.model.config.vocab_size
    engine = SpeculativeEngine(loaded, config=EngineConfig(answer_history=rng.choice([2, 32])), costs=COSTS[0])
    pool = [random_prompt(rng, tok, vocab) for _ in range(6)]
    for i in range(30):
        prompt = rng.choice(pool)
        if rng.random() < 0.5:  # a variant: cut, extended or prefixed
            prompt = rng.choice([prompt[: max(1, len(prompt) // 2)], prompt + rng.choice(pool), [7] + prompt])
        budget = rng.randint(0, N_MAX)
        config = GenerationConfig(budget=Budget(max_new_tokens=budget, eos_token_ids=()),
                                  speculation=Speculation(drafting=rng.choice(["ngram", "auto"]),
                                                          num_speculative_tokens=rng.randint(1, 17)))
        result = engine.generate(prompt, config)
        assert result.token_ids == tiny_models.greedy(target, prompt, budget), (i, prompt, config)
    assert len(engine.core.history) > 0 and matched  # the history had continuations to offer


def test_reference_truncation_matches_generate_with_eos(tiny_models):
    """Sanity check of the test oracle: truncating the no-EOS greedy ids at the first EOS
    equals ``generate(eos_token_id=...)``."""
    loaded = tiny_models.load("small")
    prompt = loaded.tokenizer.encode("the disk is full")
    ref = tiny_models.greedy("small", prompt, N_MAX)
    eos = ref[7]
    out = loaded.model.generate(torch.tensor([prompt]), max_new_tokens=N_MAX, do_sample=False, eos_token_id=eos,
                                pad_token_id=0)[0, len(prompt):].tolist()
    ids, _, reason = tiny_models.expected("small", prompt, N_MAX, (eos,))
    assert out == ids and reason == "eos"


def test_stop_strings_match_transformers_generate(tiny_models):
    """Our stop-string cut equals transformers' own ``generate(stop_strings=...)``, in every mode."""
    loaded = tiny_models.load("large")
    tok = loaded.tokenizer
    engine = SpeculativeEngine(loaded, tiny_models.load("large_noisy"), config=EngineConfig(draft_min_confidence=0.0),
                               costs=COSTS[0])
    checked = 0
    for seed in range(6):
        rng = random.Random(seed)
        prompt = tok.encode(rng.choice(TEXTS))
        ref = tiny_models.greedy("large", prompt, N_MAX)
        ref_text = tok.decode(ref)
        stop = ref_text[rng.randrange(5, 25) :][:3]
        if not stop.strip() or "\ufffd" in stop:
            continue
        hf = loaded.model.generate(torch.tensor([prompt]), max_new_tokens=N_MAX, do_sample=False, eos_token_id=None,
                                   pad_token_id=0, stop_strings=[stop], tokenizer=tok)[0, len(prompt):].tolist()
        for mode in MODES:
            config = GenerationConfig(budget=Budget(max_new_tokens=N_MAX, stop_strings=(stop,), eos_token_ids=()),
                                      speculation=Speculation(drafting=mode))
            result = engine.generate(prompt, config, contexts=[ref])
            assert result.token_ids == hf, (seed, stop, mode)
            assert result.finish_reason == "stop" and stop not in result.text
        checked += 1
    assert checked >= 3
