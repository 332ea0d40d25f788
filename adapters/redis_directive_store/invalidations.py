"""Directive invalidations from Redis pub/sub: one ``PSUBSCRIBE directive_updates:*`` per process.

The Go proxy invalidates an org's directives with ``DEL`` and a ``PUBLISH`` on
``directive_updates:{org_id}`` (the payload is unspecified and ignored). ``RedisInvalidations``
owns one connection for that subscription, opened through the store's own URL logic
(``store.open_client``: ``redis://``, ``rediss://``, ``unix://`` or Sentinel, where each
(re)connect asks the sentinels for the current master), and reports to its owner through two
callbacks, both called on the event loop, between awaits:

* ``on_invalidate(org_id)`` for every message: the channel's org id in canonical lowercase
  hyphenated form (``canonical_uuid``, the form ``directive_key`` writes); ``None`` when the
  channel's suffix is not a UUID, which the owner must read as "anything may have changed".
* ``on_state(live, detail)`` on each transition, never per retry: ``True`` once a PSUBSCRIBE is
  confirmed (its reply read: from then on no message is missed until ``False``); ``False`` when
  that subscription is lost (connection dropped or killed, Redis restarted, the master moved, no
  reply to a PING, ``close()``: ``detail`` says which, ``CLOSED`` for ``close()``). It starts down.

The session (RESP2 or RESP3, whichever the URL's client speaks; redis-py 8 defaults to RESP3,
where messages are push frames): take the connection, send PSUBSCRIBE and read its confirmation, all within
``connect_timeout_s``; live. Then read messages; after ``ping_interval_s`` of silence a PING,
and if nothing at all (its PONG or a message) arrives within another ``ping_interval_s`` the
connection is declared dead (a silently broken TCP path is found within twice the interval).
With Sentinel, every ``ping_interval_s`` the sentinels are also asked for the master, and the
session ends when it is no longer this connection's (``_check_master``: a demoted master keeps
its pub/sub clients).
Any failure, whatever raised it, ends the session: its connection is closed, never reused (a
fresh one subscribes anew, so redis-py never resubscribes behind our back), and after a wait
(``BACKOFF_FIRST_S`` doubling to ``BACKOFF_MAX_S``, back to the first after a confirmed
subscription) the next session starts. The loop runs from ``start()`` until ``close()``.

The callbacks must not raise; one that does ends the session like a lost connection would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import redis.asyncio as redis_asyncio
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import RedisError

from adapters.redis_directive_store.store import canonical_uuid, open_client
from ports.errors import DirectiveStoreError

PATTERN = "directive_updates:*"
CHANNEL_PREFIX = b"directive_updates:"
CLOSED = "closed"  # the ``detail`` of the last ``on_state(False, ...)``, sent by ``close()``
DEFAULT_CONNECT_TIMEOUT_S = 2.0
DEFAULT_PING_INTERVAL_S = 5.0
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 1.0

_PONGS = (b"pong", b"PONG")  # the reply to PING while subscribed: [b"pong", b""] over RESP2, +PONG over RESP3
OnInvalidate = Callable[[str | None], None]
OnState = Callable[[bool, str], None]


class SubscriptionLost(Exception):
    """The subscription ended without a library error (an unexpected reply, a missing PONG)."""


class RedisInvalidations:
    """The PSUBSCRIBE loop (see the module docstring); owns (and closes) the client it is given."""

    def __init__(
        self,
        client: redis_asyncio.Redis,
        *,
        on_invalidate: OnInvalidate,
        on_state: OnState,
        sentinel: Sentinel | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        ping_interval_s: float = DEFAULT_PING_INTERVAL_S,
        backoff_s: tuple[float, float] = (BACKOFF_FIRST_S, BACKOFF_MAX_S),
    ) -> None:
        first, most = backoff_s
        if not 0 < first <= most:
            raise ValueError(f"backoff_s must be (first, max) with 0 < first <= max, got {backoff_s!r}")
        for name, value in (("connect_timeout_s", connect_timeout_s), ("ping_interval_s", ping_interval_s)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {value!r}")
        self._client = client
        self._sentinel = sentinel
        self._on_invalidate = on_invalidate
        self._on_state = on_state
        self._connect_timeout_s = connect_timeout_s
        self._ping_interval_s = ping_interval_s
        self._backoff_first_s, self._backoff_max_s = first, most
        self._task: asyncio.Task[None] | None = None
        self._live = False
        self._closed = False
        self.subscriptions = 0  # PSUBSCRIBEs confirmed so far
        self.attempts = 0  # sessions started so far (each on a fresh connection)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        on_invalidate: OnInvalidate,
        on_state: OnState,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        ping_interval_s: float = DEFAULT_PING_INTERVAL_S,
        backoff_s: tuple[float, float] = (BACKOFF_FIRST_S, BACKOFF_MAX_S),
    ) -> RedisInvalidations:
        """The feed over one connection to ``url``, opened as the store opens its pool.

        Raises:
            ValueError: a string that is not a Redis URL, or a bad timeout or backoff.
        """
        client, sentinel = open_client(url, socket_timeout_s=connect_timeout_s, connect_timeout_s=connect_timeout_s,
                                       max_connections=1, health_check_interval_s=0)
        return cls(client, sentinel=sentinel, on_invalidate=on_invalidate, on_state=on_state,
                   connect_timeout_s=connect_timeout_s, ping_interval_s=ping_interval_s, backoff_s=backoff_s)

    @property
    def live(self) -> bool:
        """True while a confirmed subscription is being read."""
        return self._live

    def start(self) -> None:
        """Start the subscription loop on the running event loop (once; not after ``close()``)."""
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="directive-invalidations")

    async def close(self) -> None:
        """Stop the loop, close its connection and the client; ``on_state(False, CLOSED)`` if it
        was live. Idempotent.

        Raises:
            DirectiveStoreError: closing the client failed.
        """
        if self._closed:
            return
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # close() itself is being cancelled
        self._set_live(False, CLOSED)
        try:
            await self._client.aclose()
            if self._sentinel is not None:
                await self._sentinel.aclose()
        except (RedisError, OSError) as e:
            raise DirectiveStoreError(f"closing the directive invalidation feed failed: {e}") from e

    # ------------------------------------------------------------------ the loop
    async def _run(self) -> None:
        delay = self._backoff_first_s
        while True:
            subscribed_before = self.subscriptions
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # whatever ended the session, the loop goes on
                detail = f"{type(e).__name__}: {e}"
            else:  # pragma: no cover - a session only ends by raising
                detail = "session ended"
            self._set_live(False, detail)
            if self.subscriptions > subscribed_before:
                delay = self._backoff_first_s  # it had worked: retry soon, then back off again
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._backoff_max_s)

    async def _session(self) -> None:
        self.attempts += 1
        pool = self._client.connection_pool
        connection = None
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                connection = await pool.get_connection()
                await connection.send_command("PSUBSCRIBE", PATTERN)
                reply = await connection.read_response(disable_decoding=True, push_request=True)
            if not (isinstance(reply, list) and reply[:2] == [b"psubscribe", PATTERN.encode()]):
                raise SubscriptionLost(f"unexpected reply to PSUBSCRIBE: {reply!r:.200}")
            self._set_live(True, "subscribed")
            await self._read(connection)
        finally:
            if connection is not None:
                await connection.disconnect(nowait=True)  # never reused: a new session starts clean
                await asyncio.shield(pool.release(connection))

    async def _read(self, connection: redis_asyncio.connection.AbstractConnection) -> None:
        loop = asyncio.get_running_loop()
        awaiting_reply = False
        next_master_check = loop.time() + self._ping_interval_s
        while True:
            if self._sentinel is not None and loop.time() >= next_master_check:
                await self._check_master(connection)
                next_master_check = loop.time() + self._ping_interval_s
            reply = await connection.read_response(disable_decoding=True, timeout=self._ping_interval_s,
                                                   push_request=True)
            if reply is None:  # nothing at all for a whole interval
                if awaiting_reply:
                    raise SubscriptionLost(f"no reply to PING within {self._ping_interval_s:g} s")
                await connection.send_command("PING")
                awaiting_reply = True
                continue
            awaiting_reply = False  # the connection carries data: it is alive
            kind = reply[0] if isinstance(reply, list) and reply else reply
            if kind == b"pmessage" and len(reply) == 4:
                self._on_invalidate(org_of_channel(reply[2]))
            elif kind not in _PONGS:
                raise SubscriptionLost(f"unexpected message on the subscription: {reply!r:.200}")

    async def _check_master(self, connection: redis_asyncio.connection.AbstractConnection) -> None:
        """Sentinel: end the session when the sentinels name another master than this connection's.

        Sentinel kills a demoted master's normal clients, not (Redis 7.0) its pub/sub ones, so a
        subscription can outlive its master's demotion; messages published on the new master
        still reach it through replication while the old one replicates, and the TTL bounds
        what it may miss, but it must move. A failed lookup keeps the session: the connection
        itself still works, and without sentinels no new one could be opened anyway.
        """
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                master = await self._client.connection_pool.get_master_address()
        except (RedisError, OSError, TimeoutError):
            return
        here = (getattr(connection, "host", None), getattr(connection, "port", None))
        if tuple(master) != here:
            raise SubscriptionLost(f"the master moved to {master[0]}:{master[1]}")

    def _set_live(self, live: bool, detail: str) -> None:
        if live == self._live:
            return
        self._live = live
        if live:
            self.subscriptions += 1
        self._on_state(live, detail)


def org_of_channel(channel: bytes) -> str | None:
    """The canonical org id a ``directive_updates:{org_id}`` channel names; None when it names none."""
    if not channel.startswith(CHANNEL_PREFIX):
        return None
    try:
        suffix = channel[len(CHANNEL_PREFIX):].decode("ascii")
    except UnicodeDecodeError:
        return None
    return canonical_uuid(suffix)
