"""Logits processing: a request's generation settings as a ``transformers.LogitsProcessorList``.

The built-in settings use transformers' own processor classes, in the order
``generate()`` builds them (``GenerationMixin._get_logits_processor``): repetition
penalty, no-repeat n-gram, bad words, min length, min new tokens, suppressed tokens.
OpenAI's ``logit_bias`` and ``frequency_penalty`` / ``presence_penalty`` follow, as the
custom processors passed to ``generate(logits_processor=...)`` do; they implement the
semantics documented in the OpenAI API reference (chat completions, "logit_bias",
"frequency_penalty", "presence_penalty"; the formula is from the OpenAI guide
"Parameter details": ``mu[j] -> mu[j] - c[j] * alpha_frequency - float(c[j] > 0) * alpha_presence``).

Exactness with speculation: every row of the target's verification logits (and of the
draft model's logits) is processed with its own prefix as ``input_ids`` — prompt +
committed output + the drafted tokens before it — exactly the ``input_ids`` ``generate()``
passes at that position (:meth:`decoding.sampling.TokenSelector.process`). Processing
happens in float32, as in ``generate()``.

A checkpoint's ``generation_config`` applies to settings a request leaves unset
(:func:`effective_settings`); a checkpoint setting the engine cannot apply exactly
(``sequence_bias``, ``forced_eos_token_id``, beam search, ...) makes every request fail
with :class:`~decoding.config.GenerationSettingError` naming it, never silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensLogitsProcessor,
)

from decoding.config import GenerationConfig, GenerationSettingError

#: Checkpoint ``generation_config`` fields the engine applies (request field = same name,
#: except ``min_length``, which only a checkpoint sets).
CHECKPOINT_APPLIED = ("repetition_penalty", "no_repeat_ngram_size", "min_length", "min_new_tokens", "bad_words_ids",
                      "suppress_tokens")
#: Checkpoint sampling defaults: a request's own temperature / top-k / top-p decide instead
#: (greedy unless the request samples); reported, never applied.
CHECKPOINT_SAMPLING = ("do_sample", "temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff",
                       "eta_cutoff", "top_h")


class LogitBiasLogitsProcessor(LogitsProcessor):
    """OpenAI ``logit_bias``: add ``bias[j]`` to the logit of token j at every position.

    Args:
        logit_bias: ``(token id, bias)`` pairs (ids distinct and inside the vocabulary).

    ``__call__(input_ids (batch, len) int64, scores (batch, vocab) float) -> (batch, vocab)``.
    """

    def __init__(self, logit_bias: Iterable[tuple[int, float]]) -> None:
        pairs = dict(logit_bias)
        self.ids, self.values = list(pairs), list(pairs.values())
        self._cache: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        key = (scores.device, scores.dtype)
        if key not in self._cache:
            self._cache[key] = (torch.tensor(self.ids, device=scores.device, dtype=torch.long),
                                torch.tensor(self.values, device=scores.device, dtype=scores.dtype))
        ids, values = self._cache[key]
        out = scores.clone()
        out[:, ids] += values
        return out


class FrequencyPresencePenaltyLogitsProcessor(LogitsProcessor):
    """OpenAI ``frequency_penalty`` and ``presence_penalty`` over the generated tokens.

    ``mu[j] -> mu[j] - c[j] * frequency_penalty - float(c[j] > 0) * presence_penalty``, where
    c[j] counts token j in ``input_ids[:, prompt_length:]`` (the output so far; the prompt is
    not counted, as in the OpenAI API and vLLM).

    Args:
        frequency_penalty, presence_penalty: in [-2, 2] (validated by the config).
        prompt_length: prompt tokens at the start of every ``input_ids`` row.
    """

    def __init__(self, frequency_penalty: float, presence_penalty: float, prompt_length: int) -> None:
        self.frequency_penalty, self.presence_penalty = float(frequency_penalty), float(presence_penalty)
        self.prompt_length = int(prompt_length)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        generated = input_ids[:, self.prompt_length:]
        counts = torch.zeros_like(scores).scatter_add_(-1, generated, torch.ones_like(generated, dtype=scores.dtype))
        return scores - counts * self.frequency_penalty - (counts > 0).to(scores.dtype) * self.presence_penalty


@dataclass(frozen=True)
class LogitsSettings:
    """One request's effective logits-processing settings (request over checkpoint).

    All "off" by default. ``from_checkpoint`` names the settings taken from the checkpoint's
    ``generation_config``; ``checkpoint_sampling`` lists the checkpoint's sampling defaults
    (not applied: the request's temperature / top-k / top-p decide).
    """

    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    min_length: int = 0
    min_new_tokens: int = 0
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    suppress_tokens: tuple[int, ...] = ()
    logit_bias: tuple[tuple[int, float], ...] = ()
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    from_checkpoint: tuple[str, ...] = ()
    checkpoint_sampling: tuple[tuple[str, object], ...] = ()

    @property
    def active(self) -> bool:
        """Whether any processor applies (else logits go to argmax / sampling untouched)."""
        return bool(self.repetition_penalty != 1.0 or self.no_repeat_ngram_size or self.min_length
                    or self.min_new_tokens or self.bad_words_ids or self.suppress_tokens or self.logit_bias
                    or self.frequency_penalty or self.presence_penalty)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (the result stats' ``generation_settings``)."""
        out = asdict(self)
        out["bad_words_ids"] = [list(w) for w in self.bad_words_ids]
        out["suppress_tokens"] = list(self.suppress_tokens)
        out["logit_bias"] = {str(t): b for t, b in self.logit_bias}
        out["from_checkpoint"] = list(self.from_checkpoint)
        out["checkpoint_sampling"] = dict(self.checkpoint_sampling)
        return out

    def generate_kwargs(self) -> dict[str, Any]:
        """``transformers.GenerationConfig`` fields that make ``generate()`` build the same
        built-in processors (the exactness reference); pair with :meth:`custom_processors`."""
        return {"repetition_penalty": self.repetition_penalty, "no_repeat_ngram_size": self.no_repeat_ngram_size,
                "min_length": self.min_length, "min_new_tokens": self.min_new_tokens,
                "bad_words_ids": [list(w) for w in self.bad_words_ids] or None,
                "suppress_tokens": list(self.suppress_tokens) or None}

    def custom_processors(self, prompt_length: int) -> LogitsProcessorList:
        """The OpenAI processors (for ``generate(logits_processor=...)``, which appends them
        after its built-in ones, as :meth:`processors` does)."""
        out = LogitsProcessorList()
        if self.logit_bias:
            out.append(LogitBiasLogitsProcessor(self.logit_bias))
        if self.frequency_penalty or self.presence_penalty:
            out.append(FrequencyPresencePenaltyLogitsProcessor(self.frequency_penalty, self.presence_penalty,
                                                               prompt_length))
        return out

    def processors(self, prompt_length: int, eos_token_ids: Sequence[int], device: torch.device) -> LogitsProcessorList:
        """The processor list ``generate()`` would apply with these settings.

        Args:
            prompt_length: prompt tokens (min new tokens and the OpenAI penalties count after it).
            eos_token_ids: the request's EOS ids (min length / min new tokens forbid them;
                bad words never ban a lone EOS, as in ``generate()``); empty = no EOS, so the
                min-length processors do nothing and are left out, as in ``generate()``.
            device: where the logits live.

        Returns:
            A :class:`transformers.LogitsProcessorList` (empty when :attr:`active` is False).
        """
        out = LogitsProcessorList()
        eos = torch.tensor(list(eos_token_ids), dtype=torch.long, device=device) if eos_token_ids else None
        if self.repetition_penalty != 1.0:
            out.append(RepetitionPenaltyLogitsProcessor(float(self.repetition_penalty)))
        if self.no_repeat_ngram_size > 0:
            out.append(NoRepeatNGramLogitsProcessor(self.no_repeat_ngram_size))
        if self.bad_words_ids:
            out.append(NoBadWordsLogitsProcessor([list(w) for w in self.bad_words_ids], eos))
        if self.min_length > 0 and eos is not None:
            out.append(MinLengthLogitsProcessor(self.min_length, eos, device=str(device)))
        if self.min_new_tokens > 0 and eos is not None:
            out.append(MinNewTokensLengthLogitsProcessor(prompt_length, self.min_new_tokens, eos, device=str(device)))
        if self.suppress_tokens:
            out.append(SuppressTokensLogitsProcessor(list(self.suppress_tokens), device=str(device)))
        out.extend(self.custom_processors(prompt_length))
        return out


def effective_settings(config: GenerationConfig, checkpoint: dict[str, object], vocab_size: int) -> LogitsSettings:
    """Merge a request's settings over the checkpoint's and check them against the vocabulary.

    Args:
        config: the request (``None`` fields of its ``sampling`` are unset).
        checkpoint: the checkpoint's own settings (:func:`decoding.backends.models.generation_defaults`,
            ``LoadedModel.generation_defaults``).
        vocab_size: the target model's vocabulary size (logits width).

    Returns:
        The effective :class:`LogitsSettings`.

    Raises:
        GenerationSettingError: a token id in ``logit_bias`` / ``bad_words_ids`` /
            ``suppress_tokens`` is outside ``[0, vocab_size)`` (the field is named), or the
            checkpoint sets something the engine cannot apply exactly (that setting is named).
    """
    unsupported = [k for k in checkpoint if k not in CHECKPOINT_APPLIED and k not in CHECKPOINT_SAMPLING]
    if unsupported:
        name = unsupported[0]
        raise GenerationSettingError(name, f"the checkpoint's generation_config sets {name}={checkpoint[name]!r}, "
                                           "which this engine cannot apply exactly; generate() would, so the "
                                           "request is refused rather than answered differently")
    values: dict[str, Any] = {}
    inherited: list[str] = []
    for name in CHECKPOINT_APPLIED:
        mine = getattr(config.sampling, name, None)
        if mine is None and name in checkpoint:
            values[name], mine = checkpoint[name], checkpoint[name]
            inherited.append(name)
        elif mine is not None:
            values[name] = mine
    values = {k: v for k, v in values.items() if v is not None}
    settings = LogitsSettings(
        **values, logit_bias=tuple(config.sampling.logit_bias or ()),
        frequency_penalty=config.sampling.frequency_penalty, presence_penalty=config.sampling.presence_penalty,
        from_checkpoint=tuple(inherited),
        checkpoint_sampling=tuple((k, checkpoint[k]) for k in CHECKPOINT_SAMPLING if k in checkpoint))
    for name, ids in (("logit_bias", [t for t, _ in settings.logit_bias]),
                      ("bad_words_ids", [t for w in settings.bad_words_ids for t in w]),
                      ("suppress_tokens", list(settings.suppress_tokens))):
        bad = sorted({t for t in ids if not 0 <= t < vocab_size})
        if bad:
            raise GenerationSettingError(name, f"token ids outside the vocabulary [0, {vocab_size}): {bad[:5]}")
    if not settings.repetition_penalty > 0:  # a checkpoint value; requests are validated on construction
        raise GenerationSettingError("repetition_penalty", f"must be > 0, got {settings.repetition_penalty}")
    return settings
