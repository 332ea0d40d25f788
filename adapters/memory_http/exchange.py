"""One keep-alive connection pool whose connections an abandoned call can never poison.

Why (SPEC 2.14): if a call is cancelled after its request went out but before its answer was read,
a careless pool could hand that connection to the next call, which would then read the earlier
call's answer: another tenant's data. Closing the connection on every cancellation is safe but
churns TCP connections at the request rate when the upstream is slow (TIME_WAIT build-up).

How:
- A call first takes one of ``pool_size`` slots, waiting at most its own timeout. Nothing is on the
  wire yet, so giving up here is free.
- The HTTP exchange then runs in its own task, which owns the slot and reads the WHOLE answer
  before aiohttp may pool the connection again. The caller waits, up to its timeout, for a future
  the task resolves with the answer (or the port error); when the caller gives up (timeout or
  cancellation) only that future is abandoned: the task carries on and drains the late answer, so
  the connection is reused instead of closed.
- Each exchange has a hard cap of ``timeout + drain_grace_s``: past it the task is cancelled and the
  connection is closed, never pooled (aiohttp closes a connection whose answer is unread, and we
  close it explicitly as well). Open connections never exceed ``pool_size``; new connections are
  bounded by ``pool_size`` per hard cap even when every call times out; a slow upstream sees at most
  ``pool_size`` requests in flight (callers over that shed load locally).

Cost: a free slot is taken without a timer; the task hands its answer straight to the caller's
future (no extra hop through the task's done callbacks); the done callback only frees the slot.

Note: aiohttp itself retries an idempotent request (GET) once when a *reused* keep-alive
connection is dropped before any answer (RFC 9112 section 9.3.1.1); POSTs are never retried.
"""

from __future__ import annotations

import asyncio
import math
from functools import partial

import aiohttp
import attrs

from ports.errors import (
    MemorySourceClosedError,
    MemorySourceTimeoutError,
    MemorySourceUnavailableError,
)


@attrs.frozen
class Reply:
    status: int
    body: bytes


@attrs.frozen
class Request:
    method: str
    url: str
    headers: dict[str, str]
    params: dict[str, str] | None = None
    body: bytes | None = None


class PooledExchange:
    """Runs HTTP exchanges for one upstream; raises only ports.errors exceptions."""

    def __init__(self, *, pool_size: int, drain_grace_s: float, max_body_bytes: int,
                 keepalive_s: float) -> None:
        self._pool_size = pool_size
        self._drain_grace_s = drain_grace_s
        self._max_body_bytes = max_body_bytes
        self._keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None
        self._slots: asyncio.Semaphore | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._closed = False

    async def send(self, request: Request, *, timeout_s: float) -> Reply:
        """Send ``request`` and return its full answer within ``timeout_s`` seconds."""
        session, slots = self._open()
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise MemorySourceTimeoutError(f"no time budget for the call (timeout_s={timeout_s!r})")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        await _take_slot(slots, deadline, timeout_s)
        if self._closed:
            slots.release()
            raise MemorySourceClosedError("memory source closed while the call waited")
        answer: asyncio.Future[Reply] = loop.create_future()
        task = loop.create_task(self._exchange(session, request, answer, timeout_s + self._drain_grace_s))
        self._inflight.add(task)
        task.add_done_callback(partial(self._settle, slots, answer))
        timer = loop.call_at(deadline, _expire, answer, timeout_s)
        try:
            return await answer
        except asyncio.CancelledError:
            if answer.done() and not answer.cancelled():
                answer.exception()  # an answer that raced the cancellation: mark it retrieved
            raise
        finally:
            timer.cancel()

    async def close(self) -> None:
        """Cancel exchanges still running and close every connection."""
        self._closed = True
        for task in tuple(self._inflight):
            task.cancel()
        await asyncio.gather(*self._inflight, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def _open(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        if self._closed:
            raise MemorySourceClosedError("memory source is closed")
        if self._session is None or self._slots is None:
            connector = aiohttp.TCPConnector(
                limit=self._pool_size, limit_per_host=self._pool_size,
                keepalive_timeout=self._keepalive_s, ttl_dns_cache=300)
            # No cookie jar: one session serves every tenant, so a cookie the upstream set on one
            # tenant's answer must never ride along on another's request (and skipping the jar
            # saves about a fifth of aiohttp's CPU per call).
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=None),
                raise_for_status=False, trust_env=False, cookie_jar=aiohttp.DummyCookieJar())
            self._slots = asyncio.Semaphore(self._pool_size)
        return self._session, self._slots

    def _settle(self, slots: asyncio.Semaphore, answer: asyncio.Future[Reply], task: asyncio.Task[None]) -> None:
        """Free the slot once the exchange is over (answered, failed, cancelled or abandoned)."""
        self._inflight.discard(task)
        slots.release()
        if not answer.done():  # cancelled before its first step, the exchange could not tell the caller
            answer.set_exception(MemorySourceClosedError("memory source closed during the call"))
        if not task.cancelled():
            task.exception()  # mark retrieved; the exchange reports through ``answer``

    async def _exchange(self, session: aiohttp.ClientSession, request: Request,
                        answer: asyncio.Future[Reply], cap_s: float) -> None:
        """Run one exchange under its hard cap; the outcome goes to ``answer`` unless abandoned."""
        try:
            async with asyncio.timeout(cap_s):
                reply = await self._round_trip(session, request)
        except asyncio.CancelledError:
            _fail(answer, MemorySourceClosedError("memory source closed during the call"))
            raise
        except Exception as exc:
            _fail(answer, _port_error(exc, cap_s))
        else:
            if not answer.done():  # a caller that gave up gets nothing
                answer.set_result(reply)

    async def _round_trip(self, session: aiohttp.ClientSession, request: Request) -> Reply:
        async with session.request(
            request.method, request.url, params=request.params, data=request.body,
            headers=request.headers, allow_redirects=False,
        ) as response:
            try:
                body = await self._read_body(response)
            except BaseException:
                response.close()  # a half-read answer must never go back to the pool
                raise
            return Reply(response.status, body)

    async def _read_body(self, response: aiohttp.ClientResponse) -> bytes:
        declared = response.content_length
        if declared is not None and declared > self._max_body_bytes:
            raise MemorySourceUnavailableError(
                f"memory service answer too large: {declared} bytes > {self._max_body_bytes}")
        chunks: list[bytes] = []
        size = 0
        read = response.content.readany
        try:
            while chunk := await read():
                size += len(chunk)
                if size > self._max_body_bytes:
                    raise MemorySourceUnavailableError(
                        f"memory service answer too large: over {self._max_body_bytes} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            # The error's traceback keeps this frame alive (in a reference cycle, until a full
            # collection): without this, each refused answer would keep up to max_body_bytes.
            chunks.clear()


async def _take_slot(slots: asyncio.Semaphore, deadline: float, timeout_s: float) -> None:
    """Take a slot, waiting until ``deadline`` at most (a free slot is taken at once, untimed)."""
    if not slots.locked():
        await slots.acquire()  # does not suspend while a slot is free
        return
    try:
        async with asyncio.timeout_at(deadline):
            await slots.acquire()  # cancellation-safe: a slot granted as the timer fires is given back
    except TimeoutError:
        raise MemorySourceTimeoutError(
            f"memory service timeout: no free connection within {timeout_s * 1000:.0f} ms") from None


def _expire(answer: asyncio.Future[Reply], timeout_s: float) -> None:
    _fail(answer, MemorySourceTimeoutError(f"memory service timeout after {timeout_s * 1000:.0f} ms"))


def _fail(answer: asyncio.Future[Reply], error: Exception) -> None:
    """Fail the caller's future unless it is already settled (answered, timed out or abandoned)."""
    if not answer.done():
        answer.set_exception(error)


def _port_error(exc: Exception, cap_s: float) -> Exception:
    """The ports.errors exception for a failed exchange (port errors pass through)."""
    if isinstance(exc, TimeoutError):
        return MemorySourceTimeoutError(f"memory service timeout after {cap_s * 1000:.0f} ms")
    if isinstance(exc, (aiohttp.ClientError, OSError, ValueError)):
        error: Exception = MemorySourceUnavailableError(f"memory service transport error: {_describe(exc)}")
    elif isinstance(exc, MemorySourceUnavailableError):
        return exc
    else:  # a library failure we did not foresee still may not cross the port
        error = MemorySourceUnavailableError(f"memory service client failure: {_describe(exc)}")
    error.__cause__ = exc
    return error


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
