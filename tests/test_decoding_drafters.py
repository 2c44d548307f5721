"""The drafter interface for real: fake drafters plugged into the engine through the
``Drafter`` protocol (no engine subclass), exactness with them, and the drafting-mode enum."""

from __future__ import annotations

import pytest

from decoding import Budget, Draft, DraftingMode, DraftRequest, GenerationConfig, Offer, Speculation, SpeculativeEngine
from decoding.core import EngineConfig
from decoding.drafters.ngram import NGramDrafter
from decoding.planning.policy import CostModel

pytestmark = pytest.mark.usefixtures("torch_one_thread")

CHEAP = CostModel(verify_ms=tuple(1.0 + 0.01 * i for i in range(17)), draft_step_ms=0.01)


class FixedDrafter:
    """Proposes a fixed continuation of the output: ``continuation[len(output):]`` — right
    when it is the target's greedy output, wrong otherwise. Free (``step_ms`` 0) unless told."""

    def __init__(self, name: str, continuation: list[int], step_ms: float = 0.0) -> None:
        self.name, self.continuation, self.step_ms = name, list(continuation), step_ms
        self.requests: list[DraftRequest] = []
        self.output: list[int] = []
        self.proposals: list[int] = []  # shared by the per-request copies the engine makes

    @property
    def proposed(self) -> int:
        return sum(self.proposals)

    def begin(self, request: DraftRequest) -> None:
        self.requests.append(request)
        self.output = []

    def observe(self, new_tokens) -> None:
        self.output += [int(t) for t in new_tokens]

    def _next(self, max_tokens: int, after) -> list[int]:
        at = len(self.output) + len(after)
        return self.continuation[at:at + max(max_tokens, 0)]

    def offer(self, max_tokens: int, after=()) -> Offer:
        return Offer(self.name, len(self._next(max_tokens, after)), ("fixed",), f"fixed {self.name}", self.step_ms)

    def propose(self, max_tokens: int, after=()) -> Draft:
        tokens = self._next(max_tokens, after)
        self.proposals.append(len(tokens))
        return Draft(tokens)


@pytest.fixture(scope="module")
def small(tiny_models):
    return tiny_models.load("small")


def prompt_and_ref(tiny_models, small, n=40):
    prompt = small.tokenizer.encode("the disk is full; restart xrootd")
    return prompt, tiny_models.greedy("small", prompt, n)


@pytest.mark.parametrize("kind", ["right", "wrong", "half_right", "right_then_wrong"])
@pytest.mark.parametrize("fixed_gamma", [False, True])
def test_a_fake_drafter_keeps_the_output_exact(tiny_models, small, kind, fixed_gamma):
    prompt, ref = prompt_and_ref(tiny_models, small)
    vocab = small.model.config.vocab_size
    continuation = {"right": ref, "wrong": [(t + 1) % vocab for t in ref],
                    "half_right": [t if i % 5 else (t + 3) % vocab for i, t in enumerate(ref)],
                    "right_then_wrong": ref[:5] + [0] * 40}[kind]
    fake = FixedDrafter("ngram" if fixed_gamma else "fake", continuation)
    engine = SpeculativeEngine(small, drafters=[fake], costs=CHEAP)
    mode = DraftingMode.NGRAM if fixed_gamma else DraftingMode.AUTO
    config = GenerationConfig(budget=Budget(max_new_tokens=40, eos_token_ids=()),
                              speculation=Speculation(drafting=mode, mode="fixed" if fixed_gamma else "adaptive",
                                                      num_speculative_tokens=6))
    result = engine.generate(prompt, config)
    assert result.token_ids == ref
    stats = result.stats.drafters[fake.name]
    assert stats.proposed == fake.proposed > 0
    if kind == "right":
        assert stats.alpha == 1.0 and result.stats.tau > 4
    if kind == "wrong":
        assert stats.accepted == 0 and result.stats.produced == {"target": 40}
    assert sum(result.stats.produced.values()) == 40
    request = fake.requests[-1]
    assert request.prompt_ids == prompt and request.target_cache is not None and request.sampling is not None


def test_a_fake_drafter_alongside_the_built_in_ones(tiny_models, small):
    """A list of drafters: the n-gram one (nothing to copy here), a wrong fake and a right fake
    with a step cost; the policy learns which pays and the output stays exact."""
    prompt, ref = prompt_and_ref(tiny_models, small, 60)
    vocab = small.model.config.vocab_size
    wrong = FixedDrafter("wrong", [(t + 7) % vocab for t in ref])
    right = FixedDrafter("right", ref, step_ms=0.05)
    engine = SpeculativeEngine(small, drafters=[NGramDrafter(4, 2), wrong, right], costs=CHEAP)
    config = GenerationConfig(budget=Budget(max_new_tokens=60, eos_token_ids=()),
                              speculation=Speculation(num_speculative_tokens=8))
    for _ in range(2):  # the acceptance table carries over to the second request
        result = engine.generate(prompt, config)
        assert result.token_ids == ref
    s = result.stats
    assert s.drafters["right"].accepted > s.drafters.get("wrong", type(s.drafters["right"])()).accepted
    # a free offer (the wrong fake) always exists, so the costly right one drafts only as its
    # extension (engine.candidate_chains): still the main producer
    assert s.produced["right"] > 15 and s.produced["right"] > s.produced.get("wrong", 0)
    assert engine.core.acceptance.snapshot()["wrong:fixed"]["alpha_first"] < 0.5


def test_a_free_span_is_extended_by_another_drafter(tiny_models, small):
    """A free drafter whose span runs out mid-round (it knows 3 tokens at a time) is extended
    by a costly drafter continuing after the span (``after``)."""
    prompt, ref = prompt_and_ref(tiny_models, small, 40)

    class ShortSpans(FixedDrafter):
        def _next(self, max_tokens, after):
            return super()._next(min(max_tokens, 3 - (len(self.output) + len(after)) % 3), after)

    span, ext = ShortSpans("span", ref), FixedDrafter("extension", ref, step_ms=0.2)
    from decoding.planning.policy import PolicyConfig

    engine = SpeculativeEngine(small, config=EngineConfig(policy=PolicyConfig(prior_first=0.95, prior_next=0.95)),
                               drafters=[span, ext], costs=CHEAP)
    result = engine.generate(prompt, GenerationConfig(budget=Budget(max_new_tokens=40, eos_token_ids=()),
                                                      speculation=Speculation(num_speculative_tokens=8)))
    assert result.token_ids == ref
    assert any(sw["to"] == "span+extension" for sw in result.stats.switches), result.stats.switches
    assert result.stats.produced.get("span", 0) > 0 and result.stats.produced.get("extension", 0) > 0


def test_a_mode_naming_a_missing_drafter_is_a_clear_error(small):
    engine = SpeculativeEngine(small, drafters=[FixedDrafter("fake", [])], costs=CHEAP)
    with pytest.raises(ValueError, match="needs a ngram drafter"):
        engine.generate([5, 6, 7], GenerationConfig(budget=Budget(max_new_tokens=4),
                                                    speculation=Speculation(drafting="ngram")))
    with pytest.raises(ValueError, match="distinct"):
        SpeculativeEngine(small, drafters=[FixedDrafter("a", []), FixedDrafter("a", [])], costs=CHEAP)
    off = engine.generate([5, 6, 7], GenerationConfig(budget=Budget(max_new_tokens=4, eos_token_ids=()),
                                                      speculation=Speculation(drafting="off")))
    assert off.stats.drafters == {} and off.stats.produced == {"target": 4}


def test_drafting_mode_enum():
    assert DraftingMode("ngram") is DraftingMode.NGRAM and DraftingMode.NGRAM == "ngram"
    assert f"{DraftingMode.NGRAM}" == str(DraftingMode.NGRAM) == "ngram"
    assert Speculation(drafting="draft_model").drafting is DraftingMode.DRAFT_MODEL
    assert GenerationConfig().speculation.drafting is DraftingMode.AUTO
    assert Speculation(mode="off", drafting="ngram").drafting is DraftingMode.OFF
    assert [m.value for m in DraftingMode] == ["auto", "ngram", "draft_model", "off"]
    assert DraftingMode.AUTO.selects("anything") and not DraftingMode.OFF.selects("ngram")
    assert DraftingMode.NGRAM.selects("ngram") and not DraftingMode.NGRAM.selects("draft_model")
    assert DraftingMode.NGRAM.single and not DraftingMode.AUTO.single and not DraftingMode.OFF.single
    with pytest.raises(ValueError, match="auto|ngram|draft_model|off"):
        Speculation(drafting="fast")
