"""Feedback on memories used in a call."""

from __future__ import annotations

import attrs

FEEDBACK_VALUES = ("positive", "negative", "neutral")


@attrs.frozen
class FeedbackItem:
    """One feedback write for one memory; ``idempotency_key`` makes retries count once."""

    org_id: str
    memory_id: str
    feedback: str
    idempotency_key: str
    session_id: str | None = None
    trace_id: str | None = None
    notes: str | None = None


@attrs.frozen
class FeedbackResult:
    memory_id: str
    feedback: str
    new_usefulness_score: float
    total_positive_feedback: int
    total_negative_feedback: int
    previous_usefulness_score: float | None = None
