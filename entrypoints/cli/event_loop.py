"""Run a coroutine to completion on the configured event loop ("uvloop" or "asyncio")."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run_loop(main: Coroutine[Any, Any, T], event_loop: str) -> T:
    """``asyncio.run`` on uvloop (libuv: cheaper I/O and timers, same asyncio API) or the stdlib loop."""
    if event_loop == "uvloop":
        return uvloop.run(main)
    return asyncio.run(main)
