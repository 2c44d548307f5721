"""Evals: exactness vs plain greedy, latency vs the anchors, retrieval quality."""
