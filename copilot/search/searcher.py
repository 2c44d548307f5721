"""The documents shown for a question: retrieval, grouped by document, reordered by the
entities the question names, with an ELOG entry's linked entry, and their evidence lines."""

from __future__ import annotations

from dataclasses import replace

from copilot.access import Access
from copilot.search.entities import DocumentText, entity_order, question_entities
from copilot.search.record import bounded_record
from copilot.search.retrieval import HybridRetriever, Passage
from copilot.search.sources import Source, group_by_document, with_highlights
from ingestion.documents import Chunk, SearchFilter
from ingestion.stores.chunk_store import ChunkStore

#: Passages fetched per source shown (documents have several chunks).
PASSAGES_PER_SOURCE = 4


def candidate_count(n: int) -> int:
    """Documents kept as candidates for ``n`` sources: 3x, at least ``n + 6``, for the entity
    check to reorder before ``n`` are taken."""
    return max(3 * n, n + 6)


class Searcher:
    """Searches one store (:class:`~copilot.search.retrieval.HybridRetriever`) and shapes the
    hits into numbered sources."""

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        self.retriever = HybridRetriever(store)

    def search(self, question: str, max_sources: int, flt: SearchFilter | None, access: Access) -> list[Source]:
        """The ``max_sources`` best documents for ``question`` (checked text) that ``access`` may read
        and ``flt`` passes (filtered in the stores), numbered 1..max_sources, with their evidence lines.

        Documents holding every entity the question names (host, ticket, error code, day:
        :mod:`copilot.search.entities`) come before near-duplicates that lack one; with ``max_sources``
        >= 2 the best ELOG entry brings its parent or first reply along when that is not among them
        (it takes the last place). Each source carries its whole record (every chunk), and its evidence
        lines are drawn from all of it (:mod:`copilot.search.record`).
        """
        passages = self.retriever.retrieve(question, max(self.retriever.candidates, PASSAGES_PER_SOURCE * max_sources),
                                           access.restrict(flt))
        candidates = group_by_document(passages, candidate_count(max_sources))
        entities = question_entities(question)
        if entities:
            docs = [self.document_text(c) for c in candidates]
            candidates = [candidates[i] for i in entity_order(docs, entities)]
        chosen = candidates[:max_sources]
        linked = self._linked(chosen, flt, access) if max_sources >= 2 else []
        chosen = chosen[:max_sources - len(linked)] + linked
        chosen = [replace(c, n=i + 1, record=self.record(c)) for i, c in enumerate(chosen)]
        return with_highlights(question, chosen, self.store.embedder)

    def record(self, source: Source) -> tuple[Chunk, ...]:
        """The chunks of ``source``'s record its evidence lines are drawn from (:func:`bounded_record`)."""
        chunks = self.store.lexical.document_chunks(source.doc_id)
        return bounded_record(chunks, [p.chunk.index for p in source.passages])

    def document_text(self, source: Source) -> DocumentText:
        """A source document's whole text and dates (for the entity and grounding checks)."""
        chunks = self.store.lexical.document_chunks(source.doc_id) or [p.chunk for p in source.passages]
        created = source.metadata.get("created")
        return DocumentText(source.doc_id, "\n".join(c.text for c in chunks), (str(created),) if created else ())

    def _linked(self, chosen: list[Source], flt: SearchFilter | None, access: Access) -> list[Source]:
        """The ELOG parent (or first reply) of the best source as a source, when not already
        chosen, no filter is set and ``access`` may read it (at most one; numbered later)."""
        if not chosen or flt is not None and flt != SearchFilter():
            return []
        meta = chosen[0].metadata
        replies = meta.get("replies") or []
        if isinstance(replies, str):
            replies = [r for r in replies.split(",") if r.strip()]
        linked = [meta.get("parent_doc_id")] + [f"{meta.get('source')}#{r.strip()}" for r in replies[:1]]
        have = {c.doc_id for c in chosen}
        for doc_id in linked:
            if doc_id and doc_id not in have:
                chunks = self.store.lexical.document_chunks(doc_id)
                if chunks and access.allows(chunks[0].metadata):
                    return [Source(len(chosen) + 1, tuple(Passage(0, c, 0.0) for c in chunks[:2]))]
        return []
