"""A clock for tests: time stands still until the test advances it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ports.clock import Clock

DEFAULT_NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


class FixedClock(Clock):
    """``now()`` returns the given aware time (default 2026-01-01T00:00:00Z) until ``advance``."""

    def __init__(self, now: datetime = DEFAULT_NOW) -> None:
        if now.tzinfo is None or now.utcoffset() is None:
            raise ValueError("FixedClock needs a timezone-aware datetime")
        self._now = now.astimezone(timezone.utc)
        self._monotonic = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (>= 0)."""
        if seconds < 0:
            raise ValueError(f"a clock never goes backwards (advance({seconds}))")
        self._now += timedelta(seconds=seconds)
        self._monotonic += seconds
