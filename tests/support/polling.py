"""Waiting for a real condition in async tests, for state that no event or callback reports."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

HANG_GUARD_S = 30.0


async def until(condition: Callable[[], bool], what: str = "condition", cap_s: float = HANG_GUARD_S) -> None:
    """Return as soon as ``condition()`` holds (checked every 10 ms); ``cap_s`` is a hang guard only,
    never a timing figure: past it the test fails naming ``what``."""
    try:
        async with asyncio.timeout(cap_s):
            while not condition():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"{what}: not reached within {cap_s:g} s") from None
