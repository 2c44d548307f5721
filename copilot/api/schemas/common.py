"""What every request model shares: JSON's own number and flag types, and the generation knobs.

:class:`GenerationKnobs` is the one declaration of the knobs ``POST /v1/ask``
(:class:`~copilot.api.schemas.ask.AskRequest`) and the OpenAI requests
(:class:`~copilot.api.schemas.openai.SamplingParams`) share under the same names. Every knob is
unset (``None``) by default: :meth:`copilot.service.CopilotService.generation_config` applies the
settings' defaults, once, for every route.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AllowInfNan, BaseModel, Field, Strict

from copilot.answer.question import GenerationParams
from copilot.search.filters import Text
from decoding.config import NUM_SPECULATIVE_TOKENS_RANGE, SpeculationMode

#: A request's ``speculation`` (:class:`decoding.config.SpeculationMode`: the engine's
#: ``Speculation.mode``, the same values); the output is the same in every mode, only its speed differs.
SPECULATION_HELP = ("adaptive (default): the cost-aware policy alone, γ from the batch's cost when sharing passes; "
                    "off: no drafting; fixed: the n-gram drafter drafts num_speculative_tokens every round; "
                    "table: γ from a vLLM-style table by batch size")

#: Request numbers and flags are taken as JSON writes them, never converted: ``"10"``, ``true``
#: and ``10.0`` are no :data:`Int`, ``"no"`` and ``1`` no :data:`Bool`, ``"0.5"`` and ``true`` no
#: :data:`Number` (an integer is one); NaN and ±Infinity (``NaN``, ``1e999``) are no Number.
#: Query parameters (``?limit=10``) are strings by nature and are declared in the routes, lax.
Int = Annotated[int, Strict()]
Bool = Annotated[bool, Strict()]
Number = Annotated[float, Strict(), AllowInfNan(False)]

#: A seed for torch's generator (a signed 64-bit integer).
Seed = Annotated[Int, Field(ge=0, le=2**63 - 1)]


class GenerationKnobs(BaseModel):
    """The generation knobs every answering request takes, under the same names (``None`` = unset:
    the settings' default). Greedy (``temperature`` 0, the default) is exact: the text is what plain
    greedy decoding of the target gives, whatever the speculation; the logits processors are those
    of transformers' ``generate()``."""

    temperature: Number | None = Field(None, ge=0.0, le=2.0, description="default 0: greedy, exact")
    top_p: Number | None = Field(None, gt=0.0, le=1.0)
    seed: Seed | None = None
    logit_bias: dict[Text, Number] | None = Field(None, description="{token id: bias in [-100, 100]}")
    frequency_penalty: Number | None = Field(None, ge=-2.0, le=2.0, description="OpenAI frequency penalty")
    presence_penalty: Number | None = Field(None, ge=-2.0, le=2.0, description="OpenAI presence penalty")
    repetition_penalty: Number | None = Field(None, gt=0.0, le=10.0, description="CTRL repetition penalty (1 = off)")
    no_repeat_ngram_size: Int | None = Field(None, ge=0, le=64, description="no n-gram of this size repeats (0 = off)")
    min_new_tokens: Int | None = Field(None, ge=0, description="end-of-sequence forbidden before this many tokens")
    bad_words_ids: list[list[Annotated[Int, Field(ge=0)]]] | None = Field(
        None, max_length=1024, description="token-id sequences that are never generated")
    suppress_tokens: list[Annotated[Int, Field(ge=0)]] | None = Field(None, max_length=4096,
                                                                      description="token ids never generated")
    speculation: SpeculationMode | None = Field(None, description=SPECULATION_HELP)
    num_speculative_tokens: Int | None = Field(None, ge=NUM_SPECULATIVE_TOKENS_RANGE[0],
                                               le=NUM_SPECULATIVE_TOKENS_RANGE[1],
                                               description="γ ceiling per round (default: settings)")

    def knobs(self, max_new_tokens: int | None, top_k: int | None = None,
              stop_strings: tuple[str, ...] = ()) -> GenerationParams:
        """The knobs for :meth:`copilot.service.CopilotService.question`, each under its own name
        (an empty ``logit_bias`` is unset too).

        Args:
            max_new_tokens, top_k, stop_strings: the knobs the request models spell their own way
                (OpenAI's ``max_tokens``, vLLM's ``top_k: -1``, ``stop``), read by the caller.
        """
        return GenerationParams(
            max_new_tokens=max_new_tokens, temperature=self.temperature, top_p=self.top_p, top_k=top_k,
            seed=self.seed, stop_strings=stop_strings, speculation=self.speculation,
            num_speculative_tokens=self.num_speculative_tokens, repetition_penalty=self.repetition_penalty,
            no_repeat_ngram_size=self.no_repeat_ngram_size, min_new_tokens=self.min_new_tokens,
            bad_words_ids=None if self.bad_words_ids is None else tuple(tuple(w) for w in self.bad_words_ids),
            suppress_tokens=None if self.suppress_tokens is None else tuple(self.suppress_tokens),
            logit_bias=self.logit_bias or None, frequency_penalty=self.frequency_penalty,
            presence_penalty=self.presence_penalty)
