"""KV-cache rollback after verification."""

from __future__ import annotations

from transformers import Cache


def crop_cache(cache: Cache, keep: int) -> None:
    """Drop cached positions past ``keep`` (the rejected drafted tokens), in place.

    Works for dynamic and static caches (a static cache rewinds its write counter, so
    the next update overwrites the stale entries).
    """
    extra = cache.get_seq_length() - keep
    if extra > 0:
        cache.crop(-extra)
