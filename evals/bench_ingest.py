"""Ingest throughput benchmark (issue 4 goal).

Measures, side by side and interleaved (A B A B ..., medians):

- raw: ``SentenceTransformer.encode`` on exactly the chunk texts the pipeline produces
  (same model instance, same batch size, normalised embeddings);
- pipeline: ``ingest_paths`` of the corpus into a fresh store (load, parse, chunk, embed,
  Chroma + FTS5 + manifest writes), model already loaded;
- re-ingest: ``ingest_paths`` again on the unchanged corpus into that store.

Goals: pipeline chunks/s >= 0.9 x raw chunks/s; re-ingest time <= 1/20 of the first ingest.
The corpus is ``evals/data/corpus`` (its logbooks, tickets, shift logs and post-mortems) copied
``--copies`` times under different directories, so every copy is a distinct set of documents.

usage: python evals/bench_ingest.py [--copies 4] [--repeats 3] [--out evals/out/bench_ingest.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ingestion.embedding import Embedder  # noqa: E402
from ingestion.pipeline import ingest_paths  # noqa: E402
from ingestion.store import ChunkStore  # noqa: E402

CORPUS_PARTS = ("logbooks", "tickets", "shiftlogs", "postmortems")


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


def measure(corpus: Path, work: Path, embedder: Embedder, repeats: int) -> dict:
    """Raw encode, pipeline and unchanged re-ingest times (s), interleaved ``repeats`` times,
    after one warm-up ingest that also yields the chunk texts for the raw measurement."""
    warm = ChunkStore(work / "warm", embedder=embedder)
    ingest_paths([corpus], warm, progress=False)
    texts = [row[0] for row in warm.db.query("SELECT text FROM chunks ORDER BY rowid")]
    warm.close()
    times: dict[str, list[float]] = {"raw": [], "pipeline": [], "reingest": [], "embed_share": []}
    for rep in range(repeats):
        started = time.perf_counter()
        embedder.model.encode(texts, batch_size=embedder.batch_size, normalize_embeddings=True,
                              convert_to_numpy=True, show_progress_bar=False)
        times["raw"].append(time.perf_counter() - started)

        store = ChunkStore(work / f"run-{rep}", embedder=embedder)
        started = time.perf_counter()
        report = ingest_paths([corpus], store, progress=False)
        times["pipeline"].append(time.perf_counter() - started)
        assert report.chunks_written == len(texts), (report.chunks_written, len(texts))
        times["embed_share"].append(report.embed_s / times["pipeline"][-1])

        started = time.perf_counter()
        again = ingest_paths([corpus], store, progress=False)
        times["reingest"].append(time.perf_counter() - started)
        assert again.chunks_written == 0
        store.close()
    return {"chunks": len(texts), "files": len(report.files), "documents": sum(f.documents for f in report.files),
            **times}


def summarise(m: dict, copies: int, device: str, load_s: float) -> dict:
    """The JSON report: medians, chunks/s, the ratio to raw encoding and the goals."""
    raw_med, pipe_med, re_med = (statistics.median(m[k]) for k in ("raw", "pipeline", "reingest"))
    return {
        "corpus": {"copies": copies, "files": m["files"], "documents": m["documents"], "chunks": m["chunks"]},
        "device": device,
        "model_load_s": round(load_s, 2),
        "raw_encode_s": [round(x, 3) for x in m["raw"]],
        "pipeline_s": [round(x, 3) for x in m["pipeline"]],
        "reingest_s": [round(x, 4) for x in m["reingest"]],
        "raw_chunks_per_s": round(m["chunks"] / raw_med, 2),
        "pipeline_chunks_per_s": round(m["chunks"] / pipe_med, 2),
        "throughput_ratio": round(raw_med / pipe_med, 3),
        "embed_share_of_pipeline": round(statistics.median(m["embed_share"]), 3),
        "reingest_fraction_of_first": round(re_med / pipe_med, 4),
        "goals": {"throughput_ratio >= 0.9": raw_med / pipe_med >= 0.9,
                  "reingest_fraction <= 0.05": re_med / pipe_med <= 0.05},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=REPO / "evals" / "out" / "bench_ingest.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="bench_ingest_"))
    try:
        corpus = build_corpus(work / "corpus", args.copies)
        if not any(corpus.rglob("*.*")):
            raise SystemExit("no corpus found under evals/data")
        embedder = Embedder(device=args.device)
        t0 = time.perf_counter()
        _ = embedder.model
        load_s = time.perf_counter() - t0
        result = summarise(measure(corpus, work, embedder, args.repeats), args.copies, args.device, load_s)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
