"""Port: where memories are read from (the hot list and the ranked search)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Protocol

from domain.model.memory import HotQuery, MemoryBatch, SearchQuery


class MemorySource(Protocol):
    @abstractmethod
    async def hot(self, query: HotQuery, *, timeout_s: float) -> MemoryBatch:
        """Return the agent's hot memories, best first, at most ``query.limit``.

        Ordering: by the source's hot score, descending; ``rank`` is the 1-based position.
        Every hit belongs to ``query.org_id``/``query.agent_id`` and has confidence
        >= ``query.min_confidence``. Items the source could not decode are reported in
        ``MemoryBatch.dropped`` rather than failing the call.

        Raises:
            MemorySourceTimeoutError: no answer within ``timeout_s`` seconds.
            MemorySourceDeniedError: the credentials were refused.
            MemorySourceUnavailableError: transport failure or an undecodable response.
            MemorySourceClosedError: the source was closed.
        """

    @abstractmethod
    async def search(self, query: SearchQuery, *, timeout_s: float) -> MemoryBatch:
        """Return the memories most relevant to ``query.query``, best first.

        Ordering: similarity descending (ties by memory id); ``rank`` is the 1-based position.
        Honours ``limit``, ``min_similarity`` (None: the source's default), ``min_confidence``,
        ``categories`` and ``tags`` (empty: no filter). Similarity is in [0, 1] where the source
        can guarantee it. Same errors as ``hot``.
        """

    @abstractmethod
    async def close(self) -> None:
        """Release connections; later calls raise MemorySourceClosedError."""
