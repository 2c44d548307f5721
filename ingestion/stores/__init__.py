"""The chunk store (:mod:`ingestion.stores.chunk_store`) and its parts: the dense index (embedded Chroma,
a Chroma server, or pgvector), the lexical index (SQLite FTS5 or PostgreSQL full-text), the manifest, the
database under them (SQLite or PostgreSQL), the ingest run lock, the space reserve, and the purge of
deleted bytes."""
