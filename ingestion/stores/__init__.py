"""Storage back ends: Chroma (dense vectors), SQLite FTS5 (BM25) and the SQLite manifest."""
