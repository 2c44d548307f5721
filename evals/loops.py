"""Loop-stop false stops: the detector run over real operations text that does not loop.

Every stored document (its chunks' text, headers removed) is tokenized with the target's
tokenizer and fed to :class:`decoding.stopping.LoopDetector` token by token, as an answer
quoting it would be. A document on which the detector fires is a false stop (unless the
text itself loops by the reader's measure, :func:`evals.answers.text_loops`). Timestamps
are the trap: SmolLM2 tokenizes digits one by one, so ``\\n2026-01-20 06:`` is ~12 tokens
and a shift log repeats it on every line.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from decoding.stopping import LoopDetector
from evals.answers import text_loops
from ingestion.stores.chunk_store import ChunkStore


def document_texts(store: ChunkStore) -> dict[str, str]:
    """doc_id → the document's text (its chunks in order, header lines removed)."""
    rows, _ = store.manifest.page(0, 1_000_000)
    return {r["doc_id"]: "\n".join(c.text.split("\n", 1)[-1] for c in store.lexical.document_chunks(r["doc_id"]))
            for r in rows}


def first_loop_stop(token_ids: list[int], span: int) -> int | None:
    """Where the detector cuts ``token_ids`` (streamed one by one), or None."""
    detector, out = LoopDetector(span), []
    for t in token_ids:
        out.append(t)
        if detector.push(out):
            return detector.cut
    return None


def run_loop_false_stops(store: ChunkStore, tokenizer: PreTrainedTokenizerBase, spans: list[int]) -> dict:
    """Per span: documents the loop stop would cut, and which of them do not loop.

    Returns:
        JSON-able dict: ``documents`` and per span ``fires``, ``false_stops`` and examples
        (doc id and the repeated window's text).
    """
    texts = document_texts(store)
    ids = {d: tokenizer(t, add_special_tokens=False)["input_ids"] for d, t in texts.items()}
    out = {"documents": len(texts), "spans": {}}
    for span in spans:
        fired = {d: c for d, c in ((d, first_loop_stop(i, span)) for d, i in ids.items()) if c is not None}
        false = [d for d in fired if not text_loops(texts[d])]
        out["spans"][span] = {
            "fires": len(fired), "false_stops": len(false),
            "examples": [{"doc_id": d, "window": tokenizer.decode(ids[d][fired[d]:fired[d] + span])}
                         for d in false[:5]],
        }
    return out


def loops_markdown(report: dict) -> str:
    """One row per span."""
    lines = [f"# Loop stop on {report['documents']} documents that do not loop", "",
             "| span L (tokens) | documents cut (false stops) | example window |", "|---|---|---|"]
    for span, r in report["spans"].items():
        example = r["examples"][0]["window"].replace("\n", "⏎").replace("|", "\\|") if r["examples"] else ""
        lines.append(f"| {span} | {r['false_stops']} / {report['documents']} | `{example}` |")
    return "\n".join(lines) + "\n"
