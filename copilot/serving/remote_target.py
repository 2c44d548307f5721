"""An external model server as the target: the service's prompts go to an OpenAI-compatible
``/v1/completions`` endpoint (vLLM, llama.cpp's server, Ollama, another OpsCopilot) instead of
the in-process engine.

Everything that makes an answer OpsCopilot's stays here: retrieval, grounding and "not found",
the prompt built within its token budget, citations checked as they stream, quotes checked
against the sources. Only the decoding moves. The prompt is sent as the exact chat-templated
text the in-process engine would decode, so the configured ``target_model`` names the
tokenizer (and chat template) of the served model — a Hugging Face id or folder, or the
embedded Qwen2.5-Coder default — and is loaded without weights. The server's own batching
and speculation decide the speed; we cannot vouch for its exactness
(``copilot eval exactness --target-url`` compares it with its speculation on and off where it
has that switch).

:class:`RemoteEngine` offers what the service and the scheduler use of
:class:`decoding.engine.SpeculativeEngine` (``target``, ``resolve``, ``stream``, ``batch``);
:class:`RemoteBatch` runs each admitted request's stream on a thread of its own, so requests
are in flight together (up to ``max_batch``), and hands the scheduler their events as they arrive.

A server is trusted with nothing but text, as a gateway trusts its upstream: its failures are
:class:`RemoteTargetError` naming it (answered 502, or 503 with its ``Retry-After`` for its 429, never
500); a reply that never says it finished (cut mid-stream, an HTML page, a non-streamed body) is
one of them; an answer is cut at the request's budget even when the server ignores ``max_tokens``;
one request waits at most ``target_timeout_s`` in all and is never retried (a retry would multiply
the wait); a request whose client left is dropped from the batch at once and its upstream closed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import httpx
import openai
from transformers import PreTrainedTokenizerBase

from copilot.config import Settings
from decoding.backends.models import load_tokenizer
from decoding.config import GenerationConfig, GenerationSettingError
from decoding.logits import LogitsSettings, effective_settings
from decoding.request import GenerationResult, StreamEvent
from decoding.stats import GenerationStats, RequestClock

log = logging.getLogger(__name__)

#: Seconds :meth:`RemoteBatch.step` waits for the first event of a round.
POLL_S = 0.05
#: Characters per token beyond which a streamed answer is over its budget whatever the server counts.
MAX_CHARS_PER_TOKEN = 32


class RemoteTargetError(RuntimeError):
    """The model server failed, refused the request or could not be reached (its reason included).

    Attributes:
        status: the HTTP status to answer with: 502 (a bad gateway), or 503 when the server said 429.
        retry_after_s: the server's ``Retry-After`` (seconds) with a 503, else ``None``.
    """

    def __init__(self, message: str, status: int = 502, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status, self.retry_after_s = status, retry_after_s


def _retry_after(exc: openai.APIStatusError) -> int:
    """The ``Retry-After`` seconds of an upstream refusal (1 when absent or not a number)."""
    try:
        return max(1, int(float(exc.response.headers.get("retry-after", "1"))))
    except ValueError:
        return 1


@dataclass
class RemoteTarget:
    """What the service reads of a target that a model server runs.

    Attributes:
        name: the model name the server is asked for.
        tokenizer: the served model's tokenizer (prompts are built and counted with it).
        max_positions: one request's context window (tokens, prompt + answer).
        url: the server's OpenAI-compatible base URL (``…/v1``).
    """

    name: str
    tokenizer: PreTrainedTokenizerBase
    max_positions: int
    url: str
    backend: str = "remote"
    generation_defaults: dict[str, object] = field(default_factory=dict)

    @property
    def model_type(self) -> str | None:
        """The tokenizer's model family when it knows it (``"qwen2"``), which picks the prompt style."""
        name = type(self.tokenizer).__name__.lower()
        return "qwen2" if name.startswith("qwen2") else None

    @property
    def vocab_size(self) -> int:
        """Tokens of the tokenizer (the served model's vocabulary)."""
        return len(self.tokenizer)

    def eos_token_ids(self) -> tuple[int, ...]:
        """The server applies its own end-of-generation tokens."""
        return ()


def completion_params(config: GenerationConfig, settings: LogitsSettings) -> dict[str, Any]:
    """OpenAI ``/v1/completions`` parameters for ``config``.

    Raises:
        GenerationSettingError: a setting the OpenAI API cannot carry (``top_k``,
            ``repetition_penalty``, ``no_repeat_ngram_size``, ``min_new_tokens``, ``bad_words_ids``,
            ``suppress_tokens``, ``eos_token_ids``): refused, never ignored.
    """
    sampling, budget = config.sampling, config.budget
    unsupported = {"top_k": sampling.top_k, "repetition_penalty": settings.repetition_penalty != 1.0,
                   "no_repeat_ngram_size": settings.no_repeat_ngram_size, "min_new_tokens": settings.min_new_tokens,
                   "bad_words_ids": settings.bad_words_ids, "suppress_tokens": settings.suppress_tokens,
                   "eos_token_ids": budget.eos_token_ids is not None}
    for name, used in unsupported.items():
        if used:
            raise GenerationSettingError(name, f"{name} cannot be sent to the external model server "
                                               "(COPILOT_TARGET_URL): the OpenAI API has no such parameter")
    params: dict[str, Any] = {"max_tokens": budget.max_new_tokens, "temperature": sampling.temperature,
                              "top_p": sampling.top_p}
    if sampling.seed is not None:
        params["seed"] = sampling.seed
    if budget.stop_strings:
        params["stop"] = list(budget.stop_strings)
    if settings.logit_bias:
        params["logit_bias"] = {str(t): b for t, b in settings.logit_bias}
    if settings.frequency_penalty:
        params["frequency_penalty"] = settings.frequency_penalty
    if settings.presence_penalty:
        params["presence_penalty"] = settings.presence_penalty
    return params


class RemoteEngine:
    """The target on a model server, through the ``openai`` client (its retries honour
    ``Retry-After``; a disconnect stops the server's generation).

    Args:
        url: the server's OpenAI-compatible base URL (``http://host:8000/v1``).
        tokenizer: the served model's tokenizer.
        model: the model name to ask for; ``None`` = the first one the server's ``/v1/models`` lists.
        api_key: its bearer key (``None``: none is sent).
        max_positions: one request's context window (tokens).
        timeout_s: one completion in all, and any wait for its next chunk (seconds).
        max_retries: retries of the model listing (the client's backoff); a completion is never retried.

    Attributes:
        extra_body: fields added to every request (e.g. ``{"speculation": "off"}`` for an
            OpsCopilot server); none at first.

    Raises:
        RemoteTargetError: ``model`` is ``None`` and the server lists no model (or cannot be reached).
    """

    def __init__(self, url: str, tokenizer: PreTrainedTokenizerBase, *, model: str | None = None,
                 api_key: str | None = None, max_positions: int = 4096, timeout_s: float = 300.0,
                 max_retries: int = 2) -> None:
        self.client = openai.OpenAI(base_url=url, api_key=api_key or "none", timeout=timeout_s,
                                    max_retries=max_retries)
        self.completions = self.client.with_options(max_retries=0).completions
        self.timeout_s = timeout_s
        self.extra_body: dict[str, Any] = {}
        self.target = RemoteTarget(model or self._first_model(url), tokenizer, max_positions, url)

    def _first_model(self, url: str) -> str:
        try:
            models = [m.id for m in self.client.models.list()]
        except openai.OpenAIError as exc:
            raise RemoteTargetError(f"the model server at {url} did not list its models: {exc}") from exc
        if not models:
            raise RemoteTargetError(f"the model server at {url} lists no model; set COPILOT_TARGET_SERVED_MODEL")
        return models[0]

    def ping(self, timeout_s: float = 2.0) -> None:
        """Raise :class:`RemoteTargetError` (naming the server) unless it lists its models within
        ``timeout_s`` seconds (no retries): what ``/readyz`` asks."""
        try:
            self.client.with_options(max_retries=0, timeout=timeout_s).models.list()
        except openai.OpenAIError as exc:
            raise RemoteTargetError(f"the model server at {self.target.url} does not answer: {exc}") from exc

    def resolve(self, config: GenerationConfig) -> LogitsSettings:
        """``config``'s effective logits settings, checked for what the server can be sent.

        Raises:
            GenerationSettingError: as :func:`completion_params`.
        """
        settings = effective_settings(config, {}, self.target.vocab_size)
        completion_params(config, settings)
        return settings

    def stream(self, prompt_ids: Sequence[int], config: GenerationConfig, contexts: Sequence[Sequence[int]] = (),
               cancel: Callable[[], bool] | None = None, settings: LogitsSettings | None = None,
               opened: Callable[[Any], None] | None = None) -> Iterator[StreamEvent]:
        """Stream the server's completion of ``prompt_ids`` (sent as their text): a
        :class:`StreamEvent` per text delta, the last one with the result (its ids are the
        text's tokens; its stats the times measured here and the server's usage).

        The answer ends ``length`` at ``max_new_tokens`` chunks (or :data:`MAX_CHARS_PER_TOKEN`
        characters per token) even if the server goes on; the upstream response is then closed.

        Args:
            opened: called with the upstream response once it is open (its ``close()`` stops it
                from another thread).
        Raises:
            RemoteTargetError: the server failed, refused (503 for its 429), stalled past
                ``timeout_s``, or ended its reply without saying it finished (its URL named).
        """
        params = completion_params(config, settings or self.resolve(config))
        tokenizer = self.target.tokenizer
        prompt = tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
        stats = GenerationStats(prompt_tokens=len(prompt_ids), backend=f"remote ({self.target.url})")
        clock = RequestClock(stats)
        clock.start()
        parts: list[str] = []
        finish: str | None = None
        usage = None
        budget, deadline, chars = config.budget.max_new_tokens, time.monotonic() + self.timeout_s, 0
        url = self.target.url
        try:
            chunks = self.completions.create(model=self.target.name, prompt=prompt, stream=True,
                                             stream_options={"include_usage": True},
                                             extra_body=self.extra_body or None, **params)
            if opened is not None:
                opened(chunks)
            with chunks:
                for chunk in chunks:
                    if cancel is not None and cancel():
                        finish = "cancelled"
                        break
                    if time.monotonic() > deadline:
                        raise RemoteTargetError(f"the model server at {url} did not finish within "
                                                f"{self.timeout_s:g} s (COPILOT_TARGET_TIMEOUT_S)")
                    usage = chunk.usage or usage
                    if not chunk.choices:
                        continue
                    choice = chunk.choices[0]
                    if choice.finish_reason:
                        finish = "stop" if choice.finish_reason == "stop" and config.budget.stop_strings else (
                            "eos" if choice.finish_reason == "stop" else choice.finish_reason)
                    if choice.text:
                        if not parts:
                            clock.prefilled()
                            clock.first_token()
                        parts.append(choice.text)
                        chars += len(choice.text)
                        yield StreamEvent(choice.text)
                        if len(parts) >= budget or chars > budget * MAX_CHARS_PER_TOKEN:
                            finish = finish or "length"  # a server that ignores max_tokens is cut here
                            break
        except openai.RateLimitError as exc:
            raise RemoteTargetError(f"the model server at {url} is busy (429): {exc.message}", 503,
                                    _retry_after(exc)) from exc
        except openai.APIStatusError as exc:
            raise RemoteTargetError(f"the model server at {url} answered {exc.status_code}: {exc.message}") from exc
        except (openai.APITimeoutError, httpx.TimeoutException) as exc:  # the stream's own reads raise httpx's
            raise RemoteTargetError(f"the model server at {url} sent nothing for {self.timeout_s:g} s "
                                    "(COPILOT_TARGET_TIMEOUT_S)") from exc
        except (openai.OpenAIError, httpx.HTTPError) as exc:
            raise RemoteTargetError(f"the model server at {url} failed: {exc}") from exc
        except (ValueError, TypeError, AttributeError, KeyError) as exc:  # not an OpenAI stream
            raise RemoteTargetError(f"the model server at {url} sent a reply that is not an OpenAI completion "
                                    f"stream ({type(exc).__name__}: {exc})") from exc
        if finish is None:
            raise RemoteTargetError(f"the model server at {url} ended its reply without a finish_reason (cut off "
                                    "mid-answer, or not an OpenAI completion stream)")
        text = "".join(parts)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
        stats.new_tokens = usage.completion_tokens if usage is not None else len(ids)
        stats.finish_reason = finish
        if parts:
            clock.decoded()
        clock.finished()
        yield StreamEvent("", [], GenerationResult(list(ids), text, finish, stats))

    def batch(self) -> "RemoteBatch":
        """A :class:`RemoteBatch` of this engine's requests."""
        return RemoteBatch(self)


def remote_engine(settings: Settings) -> RemoteEngine:
    """The :class:`RemoteEngine` that ``settings.target_url`` names, with ``target_model``'s
    tokenizer; its context window is ``max_model_len``, else the prompt budget plus the answer cap.

    Raises:
        ModelLoadError: the tokenizer cannot be loaded.
        RemoteTargetError: no ``target_served_model`` and the server lists none.
    """
    assert settings.target_url, "remote_engine needs settings.target_url"
    key = settings.target_api_key.get_secret_value() if settings.target_api_key else None
    window = settings.max_model_len or settings.max_prompt_tokens + settings.max_new_tokens_cap
    engine = RemoteEngine(settings.target_url, load_tokenizer(settings.target_model, settings.model_cache_dir),
                          model=settings.target_served_model, api_key=key, max_positions=window,
                          timeout_s=settings.target_timeout_s)
    log.info("target: %s at %s (prompts built with %s's tokenizer)", engine.target.name, settings.target_url,
             settings.target_model)
    return engine


class _RemoteRequest:
    """One request in flight: its thread streams the server's events into the batch's queue.

    Args:
        stream: starts :meth:`RemoteEngine.stream` for this request, given its ``opened`` callback.
        cancel: the request's cancel check.
    """

    def __init__(self, stream: Callable[[Callable[[Any], None]], Iterator[StreamEvent]],
                 out: "queue.Queue[tuple[_RemoteRequest, Any]]", cancel: Callable[[], bool] | None) -> None:
        self.done = False
        self.cancel = cancel
        self._upstream: Any = None
        self._thread = threading.Thread(target=self._run, args=(stream, out), name="remote-target", daemon=True)
        self._thread.start()

    def _run(self, stream: Callable[[Callable[[Any], None]], Iterator[StreamEvent]],
             out: "queue.Queue[tuple[_RemoteRequest, Any]]") -> None:
        try:
            for event in stream(self._opened):
                out.put((self, event))
        except BaseException as exc:  # noqa: BLE001 - handed to the scheduler, which fails this request only
            out.put((self, exc))

    def _opened(self, upstream: Any) -> None:
        self._upstream = upstream
        if self.done:  # dropped before the server answered
            upstream.close()

    def drop(self) -> StreamEvent:
        """End this request now (its client left): the upstream response is closed, so a stalled
        server holds neither a batch slot nor a connection; the last event of a cancelled answer."""
        self.done = True
        if self._upstream is not None:
            try:
                self._upstream.close()
            except Exception:  # noqa: BLE001 - closing a connection another thread reads may raise there
                log.debug("closing a dropped request's upstream response failed", exc_info=True)
        return StreamEvent("", [], GenerationResult([], "", "cancelled", GenerationStats(finish_reason="cancelled")))


class RemoteBatch:
    """The scheduler's batch for a :class:`RemoteEngine`: requests stream concurrently, each on
    its own thread; :meth:`step` returns the events that arrived (waiting up to :data:`POLL_S`
    for the first). A failed request's entry is its exception, for the scheduler to fail it alone;
    a request whose client left ends at the next step, whatever its server is doing."""

    def __init__(self, engine: RemoteEngine) -> None:
        self.engine = engine
        self.active: list[_RemoteRequest] = []
        self._events: "queue.Queue[tuple[_RemoteRequest, Any]]" = queue.Queue()

    def __len__(self) -> int:
        return len(self.active)

    def add(self, prompt_ids: Sequence[int], config: GenerationConfig, contexts: Sequence[Sequence[int]] = (),
            cancel: Callable[[], bool] | None = None, settings: LogitsSettings | None = None,
            ) -> tuple[_RemoteRequest, list[StreamEvent]]:
        """Send a request (checked first: a refused setting raises here); its events come from :meth:`step`.

        Raises:
            GenerationSettingError: as :func:`completion_params`.
        """
        settings = settings if settings is not None else self.engine.resolve(config)  # refused here, not on the thread
        completion_params(config, settings)
        checked = settings

        def stream(opened: Callable[[Any], None]) -> Iterator[StreamEvent]:
            return self.engine.stream(prompt_ids, config, contexts, cancel, checked, opened)

        request = _RemoteRequest(stream, self._events, cancel)
        self.active.append(request)
        return request, []

    def step(self) -> list[tuple[_RemoteRequest, Any]]:
        """The events that arrived since the last step: ``(request, StreamEvent)``, or
        ``(request, exception)`` for a request that failed (it has then left the batch); a request
        whose ``cancel`` says so ends with a ``cancelled`` result (and nothing of it after)."""
        out: list[tuple[_RemoteRequest, Any]] = [(r, r.drop()) for r in self.active
                                                 if r.cancel is not None and r.cancel()]
        arrived: list[tuple[_RemoteRequest, Any]] = []
        try:
            arrived.append(self._events.get(timeout=POLL_S))
            while True:
                arrived.append(self._events.get_nowait())
        except queue.Empty:
            pass
        for request, event in arrived:
            if request.done:  # dropped: its result is out already
                continue
            out.append((request, event))
            if isinstance(event, BaseException) or event.result is not None:
                request.done = True
        self.active = [r for r in self.active if not r.done]
        return out
