"""Admission control: an assembly starts only when it can finish inside its caller's deadline.

The process runs at most ``max_in_flight`` assemblies at once, over both edges (they share the
CPU). Two deadline rules, because what an assembly needs depends on how busy the process is:

* a call that arrives with less than ``min_deadline_s`` left never starts (even an idle process
  cannot answer it in time);
* a call that finds every slot taken needs at least ``busy_deadline_s`` left, what an assembly
  takes on a loaded process, to wait for one: with less it is refused at once, without waiting.
  Otherwise it waits at most ``max_wait_s``, and never so long that less than ``busy_deadline_s``
  would be left. Under overload the calls that reach the service late (after queueing in the
  transport and the event loop) are thus refused instead of being assembled into an answer the
  caller no longer waits for; an idle process still serves a caller with a short deadline.

A refused call gets ``Shed`` (the reason, and a message saying why): the gRPC edge answers
RESOURCE_EXHAUSTED, the HTTP edge 503 with ``Retry-After``, and ``on_shed(surface, reason)``
counts it. A late answer is worth nothing to the proxy, which fails open; a refusal lets it go
on without waiting. Health is untouched.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


class ShedReason(enum.StrEnum):
    IN_FLIGHT = "in_flight"  # every slot taken, none freed within the wait
    DEADLINE = "deadline"  # too little of the caller's deadline left to start


class Shed(Exception):
    """A call refused before it started; ``str()`` says why."""

    def __init__(self, reason: ShedReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


ShedCallback = Callable[[str, ShedReason], None]


class Admission:
    def __init__(self, *, max_in_flight: int, max_wait_s: float, min_deadline_s: float, busy_deadline_s: float,
                 on_shed: ShedCallback | None = None) -> None:
        if max_in_flight < 1 or max_wait_s < 0 or min_deadline_s < 0 or busy_deadline_s < min_deadline_s:
            raise ValueError("max_in_flight must be >= 1, the waits >= 0 and busy_deadline_s >= min_deadline_s, got "
                             f"{max_in_flight}, {max_wait_s}, {min_deadline_s}, {busy_deadline_s}")
        self._max_in_flight = max_in_flight
        self._max_wait_s = max_wait_s
        self._min_deadline_s = min_deadline_s
        self._busy_deadline_s = busy_deadline_s
        self._on_shed = on_shed
        self._slots = asyncio.Semaphore(max_in_flight)

    @asynccontextmanager
    async def slot(self, surface: str, deadline_s: float | None) -> AsyncIterator[None]:
        """Hold one assembly slot for the body of the ``async with``.

        Args:
            surface: ``grpc`` or ``http`` (the metric label).
            deadline_s: the caller's remaining time, seconds (None: no deadline).

        Raises:
            Shed: the call may not start (the reason and why in the message).
        """
        self.check_start(surface, deadline_s)
        if self._slots.locked():
            wait_s = self._max_wait_s if deadline_s is None else min(self._max_wait_s, deadline_s - self._busy_deadline_s)
            try:
                async with asyncio.timeout(max(wait_s, 0.0)):
                    await self._slots.acquire()
            except TimeoutError:
                raise self._shed(surface, ShedReason.IN_FLIGHT, (
                    f"all {self._max_in_flight} assembly slots are taken and none freed within "
                    f"{max(wait_s, 0.0) * 1000.0:g} ms; retry shortly")) from None
        else:
            await self._slots.acquire()
        try:
            yield
        finally:
            self._slots.release()

    def check_start(self, surface: str, deadline_s: float | None) -> None:
        """Raise ``Shed`` at once if a call with ``deadline_s`` left may not start now (the two
        deadline rules; nothing waits). ``slot`` applies it too; an edge calls it before it reads
        the request, so that a call refused for its deadline costs no reading or decoding."""
        if deadline_s is None:
            return
        if deadline_s < self._min_deadline_s:
            raise self._shed(surface, ShedReason.DEADLINE, (
                f"{max(deadline_s, 0.0) * 1000.0:.1f} ms of the deadline left; an assembly is not started "
                f"with less than {self._min_deadline_s * 1000.0:g} ms"))
        if deadline_s < self._busy_deadline_s and self._slots.locked():
            raise self._shed(surface, ShedReason.DEADLINE, (
                f"all {self._max_in_flight} assembly slots are taken and {deadline_s * 1000.0:.1f} ms of the "
                f"deadline is left; a busy process needs {self._busy_deadline_s * 1000.0:g} ms to start one"))

    def _shed(self, surface: str, reason: ShedReason, message: str) -> Shed:
        if self._on_shed is not None:
            self._on_shed(surface, reason)
        return Shed(reason, message)
