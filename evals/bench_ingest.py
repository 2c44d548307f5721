"""Ingest throughput benchmark: the pipeline against raw encoding of the same chunk texts.

Issue 23's goal: ingesting 100,000 small tickets (one 54 MB JSON Lines file, see
:mod:`evals.ticket_corpus`) runs at >= 0.8 x the throughput of encoding the very chunk texts
the pipeline produces with the same embedding model in the same process, on 2 cores.

Method (one run, one process, model loaded once):

1. the corpus is written, then loaded and chunked with the store's own loader and chunker, so
   the raw encoder gets exactly the texts the pipeline will store (checked after the run: the
   stored chunk texts must equal them, in order);
2. ``ingest_paths`` runs on the corpus into a fresh store. After every written batch its
   progress callback encodes the next slice of those texts, sorted by length as
   ``SentenceTransformer.encode`` sorts one whole list (so the raw side pays no more padding
   than a single ``encode`` of everything), with the same model, batch size and
   normalisation. Raw and pipeline work therefore alternate every batch, and a change of
   machine load hits both; the time spent in the callback is not counted as pipeline time;
3. wall and CPU times of both, their ratio, peak RSS (``ru_maxrss`` and a 0.5 s sampler),
   and the pipeline's progress lines (records done, rate, ETA) are reported as a table and
   as JSON (``--out``).

On SIGINT or SIGTERM the partial result is written (what was stored, what was not; the
stored batches stay stored, so ``copilot ingest`` resumes) and the exit status is 128 + signal.

``--mode corpus`` keeps the older measurement: the evals/data corpus copied ``--copies``
times, raw encode and pipeline interleaved in whole passes (A B A B ..., medians), plus an
unchanged re-ingest (goal: <= 1/20 of the first ingest).

``--stub-encoder`` replaces the model's forward pass with random vectors (same tokenizer, same
chunks): the pipeline's own cost per record at the full record count, for a run where encoding
100,000 records twice (raw and pipeline) does not fit the time at hand.

usage: python evals/bench_ingest.py [--records 100000] [--batch-chunks N] [--stub-encoder]
                                    [--out evals/out/bench_ingest.json]
       python evals/bench_ingest.py --mode corpus [--copies 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evals.ticket_corpus import write_tickets  # noqa: E402
from ingestion.embedding import Embedder  # noqa: E402
from ingestion.loaders import LoaderConfig, load_bytes  # noqa: E402
from ingestion.pipeline import (  # noqa: E402
    DEFAULT_BATCH_CHUNKS,
    IngestInterrupted,
    IngestOptions,
    IngestProgress,
    ingest_paths,
    stop_on_signals,
)
from ingestion.stores.chunk_store import ChunkStore  # noqa: E402

log = logging.getLogger("evals.bench_ingest")

CORPUS_PARTS = ("logbooks", "tickets", "shiftlogs", "postmortems")
#: Seconds between two progress lines.
PROGRESS_EVERY_S = 10.0


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class RssSampler:
    """Samples this process's resident set size (``/proc/self/statm``) every ``every_s`` seconds
    on a daemon thread; :attr:`max_mib` is the largest sample (MiB)."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.every_s = every_s
        self.max_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._page = os.sysconf("SC_PAGE_SIZE")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with open("/proc/self/statm") as handle:
                    rss = int(handle.read().split()[1]) * self._page / 2**20
            except OSError:
                return
            self.max_mib = max(self.max_mib, rss)
            self._stop.wait(self.every_s)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def chunk_texts(path: Path, store: ChunkStore) -> tuple[int, list[str]]:
    """(documents, chunk texts in pipeline order) of ``path`` as the store's loader and chunker
    build them; the source name is the file name (the pipeline's, for a single file)."""
    result = load_bytes(path.read_bytes(), path.name, name=path.name, config=LoaderConfig())
    return len(result.documents), [c.text for d in result.documents for c in store.chunker.chunk(d)]


@dataclass
class Interleaved:
    """The ``on_progress`` callback that encodes raw slices between the pipeline's batches.

    After each written batch it encodes as many of ``texts`` (sorted longest first, as
    ``SentenceTransformer.encode`` sorts) as the pipeline has written chunks so far; the
    wall (``raw_s``) and CPU (``raw_cpu_s``) seconds it spends are the raw measurement and are
    subtracted from the pipeline's. Logs a progress line (records, rate, ETA) every
    :data:`PROGRESS_EVERY_S`.
    """

    embedder: Embedder
    texts: list[str]
    raw_s: float = 0.0
    raw_cpu_s: float = 0.0
    encoded: int = 0
    last: IngestProgress | None = None
    progress_lines: list[str] = field(default_factory=list)
    _logged_at: float = 0.0

    def __post_init__(self) -> None:
        self.texts = sorted(self.texts, key=len, reverse=True)

    def __call__(self, p: IngestProgress) -> None:
        if p.current is None and self.last is not None:
            p = IngestProgress(**{**asdict(p), "current": self.last.current})
        self.last = p
        if time.monotonic() - self._logged_at >= PROGRESS_EVERY_S:
            self._logged_at = time.monotonic()
            self._progress_line(p)
        target = min(p.chunks_written, len(self.texts))
        if target > self.encoded:
            wall, cpu = time.perf_counter(), time.process_time()
            self.embedder.embed_array(self.texts[self.encoded:target])
            self.raw_s += time.perf_counter() - wall
            self.raw_cpu_s += time.process_time() - cpu
            self.encoded = target

    def finish(self) -> None:
        """Encode what the last batches left (a run ends with a write, so normally nothing)."""
        if self.last is not None:
            self(IngestProgress(**{**asdict(self.last), "chunks_written": len(self.texts)}))

    def _progress_line(self, p: IngestProgress) -> None:
        pipeline_s = max(1e-9, p.elapsed_s - self.raw_s)
        rate = p.documents_written / pipeline_s
        eta = f"{p.eta_s:.0f} s" if p.eta_s is not None else "?"
        line = (f"{p.records_done}/{p.records_total} records of {p.current or '-'}, {p.chunks_written} chunks "
                f"written, {rate:.1f} records/s (pipeline only), ETA {eta} (pipeline and raw)")
        self.progress_lines.append(line)
        log.info("%s", line)


def run_tickets(args: argparse.Namespace, work: Path, embedder: Embedder) -> dict[str, Any]:
    """The tickets measurement (module docstring, steps 1-3); the result dict for the JSON."""
    corpus = work / "tickets.jsonl"
    size = write_tickets(corpus, args.records, args.seed)
    store = ChunkStore(work / "store", embedder=embedder)
    started = time.perf_counter()
    documents, texts = chunk_texts(corpus, store)
    prepare_s = time.perf_counter() - started
    embedder.embed_array(texts[:64])  # warm-up, not counted
    result: dict[str, Any] = {"corpus": {"records": args.records, "bytes": size, "seed": args.seed,
                                         "documents": documents, "chunks": len(texts)},
                              "batch_chunks": args.batch_chunks, "prepare_s": round(prepare_s, 2)}
    raw = Interleaved(embedder, texts)
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        with RssSampler() as rss, stop_on_signals():
            try:
                report = ingest_paths([corpus], store, progress=False, on_progress=raw,
                                      options=IngestOptions(batch_chunks=args.batch_chunks))
            finally:
                result["peak_rss_sampled_mib"] = round(rss.max_mib, 1)
        raw.finish()
    except IngestInterrupted as exc:
        result.update(interrupted=exc.signal_name, report=exc.report.to_dict() if exc.report else None)
        result.update(_times(raw, time.perf_counter() - wall, time.process_time() - cpu, store))
        raise _Partial(result, exc.exit_code) from exc
    result.update(_times(raw, time.perf_counter() - wall, time.process_time() - cpu, store))
    stored = [row[0] for row in store.db.query("SELECT text FROM chunks ORDER BY rowid")]
    result["stored_texts_equal_raw_texts"] = stored == texts
    result["report_counts"] = report.counts
    store.close()
    return result


def _times(raw: Interleaved, wall_s: float, cpu_s: float, store: ChunkStore) -> dict[str, Any]:
    """Throughputs and ratios from the interleaved run so far (pipeline time = total - raw)."""
    pipeline_s, pipeline_cpu_s = wall_s - raw.raw_s, cpu_s - raw.raw_cpu_s
    records = store.manifest.count()
    chunks = raw.last.chunks_written if raw.last else 0
    ratio = raw.raw_s / pipeline_s * (chunks / raw.encoded) if raw.encoded and pipeline_s > 0 else None
    cpu_ratio = raw.raw_cpu_s / pipeline_cpu_s * (chunks / raw.encoded) if raw.encoded and pipeline_cpu_s > 0 else None
    return {
        "records_stored": records, "chunks_written": chunks, "raw_chunks_encoded": raw.encoded,
        "pipeline_s": round(pipeline_s, 2), "raw_encode_s": round(raw.raw_s, 2),
        "pipeline_cpu_s": round(pipeline_cpu_s, 2), "raw_encode_cpu_s": round(raw.raw_cpu_s, 2),
        "pipeline_records_per_s": round(records / pipeline_s, 2) if pipeline_s > 0 else None,
        "pipeline_chunks_per_s": round(chunks / pipeline_s, 2) if pipeline_s > 0 else None,
        "raw_chunks_per_s": round(raw.encoded / raw.raw_s, 2) if raw.raw_s > 0 else None,
        "raw_records_per_s": round(raw.encoded / raw.raw_s * records / max(1, chunks), 2) if raw.raw_s > 0 else None,
        "throughput_ratio": round(ratio, 3) if ratio is not None else None,
        "cpu_throughput_ratio": round(cpu_ratio, 3) if cpu_ratio is not None else None,
        "goal_ratio_ge_0.8": bool(ratio is not None and ratio >= 0.8),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "progress": raw.progress_lines[-20:],
    }


class _Partial(Exception):
    """An interrupted measurement: its partial result and the exit status."""

    def __init__(self, result: dict[str, Any], exit_code: int) -> None:
        super().__init__("interrupted")
        self.result, self.exit_code = result, exit_code


# -- corpus mode (the older measurement) -----------------------------------------------------------
def build_corpus(dest: Path, copies: int) -> Path:
    """``copies`` copies of the evals/data corpus under ``dest/copy-<i>/``."""
    src = REPO / "evals" / "data" / "corpus"
    if not src.is_dir():
        src = REPO / "evals" / "data"
    for i in range(copies):
        for part in CORPUS_PARTS:
            if (src / part).exists():
                shutil.copytree(src / part, dest / f"copy-{i:02d}" / part)
    return dest


def run_corpus(args: argparse.Namespace, work: Path, embedder: Embedder) -> dict[str, Any]:
    """Raw encode, pipeline and unchanged re-ingest, interleaved in whole passes ``--repeats`` times."""
    corpus = build_corpus(work / "corpus", args.copies)
    warm = ChunkStore(work / "warm", embedder=embedder)
    ingest_paths([corpus], warm, progress=False, options=IngestOptions(batch_chunks=args.batch_chunks))
    texts = [row[0] for row in warm.db.query("SELECT text FROM chunks ORDER BY rowid")]
    warm.close()
    times: dict[str, list[float]] = {"raw": [], "pipeline": [], "reingest": []}
    for rep in range(args.repeats):
        started = time.perf_counter()
        embedder.embed_array(texts)
        times["raw"].append(time.perf_counter() - started)
        store = ChunkStore(work / f"run-{rep}", embedder=embedder)
        started = time.perf_counter()
        report = ingest_paths([corpus], store, progress=False,
                              options=IngestOptions(batch_chunks=args.batch_chunks))
        times["pipeline"].append(time.perf_counter() - started)
        assert report.chunks_written == len(texts), (report.chunks_written, len(texts))
        started = time.perf_counter()
        assert ingest_paths([corpus], store, progress=False).chunks_written == 0
        times["reingest"].append(time.perf_counter() - started)
        store.close()
    raw, pipe, again = (statistics.median(times[k]) for k in ("raw", "pipeline", "reingest"))
    return {"corpus": {"copies": args.copies, "files": len(report.files), "chunks": len(texts)},
            "raw_encode_s": times["raw"], "pipeline_s": times["pipeline"], "reingest_s": times["reingest"],
            "raw_chunks_per_s": round(len(texts) / raw, 2), "pipeline_chunks_per_s": round(len(texts) / pipe, 2),
            "throughput_ratio": round(raw / pipe, 3), "reingest_fraction_of_first": round(again / pipe, 4),
            "goal_ratio_ge_0.8": raw / pipe >= 0.8, "peak_rss_mib": round(peak_rss_mib(), 1)}


# -- output ------------------------------------------------------------------------------------------
def table(result: dict[str, Any]) -> str:
    """The headline numbers as an aligned two-column text table."""
    keys = ("interrupted", "records_stored", "chunks_written", "pipeline_s", "raw_encode_s",
            "pipeline_records_per_s", "raw_records_per_s", "pipeline_chunks_per_s", "raw_chunks_per_s",
            "throughput_ratio", "cpu_throughput_ratio", "goal_ratio_ge_0.8", "peak_rss_mib",
            "peak_rss_sampled_mib", "stored_texts_equal_raw_texts", "reingest_fraction_of_first", "model_load_s")
    rows = [(k, result[k]) for k in keys if k in result]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def write(result: dict[str, Any], out: Path) -> None:
    """Write ``result`` as indented JSON to ``out`` (parents created) and print the table."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"-> {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("tickets", "corpus"), default="tickets")
    parser.add_argument("--records", type=int, default=100_000, help="tickets in the JSON Lines file")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--batch-chunks", type=int, default=DEFAULT_BATCH_CHUNKS, help="chunks per write batch")
    parser.add_argument("--copies", type=int, default=4, help="corpus mode: copies of evals/data/corpus")
    parser.add_argument("--repeats", type=int, default=3, help="corpus mode: interleaved passes")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--stub-encoder", action="store_true",
                        help="no model forward (random vectors): the pipeline's own overhead at full N")
    parser.add_argument("--out", type=Path, default=REPO / "evals" / "out" / "bench_ingest.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for noisy in ("ingestion", "chromadb", "httpx", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="bench_ingest_"))
    code = 0
    try:
        embedder = (StubEncoder if args.stub_encoder else Embedder)(device=args.device)
        started = time.perf_counter()
        _ = embedder.model
        meta = {"mode": args.mode, "device": args.device, "model": embedder.model_name, "cpus": os.cpu_count(),
                "stub_encoder": args.stub_encoder,
                "torch_threads": _torch_threads(), "model_load_s": round(time.perf_counter() - started, 2)}
        try:
            result = run_tickets(args, work, embedder) if args.mode == "tickets" else run_corpus(args, work, embedder)
        except _Partial as partial:
            result, code = partial.result, partial.exit_code
        write({**meta, **result}, args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return code


class StubEncoder(Embedder):
    """The embedder with the model's forward pass replaced by seeded random unit vectors (the
    tokenizer, hence the chunks, stay the real ones): ``--stub-encoder`` times everything the
    pipeline does besides encoding, at the full record count."""

    def embed_array(self, texts: list[str]) -> np.ndarray:
        """Random L2-normalised float32 rows, shape (len(texts), dimension)."""
        rows = np.random.default_rng(len(texts)).standard_normal((len(texts), self.dimension)).astype(np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True).clip(min=1e-12)


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


if __name__ == "__main__":
    sys.exit(main())
