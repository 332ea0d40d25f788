"""Memories as the memory sources return them, and the queries sent to those sources."""

from __future__ import annotations

from datetime import datetime

import attrs


@attrs.frozen
class MemoryHit:
    """One memory returned by a memory source (hot list or search)."""

    memory_id: str
    org_id: str
    agent_id: str
    content: str
    category: str
    confidence: float
    similarity: float
    rank: int
    source: str
    usefulness: float | None = None
    created_at: datetime | None = None
    retrieval_count: int = 0
    tags: tuple[str, ...] = attrs.field(default=(), converter=tuple)


@attrs.frozen
class DroppedItem:
    """An item a source received but could not use (malformed, invalid text...)."""

    reason: str
    detail: str
    memory_id: str = ""


@attrs.frozen
class MemoryBatch:
    """What one source call yields: usable hits in the source's order, and dropped items."""

    hits: tuple[MemoryHit, ...] = attrs.field(default=(), converter=tuple)
    dropped: tuple[DroppedItem, ...] = attrs.field(default=(), converter=tuple)


@attrs.frozen
class CallContext:
    """Correlation ids propagated to every downstream call."""

    request_id: str = ""
    trace_id: str = ""


@attrs.frozen
class HotQuery:
    org_id: str
    agent_id: str
    limit: int = 20
    min_confidence: float = 0.0
    call: CallContext = CallContext()


@attrs.frozen
class SearchQuery:
    org_id: str
    agent_id: str
    query: str
    limit: int = 10
    min_similarity: float | None = None
    min_confidence: float = 0.0
    categories: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    tags: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    call: CallContext = CallContext()
