"""Search, for as long as a request lives: hybrid retrieval, the sources shown (the searcher),
evidence lines, filters, follow-up resolution, and embedding texts with the store's model."""
