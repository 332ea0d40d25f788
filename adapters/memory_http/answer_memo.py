"""Decoded answers by their exact bytes: the same hot list comes back call after call.

The memory service answers an agent's hot list with the same bytes until a memory changes, so the
adapter keeps the last decoded answers (``MemoryBatch`` is immutable) keyed by the body itself:
equal bytes decode to equal values, so a hit is exactly what decoding would give, whichever
tenant's call brings it (the tenant fence runs on every call, hit or not). Bounded in entries and
in body size; an answer that fails to decode is never kept.
"""

from __future__ import annotations

import functools

from adapters.memory_http.decode import decode_batch
from domain.model.memory import MemoryBatch

DEFAULT_ENTRIES = 256
DEFAULT_MAX_BODY_BYTES = 64 * 1024  # a hot list of 50 memories is about 30 KB


class AnswerMemo:
    """``decode_batch`` behind a bounded LRU keyed by the answer's bytes."""

    def __init__(self, entries: int = DEFAULT_ENTRIES, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        if entries < 1 or max_body_bytes < 1:
            raise ValueError(f"entries and max_body_bytes must be >= 1, got {entries}, {max_body_bytes}")
        self._max_body_bytes = max_body_bytes
        self._decoded = functools.lru_cache(maxsize=entries)(decode_batch)

    def batch(self, body: bytes, limit: int | None = None) -> MemoryBatch:
        """``decode_batch(body, limit)``, from the memo when these exact bytes were decoded before
        for the same limit.

        Raises:
            MemorySourceUnavailableError: as ``decode_batch``.
        """
        if len(body) > self._max_body_bytes:
            return decode_batch(body, limit)
        return self._decoded(body, limit)

    def hits(self) -> int:
        return self._decoded.cache_info().hits
