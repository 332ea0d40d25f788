"""Validation of what the write API stores: each check names the field it rejects."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone

from adapters.embedded.errors import EmbeddedValidationError

MAX_CONTENT_CHARS = 32_768
MAX_CATEGORY_CHARS = 64
MAX_TAGS = 64
MAX_TAG_CHARS = 128
STATUSES = ("active", "archived")
MAX_COUNT = 2**63 - 1  # SQLite INTEGER
_SHOWN_CHARS = 80


class OversizedInteger:
    """An integer literal too long to be worth converting (a JSON import line); every check refuses it."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


def shown(value: object) -> str:
    """``value`` for an error message: short, one line, whatever it is (never a huge repr)."""
    if isinstance(value, OversizedInteger):
        return repr(value)
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        digits = len(str(abs(value)))
        return repr(value) if digits <= 20 else f"an integer of {digits} digits"
    if isinstance(value, str):
        text = repr(value[:_SHOWN_CHARS])
        return text if len(value) <= _SHOWN_CHARS else f"{text}... ({len(value)} characters)"
    return f"a {kind(value)}"


def kind(value: object) -> str:
    """The JSON-ish name of ``value``'s type for an error message."""
    if isinstance(value, OversizedInteger):
        return "int"
    return type(value).__name__


def canonical_uuid(value: object, field: str) -> str:
    """``value`` as a canonical lowercase hyphenated UUID string."""
    if not isinstance(value, str):
        raise EmbeddedValidationError(field, f"must be a UUID string, got {kind(value)}")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise EmbeddedValidationError(field, f"not a valid UUID: {shown(value)}") from None


def canonical_uuid_or_none(value: str) -> str | None:
    """The canonical form of a UUID string, or None when it is not one (reads: no match)."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        return None


def text(value: object, field: str, *, max_chars: int = MAX_CONTENT_CHARS) -> str:
    """Non-blank text of at most ``max_chars`` characters that encodes as UTF-8."""
    if not isinstance(value, str):
        raise EmbeddedValidationError(field, f"must be a string, got {kind(value)}")
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
    if isinstance(value, OversizedInteger) or (isinstance(value, int) and not isinstance(value, bool)
                                               and not 0 <= value <= 1):
        raise EmbeddedValidationError(field, f"must be a finite number in [0, 1], got {shown(value)}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EmbeddedValidationError(field, f"must be a number in [0, 1], got {kind(value)}")
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise EmbeddedValidationError(field, f"must be a finite number in [0, 1], got {shown(value)}")
    return number


def count(value: object, field: str) -> int:
    """An integer in [0, 2^63 - 1] (booleans are refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise EmbeddedValidationError(field, f"must be an integer in [0, {MAX_COUNT}], got {shown(value)}")
    return value


def tags(values: object) -> tuple[str, ...]:
    """At most 64 distinct non-blank strings of at most 128 characters, stripped, order kept.

    A list (or another sequence); a mapping, a string or bytes are refused, not taken apart.
    """
    if isinstance(values, str | bytes | bytearray | Mapping) or not isinstance(values, Iterable):
        raise EmbeddedValidationError("tags", f"must be a list of strings, got {kind(values)}")
    result: dict[str, None] = {}
    for position, tag in enumerate(values):
        result[text(tag, f"tags[{position}]", max_chars=MAX_TAG_CHARS).strip()] = None
        if len(result) > MAX_TAGS:
            raise EmbeddedValidationError("tags", f"has more than {MAX_TAGS} distinct tags, the maximum is {MAX_TAGS}")
    return tuple(result)


def status(value: object) -> str:
    if value not in STATUSES:
        raise EmbeddedValidationError("status", f"must be one of {', '.join(STATUSES)}, got {shown(value)}")
    return str(value)


def timestamp(value: object, field: str) -> datetime:
    """An aware datetime, or an ISO-8601 string with a timezone, as UTC (years 1..9999 in UTC)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise EmbeddedValidationError(field, f"not an ISO-8601 timestamp: {shown(value)}") from None
    if not isinstance(value, datetime):
        raise EmbeddedValidationError(field, f"must be a timestamp, got {kind(value)}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise EmbeddedValidationError(field, "must include a timezone (e.g. 2026-01-01T00:00:00Z)")
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise EmbeddedValidationError(
            field, f"{value.isoformat()} is outside 0001-01-01..9999-12-31 once converted to UTC") from None
