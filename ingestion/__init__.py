"""Ingestion: logbooks and tickets in, chunks with stable ids and metadata out, stored idempotently.

Public entry points: :func:`ingestion.loaders.load_file`, :class:`ingestion.stores.chunk_store.ChunkStore`,
:class:`ingestion.embedding.Embedder`, :func:`ingestion.stores.chunk_store.open_store` (the store the
settings describe), :func:`ingestion.pipeline.ingest_paths`, :func:`ingestion.ingest_command.run_ingest`
(the body of ``copilot ingest``; ``python -m ingestion`` runs that same command) and
:func:`ingestion.deletion.delete_document`.
Heavy dependencies (torch, chromadb) are
imported only by the modules that need them.
"""

from ingestion.documents import Chunk, Document, ScoredChunk, SearchFilter

__all__ = ["Chunk", "Document", "ScoredChunk", "SearchFilter"]
