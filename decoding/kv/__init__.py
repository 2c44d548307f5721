"""The KV cache rolled back in place, attention for verification passes, and exact prefix reuse of
parked caches."""
