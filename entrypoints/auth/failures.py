"""Auth failure reporting: the edges call ``on_failure(reason)`` for every rejected call.

The metrics module provides the callable (e.g. a Prometheus counter's ``labels(reason).inc``);
this package never imports a metrics library. ``errors.ALL_REASONS`` lists every label value.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

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
