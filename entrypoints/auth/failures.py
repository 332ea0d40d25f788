"""Auth failure reporting: the edges call ``on_failure(reason)`` for every rejected call.

The metrics module provides the callable (e.g. a Prometheus counter's ``labels(reason).inc``);
this package never imports a metrics library. ``errors.ALL_REASONS`` lists every label value.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping

FailureCallback = Callable[[str], None]

_log = logging.getLogger(__name__)


def report_failure(on_failure: FailureCallback | None, reason: str) -> None:
    """Call ``on_failure(reason)``; a failing counter is logged, never turned into a failed call."""
    if on_failure is None:
        return
    try:
        on_failure(reason)
    except Exception:
        _log.exception("auth failure counter raised (reason=%s)", reason)


class FailureTally:
    """A thread-safe in-process ``on_failure`` that counts by reason (tests, diagnostics)."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, reason: str) -> None:
        with self._lock:
            self._counts[reason] += 1

    def counts(self) -> Mapping[str, int]:
        with self._lock:
            return dict(self._counts)
