"""Inputs and outputs of the SearchMemories and RecordMemoryFeedback use cases."""

from __future__ import annotations

import enum
from datetime import datetime

import attrs


class FeedbackFailure(enum.StrEnum):
    """Why one id's feedback write failed (the metrics label; ``ScoreUpdate.error`` says more)."""

    NOT_FOUND = "not_found"
    DENIED = "denied"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"


@attrs.frozen
class SearchRequest:
    org_id: str
    agent_id: str
    query: str
    limit: int = 10
    min_similarity: float | None = None
    categories: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    tags: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    session_id: str = ""
    request_id: str = ""
    trace_id: str = ""
    deadline_s: float | None = None


@attrs.frozen
class FoundMemory:
    memory_id: str
    content: str
    category: str
    confidence: float
    composite_score: float
    retrieval_count: int
    created_at: datetime | None


@attrs.frozen
class SearchResult:
    memories: tuple[FoundMemory, ...]
    total_candidates: int
    search_time_ms: float
    dropped: int = 0  # items the source returned that were malformed or outside the tenant


@attrs.frozen
class FeedbackRequest:
    org_id: str
    memory_ids: tuple[str, ...] = attrs.field(converter=tuple)
    feedback: str
    session_id: str = ""
    trace_id: str = ""
    request_id: str = ""
    notes: str | None = None
    deadline_s: float | None = None


@attrs.frozen
class ScoreUpdate:
    """One id's outcome: applied (``failure`` None, ``error`` empty) or failed, with a message."""

    memory_id: str
    previous_score: float
    new_score: float
    error: str = ""
    failure: FeedbackFailure | None = None

    @classmethod
    def failed(cls, memory_id: str, failure: FeedbackFailure, message: str = "") -> ScoreUpdate:
        """A failed write: ``error`` is the failure's name, then the message when there is one."""
        return cls(memory_id, 0.0, 0.0, f"{failure}{message}", failure)


@attrs.frozen
class FeedbackOutcome:
    success: bool  # False when any id failed
    updates: tuple[ScoreUpdate, ...]
