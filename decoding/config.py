"""Per-request generation settings: how tokens are chosen, when generation stops, how it speculates."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from decoding.drafters.base import DraftingMode


class GenerationSettingError(ValueError):
    """A generation setting is out of range, malformed, or cannot be applied exactly.

    Attributes:
        field: the offending setting's name (a field of :class:`Sampling`, :class:`Budget` or
            :class:`Speculation`, which the web API names alike, or a checkpoint
            ``generation_config`` field the engine cannot apply), for a 4xx response naming it.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class SpeculationMode(StrEnum):
    """How a request speculates (the output is the same in every mode; only its speed differs).

    ``ADAPTIVE`` (alone: the cost-aware policy; in a batch: γ per request from the batch's cost,
    :mod:`decoding.planning.batch_policy`), ``OFF`` (one token per target pass), ``FIXED`` (every
    round drafts ``num_speculative_tokens`` with the one drafter ``drafting`` names, bypassing the
    policy, as gpt-fast's ``speculate_k``), ``TABLE`` (vLLM-style: γ looked up by batch size in the
    engine's ``BatchSpeculation.table``, at every size). How each plans: :mod:`decoding.planning.round`.
    A :class:`~enum.StrEnum`: ``"fixed"`` and ``SpeculationMode.FIXED`` compare equal, serialise and
    print alike, so settings, the CLI and the web API's ``speculation`` take the same strings.
    """

    ADAPTIVE = "adaptive"
    OFF = "off"
    FIXED = "fixed"
    TABLE = "table"


#: The range of ``num_speculative_tokens`` (γ ceiling per round), the one bound that the request
#: (:class:`Speculation`), the engine (:class:`~decoding.core.EngineConfig`), the settings and the
#: web API all check against.
NUM_SPECULATIVE_TOKENS_RANGE = (1, 32)


def check_num_speculative_tokens(value: object) -> int:
    """``value`` as a γ ceiling (tokens drafted per round at most).

    Raises:
        TypeError: not an int (a bool is none).
        ValueError: outside :data:`NUM_SPECULATIVE_TOKENS_RANGE`.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"num_speculative_tokens must be an int, got {value!r}")
    low, high = NUM_SPECULATIVE_TOKENS_RANGE
    if not low <= int(value) <= high:
        raise ValueError(f"num_speculative_tokens must be in [{low}, {high}], got {value}")
    return int(value)


@dataclass(frozen=True)
class Sampling:
    """How each token is chosen from the target's logits.

    The logits-processing fields (``repetition_penalty`` ... ``presence_penalty``) use
    transformers' own processors or OpenAI's documented semantics (:mod:`decoding.logits`).
    For the first five, ``None`` means "unset": the checkpoint's ``generation_config`` value
    applies, as in ``generate()``; any explicit value (e.g. ``repetition_penalty=1.0``)
    overrides it. Token ids are checked against the model's vocabulary when the request
    starts (:func:`decoding.logits.effective_settings`). The checkpoint's sampling defaults
    (``do_sample``, ``temperature``, ``top_k``, ``top_p``, ...) are not inherited: ``temperature``
    (0 = greedy) decides; they are reported in the result stats.

    Raises:
        TypeError / ValueError: on construction, for a field of the wrong type or range;
            :class:`GenerationSettingError` (a ValueError naming ``field``) for the
            logits-processing fields.

    Attributes:
        temperature: 0 selects greedy decoding (the exactness contract); > 0 samples.
        top_k: keep the k most likely tokens when sampling (0 = off).
        top_p: nucleus sampling mass (1.0 = off).
        seed: with ``temperature > 0``, the token at output position t is the Gumbel-max
            sample drawn with noise seeded by (seed, t) only, so a seed reproduces its sample
            whatever the drafter, γ or calibration (:mod:`decoding.sampling`); ``None`` = a
            random seed per request.
        repetition_penalty: > 0; CTRL's penalty (Keskar et al. 2019) on every token already in
            prompt + output (1.0 = off).
        no_repeat_ngram_size: >= 0; no n-gram of this size occurs twice in prompt + output (0 = off).
        min_new_tokens: >= 0; EOS is forbidden before this many new tokens (0 = off).
        bad_words_ids: token sequences never generated (the last id of each is banned after
            the others); ``()`` = none. Lists are stored as tuples.
        suppress_tokens: ids never generated; ``()`` = none.
        logit_bias: OpenAI ``logit_bias``: ``{token id: bias}``, bias in [-100, 100], added to
            the logits at every position (string keys such as ``"50256"`` are accepted). Stored
            as sorted ``(id, bias)`` pairs; ``None`` or empty = none.
        frequency_penalty, presence_penalty: OpenAI penalties in [-2, 2]: the logit of token
            j drops by ``c[j] * frequency_penalty + (c[j] > 0) * presence_penalty``, c[j] = its
            count in the output so far (the prompt is not counted).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    repetition_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    min_new_tokens: int | None = None
    bad_words_ids: tuple[tuple[int, ...], ...] | None = None
    suppress_tokens: tuple[int, ...] | None = None
    logit_bias: tuple[tuple[int, float], ...] | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0

    def __post_init__(self) -> None:
        self._check_logits_settings()
        if not _is_int(self.top_k):
            raise TypeError(f"top_k must be an int, got {self.top_k!r}")
        if self.seed is not None and not _is_int(self.seed):
            raise TypeError(f"seed must be an int or None, got {self.seed!r}")
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"{name} must be a number, got {value!r}")
        if not (math.isfinite(self.temperature) and math.isfinite(self.top_p)):
            raise ValueError(f"temperature and top_p must be finite, got {self.temperature}, {self.top_p}")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")

    @property
    def greedy(self) -> bool:
        """``temperature`` 0: the target's argmax at every position."""
        return self.temperature == 0.0

    def _set(self, name: str, value: object) -> None:
        """Replace a field of this frozen dataclass (its normalized form, during validation)."""
        object.__setattr__(self, name, value)

    def _check_logits_settings(self) -> None:
        """Validate (and normalize to tuples) the logits-processing fields."""
        if self.repetition_penalty is not None:
            self._set("repetition_penalty", _real("repetition_penalty", self.repetition_penalty))
            if not self.repetition_penalty > 0:
                raise GenerationSettingError("repetition_penalty",
                                             f"must be > 0 (1.0 = off), got {self.repetition_penalty}")
        for name in ("no_repeat_ngram_size", "min_new_tokens"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 0):
                raise GenerationSettingError(name, f"must be an int >= 0 (0 = off), got {value!r}")
        if self.bad_words_ids is not None:
            words = _id_sequences("bad_words_ids", self.bad_words_ids)
            if any(not w for w in words):
                raise GenerationSettingError("bad_words_ids", "each banned sequence needs at least one token id")
            self._set("bad_words_ids", words)
        if self.suppress_tokens is not None:
            self._set("suppress_tokens", _ids("suppress_tokens", self.suppress_tokens))
        if self.logit_bias is not None:
            self._set("logit_bias", _logit_bias(self.logit_bias))
        for name in ("frequency_penalty", "presence_penalty"):
            value = _real(name, getattr(self, name))
            if not -2.0 <= value <= 2.0:
                raise GenerationSettingError(name, f"must be in [-2, 2], got {value}")
            self._set(name, value)


#: The answer budget when a request names none (tokens): the library's and the server's default
#: (``copilot.config.Settings.max_new_tokens`` starts from it).
DEFAULT_MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class Budget:
    """How long generation may run and what ends it.

    Raises:
        TypeError / ValueError: on construction, for a field of the wrong type or range.

    Attributes:
        max_new_tokens: hard budget of generated tokens (EOS included); 0 returns nothing.
        stop_strings: generation ends at the token that completes any of them;
            the returned text ends just before the stop string.
        eos_token_ids: token ids that end generation (included in the ids, not in
            the text). ``None`` uses the model's; an empty tuple disables EOS.
        loop_span: the loop stop's span L in tokens (:class:`decoding.stopping.LoopDetector`):
            when the last L output tokens occurred twice before, generation ends with
            ``finish_reason`` ``"repetition"``, the output cut before the repeats.
            0 (the default) = no loop stop: plain greedy semantics.
    """

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    stop_strings: tuple[str, ...] = ()
    eos_token_ids: tuple[int, ...] | None = None
    loop_span: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.stop_strings, str) or not all(isinstance(s, str) for s in self.stop_strings):
            raise TypeError(f"stop_strings must be a sequence of strings, got {self.stop_strings!r}")
        if self.eos_token_ids is not None and (not isinstance(self.eos_token_ids, (tuple, list))
                                               or not all(_is_int(t) for t in self.eos_token_ids)):
            raise TypeError(f"eos_token_ids must be a tuple of ints or None, got {self.eos_token_ids!r}")
        for name in ("max_new_tokens", "loop_span"):
            if not _is_int(getattr(self, name)):
                raise TypeError(f"{name} must be an int, got {getattr(self, name)!r}")
        if self.eos_token_ids is not None and any(t < 0 for t in self.eos_token_ids):
            raise ValueError(f"eos_token_ids must be non-negative, got {self.eos_token_ids!r}")
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.loop_span < 0:
            raise ValueError(f"loop_span must be >= 0 (0 = no loop stop), got {self.loop_span}")
        if any(not s for s in self.stop_strings):
            raise ValueError("stop strings must be non-empty")


@dataclass(frozen=True)
class Speculation:
    """How a request drafts. Drafting only: the output is the same whatever these are.

    Raises:
        TypeError / ValueError: on construction, for a field of the wrong type or range.

    Attributes:
        mode: a :class:`SpeculationMode` (a plain string such as ``"fixed"`` is converted);
            ``"off"`` implies ``drafting`` ``OFF`` (normalized).
        drafting: a :class:`DraftingMode` (a plain string such as ``"ngram"`` is converted):
            which drafters the mode may use: ``AUTO`` (all the engine's), ``NGRAM``,
            ``DRAFT_MODEL``, or ``OFF`` (none: plain one-token-per-pass decoding in our loop).
            Mode ``"fixed"`` needs one drafter (``NGRAM`` or ``DRAFT_MODEL``).
        num_speculative_tokens: γ ceiling per round, in :data:`NUM_SPECULATIVE_TOKENS_RANGE`; the
            policy may choose fewer.
        history_partition: the part of the engine's answer history this request drafts from
            and adds its answer to (:class:`decoding.drafters.ngram.AnswerHistory`): requests of
            one access scope share one; ``""`` (the default) is the shared one.
    """

    mode: SpeculationMode = SpeculationMode.ADAPTIVE
    drafting: DraftingMode = DraftingMode.AUTO
    num_speculative_tokens: int = 16
    history_partition: str = ""

    def __post_init__(self) -> None:
        if self.mode not in tuple(SpeculationMode):
            raise ValueError(f"mode must be {'|'.join(m.value for m in SpeculationMode)}, got {self.mode!r}")
        object.__setattr__(self, "mode", SpeculationMode(self.mode))
        if self.drafting not in tuple(DraftingMode):
            raise ValueError(f"drafting must be {'|'.join(m.value for m in DraftingMode)}, got {self.drafting!r}")
        object.__setattr__(self, "drafting",
                           DraftingMode.OFF if self.mode is SpeculationMode.OFF else DraftingMode(self.drafting))
        if not isinstance(self.history_partition, str):
            raise TypeError(f"history_partition must be a string, got {self.history_partition!r}")
        check_num_speculative_tokens(self.num_speculative_tokens)
        if self.mode is SpeculationMode.FIXED and not self.drafting.single:
            raise ValueError(f"mode 'fixed' needs drafting 'ngram' or 'draft_model', got {self.drafting!r}")


@dataclass(frozen=True)
class GenerationConfig:
    """What to generate, by concern; each part checks itself when built.

    Attributes:
        sampling: how each token is chosen (:class:`Sampling`).
        budget: how long generation may run and what ends it (:class:`Budget`).
        speculation: how the request drafts; never changes the output (:class:`Speculation`).

    Raises:
        TypeError: a part of the wrong type.
    """

    sampling: Sampling = field(default_factory=Sampling)
    budget: Budget = field(default_factory=Budget)
    speculation: Speculation = field(default_factory=Speculation)

    def __post_init__(self) -> None:
        for name, kind in (("sampling", Sampling), ("budget", Budget), ("speculation", Speculation)):
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"{name} must be a {kind.__name__}, got {getattr(self, name)!r}")


def _is_int(value: object) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _real(name: str, value: object) -> float:
    """A finite real number as a float, else :class:`GenerationSettingError`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise GenerationSettingError(name, f"must be a finite number, got {value!r}")
    return float(value)


def _ids(name: str, values: object) -> tuple[int, ...]:
    """A sequence of token ids (ints >= 0) as a tuple."""
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__iter__"):
        raise GenerationSettingError(name, f"must be a sequence of token ids, got {values!r}")
    values = tuple(values)
    if not all(_is_int(t) and t >= 0 for t in values):
        raise GenerationSettingError(name, f"token ids must be ints >= 0, got {values!r}")
    return tuple(int(t) for t in values)


def _id_sequences(name: str, values: object) -> tuple[tuple[int, ...], ...]:
    """A sequence of token-id sequences as a tuple of tuples."""
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__iter__"):
        raise GenerationSettingError(name, f"must be a list of token-id lists, got {values!r}")
    return tuple(_ids(name, v) for v in values)


def _logit_bias(values: object) -> tuple[tuple[int, float], ...]:
    """OpenAI ``logit_bias`` (a mapping, or ``(id, bias)`` pairs) as sorted ``(id, bias)`` pairs."""
    if not isinstance(values, Iterable) or isinstance(values, (str, bytes)):
        raise GenerationSettingError("logit_bias", f"must map token ids to numbers, got {values!r}")
    out: dict[int, float] = {}
    try:
        pairs: list[Any] = list(values.items() if isinstance(values, Mapping) else values)
        for key, bias in pairs:
            if isinstance(key, str) and key.strip().isdigit():
                key = int(key)
            if not _is_int(key) or key < 0:
                raise GenerationSettingError("logit_bias", f"keys must be token ids (ints >= 0), got {key!r}")
            bias = _real("logit_bias", bias)
            if not -100.0 <= bias <= 100.0:
                raise GenerationSettingError("logit_bias", f"bias for token {key} must be in [-100, 100], got {bias}")
            out[int(key)] = bias
    except (TypeError, ValueError) as exc:
        if isinstance(exc, GenerationSettingError):
            raise
        raise GenerationSettingError("logit_bias", f"must map token ids to numbers, got {values!r}") from None
    return tuple(sorted(out.items()))


#: The settings of a request that sets none (a frozen value: a safe shared default; the server's
#: settings start from its values).
DEFAULT_CONFIG = GenerationConfig()
