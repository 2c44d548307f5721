"""The hybrid retriever as a LangChain retriever, so it plugs into existing chains.

    retriever = OpsCopilotRetriever.from_store(store, k=5)
    docs = retriever.invoke("How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?")

Each ``Document`` carries the chunk text and its metadata plus ``chunk_id``, ``doc_id``,
``n`` (the 1-based rank, as a prompt would number it) and ``score`` (fused RRF score).
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from copilot.search.filters import Filters
from copilot.search.retrieval import HybridRetriever
from ingestion.documents import SearchFilter
from ingestion.stores.chunk_store import ChunkStore


class OpsCopilotRetriever(BaseRetriever):
    """Hybrid (dense + BM25, RRF-fused) retrieval over the OpsCopilot chunk store.

    Attributes:
        retriever: the :class:`HybridRetriever` to query.
        k: passages returned per query, as in LangChain's ``search_kwargs={"k": ...}`` (more than
            the collection holds is fine).
        filters: metadata filters (document types, source, ticket key, date range).
        mode: ``hybrid``, ``dense`` or ``bm25``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: HybridRetriever
    k: int = Field(5, ge=1, le=100)
    filters: Filters | None = None
    mode: str = Field("hybrid", pattern="^(hybrid|dense|bm25)$")

    @classmethod
    def from_store(cls, store: ChunkStore, **kwargs: Any) -> "OpsCopilotRetriever":
        """A retriever over ``store`` (keyword arguments as the attributes)."""
        return cls(retriever=HybridRetriever(store), **kwargs)

    def _search_filter(self) -> SearchFilter | None:
        return self.filters.to_search_filter() if self.filters else None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        passages = self.retriever.retrieve(query, self.k, self._search_filter(), mode=self.mode)
        return [Document(page_content=p.chunk.text, id=p.chunk.chunk_id,
                         metadata={**p.chunk.metadata, "chunk_id": p.chunk.chunk_id, "doc_id": p.chunk.doc_id,
                                   "n": p.n, "score": p.score})
                for p in passages]
