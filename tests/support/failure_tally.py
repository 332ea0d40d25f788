"""An in-process ``on_failure`` for the auth edges' tests: counts rejected calls by reason."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping


class FailureTally:
    """A thread-safe ``on_failure`` that counts by reason."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, reason: str) -> None:
        with self._lock:
            self._counts[reason] += 1

    def counts(self) -> Mapping[str, int]:
        with self._lock:
            return dict(self._counts)
