"""One keep-alive connection pool whose connections an abandoned call can never poison.

Why (SPEC 2.14): if a call is cancelled after its request went out but before its answer was read,
a careless pool could hand that connection to the next call, which would then read the earlier
call's answer: another tenant's data. Closing the connection on every cancellation is safe but
churns TCP connections at the request rate when the upstream is slow (TIME_WAIT build-up).

How:
- A call first takes one of ``pool_size`` slots, waiting at most its own timeout. Nothing is on the
  wire yet, so giving up here is free.
- The HTTP exchange then runs in its own task, which owns the slot and reads the WHOLE answer
  before aiohttp may pool the connection again. The caller waits for that task up to its timeout;
  when the caller gives up (timeout or cancellation) the task carries on and drains the late answer,
  so the connection is reused instead of closed.
- Each exchange has a hard cap of ``timeout + drain_grace_s``: past it the task is cancelled and the
  connection is closed, never pooled (aiohttp closes a connection whose answer is unread, and we
  close it explicitly as well). Open connections never exceed ``pool_size``; new connections are
  bounded by ``pool_size`` per hard cap even when every call times out; a slow upstream sees at most
  ``pool_size`` requests in flight (callers over that shed load locally).

Note: aiohttp itself retries an idempotent request (GET) once when a *reused* keep-alive
connection is dropped before any answer (RFC 9112 section 9.3.1.1); POSTs are never retried.
"""

from __future__ import annotations

import asyncio
import math

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
        self._inflight: set[asyncio.Task[Reply]] = set()
        self._closed = False

    async def send(self, request: Request, *, timeout_s: float) -> Reply:
        """Send ``request`` and return its full answer within ``timeout_s`` seconds."""
        session, slots = self._open()
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise MemorySourceTimeoutError(f"no time budget for the call (timeout_s={timeout_s!r})")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        owned = False
        try:
            async with asyncio.timeout_at(deadline):
                await slots.acquire()
                owned = True
                if self._closed:
                    raise MemorySourceClosedError("memory source closed while the call waited")
                task = loop.create_task(self._exchange(session, request, timeout_s + self._drain_grace_s))
                owned = False  # the task releases the slot from now on
        except TimeoutError:
            raise MemorySourceTimeoutError(
                f"memory service timeout: no free connection within {timeout_s * 1000:.0f} ms") from None
        finally:
            if owned:
                slots.release()
        self._inflight.add(task)
        task.add_done_callback(self._settle)
        done, _ = await asyncio.wait((task,), timeout=max(deadline - loop.time(), 0.0))
        if not done:
            raise MemorySourceTimeoutError(f"memory service timeout after {timeout_s * 1000:.0f} ms")
        if task.cancelled():
            raise MemorySourceClosedError("memory source closed during the call")
        return task.result()

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
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=None),
                raise_for_status=False, trust_env=False)
            self._slots = asyncio.Semaphore(self._pool_size)
        return self._session, self._slots

    def _settle(self, task: asyncio.Task[Reply]) -> None:
        self._inflight.discard(task)
        if not task.cancelled():
            task.exception()  # an abandoned call's failure is expected: mark it retrieved

    async def _exchange(self, session: aiohttp.ClientSession, request: Request, cap_s: float) -> Reply:
        assert self._slots is not None
        try:
            async with asyncio.timeout(cap_s):
                return await self._round_trip(session, request)
        except TimeoutError:
            raise MemorySourceTimeoutError(f"memory service timeout after {cap_s * 1000:.0f} ms") from None
        except aiohttp.ClientError as exc:
            raise MemorySourceUnavailableError(f"memory service transport error: {_describe(exc)}") from exc
        except (OSError, ValueError) as exc:
            raise MemorySourceUnavailableError(f"memory service transport error: {_describe(exc)}") from exc
        except MemorySourceUnavailableError:
            raise
        except Exception as exc:  # a library failure we did not foresee still may not cross the port
            raise MemorySourceUnavailableError(f"memory service client failure: {_describe(exc)}") from exc
        finally:
            self._slots.release()

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
        async for chunk in response.content.iter_any():
            size += len(chunk)
            if size > self._max_body_bytes:
                raise MemorySourceUnavailableError(
                    f"memory service answer too large: over {self._max_body_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
