"""Settings: every default overridable by ``COPILOT_*`` environment variables or a config file.

Precedence (highest first): constructor arguments, environment variables, a ``.env``
file, the TOML/YAML file named by ``COPILOT_CONFIG_FILE``, the defaults below.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from copilot.access import KeyRing, KeysFile, load_keys_file
from copilot.answer.grounding import MIN_SUPPORT
from decoding.backends.embedded import QWEN_CODER_05B, QWEN_CODER_15B
from decoding.backends.models import resolve_device
from decoding.config import DEFAULT_CONFIG, DEFAULT_MAX_NEW_TOKENS, NUM_SPECULATIVE_TOKENS_RANGE
from decoding.core import DEFAULT_ENGINE_CONFIG
from decoding.drafters.base import DraftingMode
from ingestion.stores.database import mask_url

#: ``target_model`` default: the measured best per device (:func:`default_target`).
AUTO_TARGET = "auto"


def default_target(device: str, backend: str = "auto") -> str:
    """What ``target_model = "auto"`` loads on ``device`` with ``backend``: the Qwen2.5-Coder 1.5B
    on CUDA (with the 0.5B as draft) and on a CPU where llama.cpp runs it (installed, not turned
    off, its part wheels present: the better answers within the time goals on 2 cores,
    evals/results/README.md); else the 0.5B (the 1.5B's fp32 torch path is too slow on a CPU)."""
    if resolve_device(device).type == "cuda":
        return QWEN_CODER_15B.name
    llama_cpp = backend != "torch" and importlib.util.find_spec("llama_cpp") is not None
    return QWEN_CODER_15B.name if llama_cpp and not QWEN_CODER_15B.missing_parts() else QWEN_CODER_05B.name


class Settings(BaseSettings):
    """OpsCopilot configuration (env prefix ``COPILOT_``, e.g. ``COPILOT_MAX_SOURCES=8``)."""

    model_config = SettingsConfigDict(env_prefix="COPILOT_", env_file=".env", extra="ignore")

    # storage
    data_dir: Path = Field(Path(".opscopilot"), description="chroma store, lexical index, model cache")
    model_dir: Path | None = Field(None, description="cache of converted models (default: DATA_DIR/models)")
    chroma_url: str | None = Field(None, description="Chroma server URL (http://host:port) for the dense index; "
                                   "embedded Chroma (or pgvector with database_url) if unset")
    database_url: str | None = Field(None, description="PostgreSQL URL (postgresql://user:password@host:5432/db) of "
                                     "the store several replicas share: lexical index, manifest, ingest jobs, and the "
                                     "dense index (pgvector) unless chroma_url is set; SQLite in data_dir if unset")
    collection: str = "opscopilot"
    embedding_model: str | None = Field(None, description="HF id or path; default: embedded all-MiniLM-L6-v2")

    # models and decoding
    target_model: str = Field(AUTO_TARGET, description="auto (embedded:qwen2.5-coder-1.5b-instruct on CUDA and on a "
                              "CPU with llama.cpp, else embedded:qwen2.5-coder-0.5b-instruct: chosen by measurement, "
                              "see evals/results/README.md), an embedded:... name, or any HF id or local path")
    draft_model: str | None = Field(
        "auto", description="auto (the same-family embedded:qwen2.5-coder-0.5b-instruct for the embedded 1.5B "
        "target; on CPU otherwise derived:int4 built in the background and kept only when its calibration shows it "
        "pays; none elsewhere), an embedded:... name, an HF id or local path, derived:int4, derived:int8, "
        "derived:layers:N, or empty for none")
    backend: Literal["auto", "torch", "llama.cpp"] = Field(
        "auto", description="what runs the target: auto (llama.cpp for a GGUF target on the CPU when "
        "llama-cpp-python is installed, else torch) | torch | llama.cpp")
    device: str = Field("auto", pattern=r"^(auto|cpu|mps|cuda(:\d+)?)$", description="auto | cpu | cuda | cuda:N")
    target_url: str | None = Field(None, pattern=r"^https?://\S+$", description="an OpenAI-compatible base URL "
                                   "(http://host:8000/v1: vLLM, llama.cpp's server, Ollama, another OpsCopilot) that "
                                   "decodes the prompts this service builds, instead of the in-process engine; "
                                   "target_model then names only the served model's tokenizer and chat template")
    target_api_key: SecretStr | None = Field(None, description="bearer key for target_url")
    target_served_model: str | None = Field(None, min_length=1, description="the model name to ask target_url for "
                                            "(default: the first its /v1/models lists)")
    target_timeout_s: float = Field(120.0, gt=0, le=3600, description="one completion from target_url in all, "
                                    "and any wait for its next chunk (s); never retried")
    dtype: Literal["auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16"] = Field(
        "auto", description="auto (bf16 on CUDA, fp32 on CPU) | float32 | bfloat16 | float16")
    drafting: DraftingMode = DEFAULT_CONFIG.speculation.drafting
    num_speculative_tokens: int = Field(DEFAULT_CONFIG.speculation.num_speculative_tokens,
                                        ge=NUM_SPECULATIVE_TOKENS_RANGE[0], le=NUM_SPECULATIVE_TOKENS_RANGE[1])
    max_ngram: int = Field(DEFAULT_ENGINE_CONFIG.max_ngram, ge=1, le=16)
    min_ngram: int = Field(DEFAULT_ENGINE_CONFIG.min_ngram, ge=1, le=16)
    answer_history: int = Field(DEFAULT_ENGINE_CONFIG.answer_history, ge=0, le=512,
                                description="recent answers the n-gram drafter also drafts from "
                                "(0 = none; answers are shared by the users of one access scope)")
    prefix_cache: int = Field(DEFAULT_ENGINE_CONFIG.prefix_cache_entries, ge=0, le=64,
                              description="finished answers whose prompt KV cache is kept for exact "
                              "prefix reuse (a question asked again is not prefilled; a prompt sharing whole "
                              "prefill chunks copies them); on llama.cpp each holds an idle sequence slot (the "
                              "engine has max_batch + max(this, 2)), given up to a new request that needs it (0 = off)")
    conversation_turns: int = Field(4, ge=0, le=16, description="a follow-up's earlier questions shown to the "
                                    "model with their own sources, as first asked (searched again), so the previous "
                                    "prompt is a prefix of the next and its KV cache is reused; sources are numbered "
                                    "across the conversation (0 = earlier turns as bare text, citations removed)")
    torch_threads: int | None = Field(None, ge=1, description="CPU threads for torch and llama.cpp (default: torch's)")
    loop_stop: bool = Field(True, description="end an answer that starts repeating itself (finish_reason "
                            "'repetition'), cut before the repeats")
    loop_span: int = Field(20, ge=4, le=256, description="loop stop: the last N tokens occurred twice before "
                           "(20: no false stop on the 112 documents of both corpora but one)")

    # retrieval and prompting
    max_sources: int | None = Field(None, ge=1, le=100, description="source documents per question (default: the "
                              "prompt style's)")
    prompt_style: str = Field("default", description="how sources are shown to the model: default (the measured "
                              "best for the target's family) or a name from "
                              "copilot.answer.prompting.PROMPT_STYLES (tuned by copilot eval answers)")
    max_new_tokens: int = Field(DEFAULT_MAX_NEW_TOKENS, ge=0, description="answer budget when a request names none "
                                "(tokens)")
    max_new_tokens_cap: int = Field(1024, ge=1, description="requests asking for more get a 400")
    max_prompt_tokens: int = Field(1792, ge=256, description="prompt budget (passages + history + question)")
    max_model_len: int | None = Field(None, ge=512, description="context window used (prompt + answer, tokens), "
                                      "at most the target's own (default: the target's; on llama.cpp, which reserves "
                                      "its KV cells up front, max_prompt_tokens + max_new_tokens)")
    kv_cache_type: Literal["f16", "q8_0"] | None = Field(None, description="llama.cpp's KV cache type (default: "
                                                         "q8_0 where the build has its row-wise flash attention, "
                                                         "else f16; q8_0 needs it)")
    max_question_chars: int = Field(4000, ge=1)
    min_support: float = Field(MIN_SUPPORT, ge=0.0, le=1.0, description="answer 'not found' when the best evidence "
                               "line's similarity to the question is below this (0 = only the named-entity rule)")

    # web API
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="Bearer keys (comma-separated in the environment); empty = no auth")
    keys_file: Path | None = Field(None, description="TOML or YAML file of API keys with scopes (name, key or "
                                   "key_sha256, doc_types, sources, ingest, delete; an optional public scope): "
                                   "see copilot.access; api_keys stay full-access keys")
    require_key_for_ask: bool = Field(False, description="ask and chat need a key even with public_reads")
    max_body_bytes: int = Field(1_000_000, ge=1024, description="JSON request body limit (bytes)")
    max_upload_bytes: int = Field(50_000_000, ge=1024, description="multipart ingest upload limit (bytes)")
    max_upload_files: int = Field(100, ge=1, description="files per multipart ingest upload")
    ingest_root: Path | None = Field(None, description="server-side ingest paths must lie under it; unset = disabled")
    # followed sources (copilot.serving.source_watch)
    watch_paths: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, description="server-side files and folders the API server follows, re-ingesting what "
        "changes (comma-separated in the environment; relative to ingest_root or absolute inside it)")
    watch_prune: bool = Field(False, description="followed paths: delete the documents of files deleted under them")
    watch_poll: bool = Field(False, description="followed paths: poll instead of file system notifications "
                             "(network filesystems)")
    watch_debounce_s: float = Field(1.0, ge=0.1, le=60, description="followed paths: quiet time before changes "
                                    "are ingested (s)")
    watch_poll_interval_s: float = Field(1.0, ge=0.1, le=3600, description="followed paths: time between two "
                                         "scans when polling (s)")
    queue_size: int = Field(8, ge=1, description="requests waiting for admission to the decoding batch")
    max_batch: int = Field(8, ge=1, le=64, description="questions decoded together in one batch (1 = one at a time)")
    heartbeat_s: float = Field(5.0, gt=0, le=60, description="SSE comment sent this often while a stream waits (s)")
    replica_id: str | None = Field(None, description="names this API replica as the owner of its ingest jobs; "
                                   "must differ between live replicas (default: host name:bound port/pid)")
    job_lease_s: float = Field(30.0, ge=1, le=3600, description="an ingest job whose replica sent no heartbeat for "
                               "this long (s) is marked interrupted")
    retry_after_s: int = Field(5, ge=1, le=3600, description="minimum Retry-After hint when the queue is full (s)")
    model_alias: str = Field("opscopilot", min_length=1,
                             description="model id served by /v1/models besides the target's")
    public_reads: bool = Field(False, description="with API keys set, let GET /v1/documents, /v1/search, ask, chat "
                               "and /v1/models be used without a key (ask/chat still need one with "
                               "require_key_for_ask)")
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="origins allowed to call the API from a browser (comma-separated in the "
        "environment; '*' for any); empty = no CORS headers")
    log_format: Literal["text", "json"] = Field("text", description="server log lines: text, or one JSON object "
                                                "per line; both carry the request id")
    openai_sources_footer: bool = Field(True, description="append the numbered sources to the chat completion's "
                                        "message content (what Open WebUI and LangChain show); they are always in "
                                        "the extra 'sources' field")
    # -- alerts (POST /v1/alerts/alertmanager) ------------------------------------------------------
    alerts_keep: int = Field(1000, ge=1, le=1_000_000, description="past-incident answers to alerts kept (by "
                             "fingerprint; the oldest are deleted past it)")
    alerts_concurrency: int = Field(2, ge=1, le=64, description="alerts answered at once (the others wait; a burst "
                                    "of alerts never fills the generation queue operators' questions share)")
    alerts_backlog: int = Field(64, ge=1, le=100_000, description="alert answers waiting or under way at most; "
                                "firing alerts past it are deferred to their next notification")
    alerts_webhook_url: str | None = Field(None, pattern=r"^https?://\S+$", description="a chat incoming-webhook URL "
                                           "(Mattermost, Slack) each alert's answer is posted to as {\"text\": ...}")
    alerts_webhook_style: Literal["markdown", "slack"] = Field("markdown", description="how the posted answer links "
                                                               "its sources: markdown (Mattermost) or slack")
    public_url: str | None = Field(None, pattern=r"^https?://\S+$", description="this server's URL as users reach "
                                   "it (the links of posted answers); default: the URL the caller used")

    @property
    def kv_window(self) -> int:
        """llama.cpp's context window when ``max_model_len`` is unset: a default request's prompt
        budget plus its answer budget (tokens). llama.cpp reserves these KV cells for every batch
        place up front (28 KB a cell for the 1.5B): 0.57 GB at 2,048 × 10, against 0.86 GB at the
        3,072 a 1,024-token answer would need. A request asking more answer tokens than the default
        gets a smaller prompt budget (the window minus its answer budget)."""
        return self.max_prompt_tokens + self.max_new_tokens

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: object) -> object:
        """Settings renamed since an earlier release: a clear error rather than silently ignored."""
        given = set(data) if isinstance(data, dict) else set()
        if "top_k" in given or "COPILOT_TOP_K" in os.environ:
            raise ValueError("the top_k setting (COPILOT_TOP_K) was renamed max_sources (COPILOT_MAX_SOURCES)")
        return data

    _keys: KeysFile | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _load_keys(self) -> "Settings":
        """Read the keys file once, here: a bad one (or one repeating a flat key) stops start-up
        naming the file and the field."""
        if self.keys_file is not None:
            self._keys = load_keys_file(self.keys_file)
            KeyRing.build([k.get_secret_value() for k in self.api_keys], self._keys)
        return self

    @property
    def keys(self) -> KeysFile | None:
        """The keys file's keys and public scope (None without ``keys_file``)."""
        return self._keys

    @model_validator(mode="after")
    def _resolve_target(self) -> "Settings":
        if self.target_model == AUTO_TARGET:
            self.target_model = default_target(self.device, self.backend)
        return self

    @field_validator("prompt_style")
    @classmethod
    def _known_style(cls, v: str) -> str:
        from copilot.answer.prompting import PROMPT_STYLES

        if v != "default" and v not in PROMPT_STYLES:
            raise ValueError(f"unknown prompt style {v!r}; known: {', '.join(PROMPT_STYLES)}")
        return v

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, v: object) -> object:
        if isinstance(v, str):
            keys = [k.strip() for k in v.split(",") if k.strip()]
            if v.strip() and not keys:
                raise ValueError("api_keys is set but holds no key (only commas/blanks); unset it to disable auth")
            return keys
        return v

    @field_validator("watch_paths", mode="before")
    @classmethod
    def _split_paths(cls, v: object) -> object:
        if isinstance(v, str):
            return [p.strip() for p in v.split(",") if p.strip()]
        return v

    @model_validator(mode="after")
    def _check_watch_paths(self) -> "Settings":
        """Followed paths lie under the ingest root (a clear error at start otherwise)."""
        if self.watch_paths:
            from copilot.serving.source_watch import check_watch_paths

            self.watch_paths = check_watch_paths(self.watch_paths, self.ingest_root)
        return self

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, v: object) -> object:
        if isinstance(v, str):
            return [o.strip() for o in v.split(",") if o.strip()]
        return v

    @classmethod
    def settings_customise_sources(
            cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings, dotenv_settings]
        config_file = os.environ.get("COPILOT_CONFIG_FILE")
        if config_file:
            path = Path(config_file)
            if not path.is_file():
                raise FileNotFoundError(f"COPILOT_CONFIG_FILE={config_file} does not exist")
            if path.suffix in (".yaml", ".yml"):
                sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
            else:
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    @property
    def model_cache_dir(self) -> Path:
        """Where converted models are cached (``model_dir``, else ``data_dir/models``)."""
        return self.model_dir or self.data_dir / "models"

    @property
    def uploads_dir(self) -> Path:
        """Where files uploaded to ``POST /v1/ingest`` are kept (``data_dir/uploads/<folder>/<name>``)."""
        return self.data_dir / "uploads"

    def masked(self) -> dict[str, object]:
        """Effective settings as JSON-able values; API keys and URL passwords masked."""
        out = self.model_dump(mode="json")
        out["api_keys"] = ["***" for _ in self.api_keys]
        for name in ("chroma_url", "database_url"):
            if getattr(self, name):
                out[name] = mask_url(getattr(self, name))
        return out


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (read once)."""
    return Settings()
