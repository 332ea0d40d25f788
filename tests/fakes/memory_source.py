"""An in-memory MemorySource + FeedbackSink for unit tests (it passes the conformance kit).

Similarity is the share of the query's distinct words (lower-cased letters and digits) that the
memory contains; a memory sharing no word is never returned; ``min_similarity`` None means 0.
Hot score (the hot ``similarity``): ``0.5 * confidence + 0.5 * usefulness``. Feedback moves
usefulness 10% of the way toward 1 (positive) or 0 (negative).

Test controls: ``delay_s`` (each call sleeps that long first, bounded by its ``timeout_s``, past
which it raises MemorySourceTimeoutError), ``fail_with`` (an error every call raises), and the
``hot_queries`` / ``search_queries`` / ``feedback_items`` logs of every call, failed ones included.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable

import attrs

from conformance.seed import SeedMemory
from domain.model.feedback import FEEDBACK_VALUES, FeedbackItem, FeedbackResult
from domain.model.memory import HotQuery, MemoryBatch, MemoryHit, SearchQuery
from ports.errors import (
    MemoryNotFoundError,
    MemorySourceClosedError,
    MemorySourceError,
    MemorySourceTimeoutError,
    PortError,
)
from ports.feedback_sink import FeedbackSink
from ports.memory_source import MemorySource

_WORD = re.compile(r"[^\W_]+")
FEEDBACK_STEP = 0.1


def words(text: str) -> frozenset[str]:
    return frozenset(word.lower() for word in _WORD.findall(text))


@attrs.define
class _Stored:
    memory: SeedMemory
    usefulness: float
    positive: int = 0
    negative: int = 0


class InMemoryMemorySource(MemorySource, FeedbackSink):
    """Memories held in a dict; see the module docstring for scores and test controls."""

    def __init__(self, memories: Iterable[SeedMemory] = (), *, delay_s: float = 0.0) -> None:
        self._memories: dict[str, _Stored] = {}
        self._applied: dict[tuple[str, str, str], FeedbackResult] = {}
        self._closed = False
        self.delay_s = delay_s
        self.fail_with: PortError | None = None
        self.hot_queries: list[HotQuery] = []
        self.search_queries: list[SearchQuery] = []
        self.feedback_items: list[FeedbackItem] = []
        self.add(*memories)

    def add(self, *memories: SeedMemory) -> None:
        for memory in memories:
            self._memories[memory.memory_id] = _Stored(memory, memory.usefulness)

    async def seed(self, memories: Iterable[SeedMemory]) -> None:
        self.add(*memories)

    async def hot(self, query: HotQuery, *, timeout_s: float) -> MemoryBatch:
        self.hot_queries.append(query)
        await self._enter(timeout_s)
        scored = [
            (0.5 * stored.memory.confidence + 0.5 * stored.usefulness, stored)
            for stored in self._tenant(query.org_id, query.agent_id)
            if stored.memory.confidence >= query.min_confidence
        ]
        return _batch(scored, query.limit, "hot")

    async def search(self, query: SearchQuery, *, timeout_s: float) -> MemoryBatch:
        self.search_queries.append(query)
        await self._enter(timeout_s)
        wanted = words(query.query)
        floor = query.min_similarity or 0.0
        scored = []
        for stored in self._tenant(query.org_id, query.agent_id):
            similarity = len(wanted & words(stored.memory.content)) / len(wanted) if wanted else 0.0
            if similarity > 0.0 and similarity >= floor and _passes_filters(stored.memory, query):
                scored.append((similarity, stored))
        return _batch(scored, query.limit, "token_overlap")

    async def record(self, item: FeedbackItem, *, timeout_s: float) -> FeedbackResult:
        self.feedback_items.append(item)
        await self._enter(timeout_s)
        if item.feedback not in FEEDBACK_VALUES:
            raise MemorySourceError(f"feedback must be one of {FEEDBACK_VALUES}, got {item.feedback!r}")
        key = (item.org_id, item.memory_id, item.idempotency_key)
        if item.idempotency_key and key in self._applied:
            return self._applied[key]
        stored = self._memories.get(item.memory_id)
        if stored is None or stored.memory.org_id != item.org_id:
            raise MemoryNotFoundError(f"no memory {item.memory_id} in org {item.org_id}", status_code=404)
        result = _apply(stored, item)
        if item.idempotency_key:
            self._applied[key] = result
        return result

    async def close(self) -> None:
        self._closed = True

    def _visible(self, memory: SeedMemory, org_id: str, agent_id: str) -> bool:
        """The tenant fence (the conformance tests break it on purpose in a subclass)."""
        return memory.org_id == org_id and memory.agent_id == agent_id

    def _tenant(self, org_id: str, agent_id: str) -> list[_Stored]:
        return [stored for stored in self._memories.values() if self._visible(stored.memory, org_id, agent_id)]

    async def _enter(self, timeout_s: float) -> None:
        if self._closed:
            raise MemorySourceClosedError("in-memory memory source is closed")
        if self.delay_s > 0:
            await asyncio.sleep(min(self.delay_s, max(timeout_s, 0.0)))
            if self.delay_s > timeout_s:
                raise MemorySourceTimeoutError(f"no answer within {timeout_s} s")
        if self.fail_with is not None:
            raise self.fail_with


def _passes_filters(memory: SeedMemory, query: SearchQuery) -> bool:
    if memory.confidence < query.min_confidence:
        return False
    if query.categories and memory.category not in query.categories:
        return False
    return not query.tags or bool(set(query.tags) & set(memory.tags))


def _batch(scored: list[tuple[float, _Stored]], limit: int, source: str) -> MemoryBatch:
    ordered = sorted(scored, key=lambda pair: (-pair[0], pair[1].memory.memory_id))[: max(limit, 0)]
    return MemoryBatch(hits=tuple(_hit(stored, score, rank, source) for rank, (score, stored) in enumerate(ordered, 1)))


def _hit(stored: _Stored, similarity: float, rank: int, source: str) -> MemoryHit:
    memory = stored.memory
    return MemoryHit(
        memory_id=memory.memory_id, org_id=memory.org_id, agent_id=memory.agent_id, content=memory.content,
        category=memory.category, confidence=memory.confidence, similarity=similarity, rank=rank,
        source=source, usefulness=stored.usefulness, created_at=memory.created_at,
        retrieval_count=memory.retrieval_count, tags=memory.tags,
    )


def _apply(stored: _Stored, item: FeedbackItem) -> FeedbackResult:
    previous = stored.usefulness
    if item.feedback == "positive":
        stored.usefulness, stored.positive = previous + FEEDBACK_STEP * (1.0 - previous), stored.positive + 1
    elif item.feedback == "negative":
        stored.usefulness, stored.negative = previous - FEEDBACK_STEP * previous, stored.negative + 1
    return FeedbackResult(
        memory_id=item.memory_id, feedback=item.feedback, new_usefulness_score=stored.usefulness,
        total_positive_feedback=stored.positive, total_negative_feedback=stored.negative,
        previous_usefulness_score=previous,
    )
