"""SearchMemories: one ranked search of an agent's memories, fenced to the caller's tenant.

Rules: the query is required; ``limit`` 0 means the default (10); ``min_similarity`` 0 means the
source's default; hits of another org/agent are dropped and counted; ``composite_score`` is the
interim score (0.85 similarity + 0.15 confidence). Source failures propagate as port errors (the
gRPC edge maps them in entrypoints/grpc_api/status.py: denied -> FAILED_PRECONDITION, timeout ->
DEADLINE_EXCEEDED when the caller's deadline is spent else UNAVAILABLE, other -> UNAVAILABLE).
"""

from __future__ import annotations

import attrs

from domain.model.assembly import AssemblyOptions
from domain.model.memory import CallContext, SearchQuery
from domain.model.operations import FoundMemory, SearchRequest, SearchResult
from domain.scoring import score_hit
from domain.usecases.validation import validate_search
from ports.clock import Clock
from ports.memory_source import MemorySource

DEFAULT_SEARCH_LIMIT = 10


@attrs.frozen
class SearchConfig:
    """No defaults here: ``entrypoints.settings`` declares them (``Settings().search_config()``)."""

    timeout_s: float
    deadline_headroom_s: float


class SearchMemories:
    def __init__(self, *, memories: MemorySource, clock: Clock, config: SearchConfig) -> None:
        self._memories = memories
        self._clock = clock
        self._config = config

    async def execute(self, request: SearchRequest) -> SearchResult:
        started = self._clock.monotonic()
        request = validate_search(request)
        query = SearchQuery(
            org_id=request.org_id,
            agent_id=request.agent_id,
            query=request.query,
            limit=request.limit or DEFAULT_SEARCH_LIMIT,
            min_similarity=request.min_similarity or None,
            categories=request.categories,
            tags=request.tags,
            call=CallContext(request.request_id, request.trace_id),
        )
        batch = await self._memories.search(query, timeout_s=self._timeout(request))
        own = [h for h in batch.hits if h.org_id == request.org_id and h.agent_id == request.agent_id]
        now = self._clock.now()
        memories = tuple(
            FoundMemory(
                memory_id=hit.memory_id,
                content=hit.content,
                category=hit.category,
                confidence=hit.confidence,
                composite_score=score_hit(hit, AssemblyOptions(), now).score,
                retrieval_count=hit.retrieval_count,
                created_at=hit.created_at,
            )
            for hit in own
        )
        return SearchResult(
            memories=memories,
            total_candidates=len(batch.hits) + len(batch.dropped),
            search_time_ms=(self._clock.monotonic() - started) * 1000.0,
            dropped=len(batch.hits) - len(own) + len(batch.dropped),
        )

    def _timeout(self, request: SearchRequest) -> float:
        timeout = self._config.timeout_s
        if request.deadline_s is not None:
            timeout = min(timeout, request.deadline_s - self._config.deadline_headroom_s)
        return max(0.0, timeout)
