"""Port: wall-clock and monotonic time."""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    @abstractmethod
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""

    @abstractmethod
    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes backwards. For latencies and deadlines."""
