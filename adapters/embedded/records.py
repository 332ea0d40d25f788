"""The values the write API takes and returns, and their conversion to and from rows."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

import attrs

from adapters.embedded import validation as check

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def to_micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


@attrs.frozen
class NewMemory:
    """A validated memory about to be stored. Build with ``NewMemory.create``."""

    memory_id: str
    org_id: str
    agent_id: str
    content: str
    category: str
    confidence: float
    usefulness: float
    tags: tuple[str, ...]
    created_at: datetime | None
    retrieval_count: int
    status: str

    @classmethod
    def create(
        cls,
        *,
        org_id: object,
        agent_id: object,
        content: object,
        category: object,
        confidence: object = 1.0,
        usefulness: object = 0.5,
        tags: Iterable[str] | object = (),
        memory_id: object | None = None,
        created_at: datetime | str | None = None,
        retrieval_count: object = 0,
        status: object = "active",
    ) -> NewMemory:
        """Validate every field (EmbeddedValidationError names the first bad one)."""
        return cls(
            memory_id=str(uuid.uuid4()) if memory_id is None else check.canonical_uuid(memory_id, "memory_id"),
            org_id=check.canonical_uuid(org_id, "org_id"),
            agent_id=check.canonical_uuid(agent_id, "agent_id"),
            content=check.text(content, "content"),
            category=check.category(category),
            confidence=check.unit_interval(confidence, "confidence"),
            usefulness=check.unit_interval(usefulness, "usefulness"),
            tags=check.tags(tags),
            created_at=None if created_at is None else check.timestamp(created_at, "created_at"),
            retrieval_count=check.count(retrieval_count, "retrieval_count"),
            status=check.status(status),
        )


@attrs.frozen
class StoredMemory:
    """A memory as stored, with its feedback counters (what ``list`` returns)."""

    memory_id: str
    org_id: str
    agent_id: str
    content: str
    category: str
    confidence: float
    usefulness: float
    retrieval_count: int
    positive_feedback: int
    negative_feedback: int
    tags: tuple[str, ...]
    status: str
    created_at: datetime
    updated_at: datetime


STORED_COLUMNS = (
    "memory_id, org_id, agent_id, content, category, confidence, usefulness, retrieval_count, "
    "positive_feedback, negative_feedback, tags, status, created_us, updated_us"
)


def stored_from_row(row: tuple) -> StoredMemory:  # type: ignore[type-arg]
    (memory_id, org_id, agent_id, content, category, confidence, usefulness, retrieval_count,
     positive, negative, tags, status, created_us, updated_us) = row
    return StoredMemory(
        memory_id=memory_id,
        org_id=org_id,
        agent_id=agent_id,
        content=content,
        category=category,
        confidence=confidence,
        usefulness=usefulness,
        retrieval_count=retrieval_count,
        positive_feedback=positive,
        negative_feedback=negative,
        tags=decode_tags(tags),
        status=status,
        created_at=from_micros(created_us),
        updated_at=from_micros(updated_us),
    )


def encode_tags(tags: tuple[str, ...]) -> str:
    return json.dumps(list(tags), ensure_ascii=False)


def decode_tags(raw: str) -> tuple[str, ...]:
    """The stored JSON tag list; ValueError when it is not a list of strings."""
    value = json.loads(raw)
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise ValueError(f"tags are not a JSON list of strings: {raw[:80]!r}")
    return tuple(value)
