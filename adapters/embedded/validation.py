"""Validation of what the write API stores: each check names the field it rejects."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from datetime import datetime, timezone

from adapters.embedded.errors import EmbeddedValidationError

MAX_CONTENT_CHARS = 32_768
MAX_CATEGORY_CHARS = 64
MAX_TAGS = 64
MAX_TAG_CHARS = 128
STATUSES = ("active", "archived")


def canonical_uuid(value: object, field: str) -> str:
    """``value`` as a canonical lowercase hyphenated UUID string."""
    if not isinstance(value, str):
        raise EmbeddedValidationError(field, f"must be a UUID string, got {type(value).__name__}")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise EmbeddedValidationError(field, f"not a valid UUID: {value!r}") from None


def canonical_uuid_or_none(value: str) -> str | None:
    """The canonical form of a UUID string, or None when it is not one (reads: no match)."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        return None


def text(value: object, field: str, *, max_chars: int = MAX_CONTENT_CHARS) -> str:
    """Non-blank text of at most ``max_chars`` characters that encodes as UTF-8."""
    if not isinstance(value, str):
        raise EmbeddedValidationError(field, f"must be a string, got {type(value).__name__}")
    if not value.strip():
        raise EmbeddedValidationError(field, "must not be empty")
    if len(value) > max_chars:
        raise EmbeddedValidationError(field, f"is {len(value)} characters, the maximum is {max_chars}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise EmbeddedValidationError(field, "is not valid Unicode (lone surrogate)") from None
    return value


def category(value: object) -> str:
    """A non-blank category of at most 64 characters, stripped (any name; unknown: 14-day half-life)."""
    return text(value, "category", max_chars=MAX_CATEGORY_CHARS).strip()


def unit_interval(value: object, field: str) -> float:
    """A finite number in [0, 1] (booleans are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EmbeddedValidationError(field, f"must be a number in [0, 1], got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise EmbeddedValidationError(field, f"must be a finite number in [0, 1], got {value!r}")
    return number


def count(value: object, field: str) -> int:
    """A non-negative integer (booleans are refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EmbeddedValidationError(field, f"must be a non-negative integer, got {value!r}")
    return value


def tags(values: object) -> tuple[str, ...]:
    """At most 64 distinct non-blank strings of at most 128 characters, stripped, order kept."""
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise EmbeddedValidationError("tags", "must be a list of strings")
    result: list[str] = []
    for position, tag in enumerate(values):
        cleaned = text(tag, f"tags[{position}]", max_chars=MAX_TAG_CHARS).strip()
        if cleaned not in result:
            result.append(cleaned)
    if len(result) > MAX_TAGS:
        raise EmbeddedValidationError("tags", f"has {len(result)} tags, the maximum is {MAX_TAGS}")
    return tuple(result)


def status(value: object) -> str:
    if value not in STATUSES:
        raise EmbeddedValidationError("status", f"must be one of {', '.join(STATUSES)}, got {value!r}")
    return str(value)


def timestamp(value: object, field: str) -> datetime:
    """An aware datetime, or an ISO-8601 string with a timezone, as UTC."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise EmbeddedValidationError(field, f"not an ISO-8601 timestamp: {value!r}") from None
    if not isinstance(value, datetime):
        raise EmbeddedValidationError(field, f"must be a timestamp, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise EmbeddedValidationError(field, "must include a timezone (e.g. 2026-01-01T00:00:00Z)")
    return value.astimezone(timezone.utc)
