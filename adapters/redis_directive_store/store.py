"""Redis directive store: reads the envelope the Go proxy caches at ``{org_id}:directive:{agent_id}``.

Client configuration (SPEC 2.15). redis-py's defaults (multi-second socket timeouts, retries on
timeout) belong to a different world than a 5 ms directive branch. Here:

* every call is bounded by its own ``timeout_s`` (``asyncio.timeout``); that is the real budget;
* socket and connect timeouts are a *backstop* for anything the per-call bound does not cover.
  ``for_branch_timeout`` sizes them as ``max(50 ms, 4 x branch timeout)``: a small multiple of the
  budget, with a floor so that a connect handshake or a GC pause does not trip the backstop first.
  They must be at least the largest ``timeout_s`` callers pass, or the backstop would win;
* no retries at all (``Retry(NoBackoff(), 0)``): a retry can never fit in the budget;
* a bounded, blocking pool (``max_connections``): under load callers queue for a connection, the
  wait bounded by their own ``timeout_s``, instead of opening connections without limit;
* TCP keepalive (TCP URLs), and a PING health check only on connections idle for ``health_check_interval_s``
  (30 s by default), so a silently dead idle socket is found before a GET is written to it.

Fail fast while Redis is failing (``circuit``: the rules and why its values). Without it a hung
Redis costs every uncached read its whole budget and a connection (opened, interrupted, closed),
CPU that other calls' deadlines need. Every GET and PING is admitted by the store's circuit breaker
first: after two calls, the second sent after the first failed, that ended without Redis answering
(a timeout, a connection or transport error, or a cancellation while it waited for Redis: the
retrieval branch's own bound expires first) calls are refused at once for a cool-down (250 ms, doubled after each failed probe up to
500 ms), with a ``DirectiveStoreError`` naming the state and the last failure (never a key: the
message reaches other tenants' callers), touching neither the pool nor the network; then one call
at a time probes, and its answer closes the circuit. A miss, a malformed value or an error reply
is an answer: it never opens the circuit. ``on_circuit(state)`` is told each transition, and the
clock is ``monotonic`` (injectable). The calls it lets through keep every other rule here: their
own ``timeout_s``, no retries, cancellation safety.

Cancellation safety (SPEC 2.14). A GET cancelled by its deadline after it was written leaves its
reply on the wire. If that connection went back to the pool in that state, the next caller would
read the earlier caller's directive: another tenant's data. ``_exchange`` therefore disconnects any
connection whose exchange was interrupted before the reply was read in full, before handing it back;
the pool reconnects it on next use. redis-py 8 also disconnects on interrupted reads; this keeps the
guarantee local, whatever the library version or the point of interruption.

URLs (``from_url``). ``redis://`` and ``rediss://`` (TLS; ``?ssl_ca_certs=PATH``, and
``ssl_certfile``/``ssl_keyfile`` for a client certificate) as redis-py reads them, ``unix://``,
and Redis Sentinel, which redis-py has no URL for:
``redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service_name[/db][?options]``
(``rediss+sentinel://``: TLS to the sentinels and to the master). The port defaults to 26379;
credentials in the URL authenticate to the master, ``sentinel_username`` / ``sentinel_password``
options to the sentinels; TLS options as for ``rediss://``. Every connection (re)opened asks the
sentinels, in order, for the current master, so after a failover the next call connects to the
new master; the old master's connections are closed by Sentinel itself (``CLIENT KILL``) when it
is demoted, and ``_exchange`` drops any connection that failed mid-call (one such failure leaves
the circuit closed, and the next read, on a new connection to the new master, answers: the
circuit opens only if that read fails too). The pool is the same
bounded blocking pool with no retries; sentinel queries use the same socket backstop.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import attrs
import redis.asyncio as redis_asyncio
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import (
    Sentinel, SentinelConnectionPool, SentinelManagedConnection, SentinelManagedSSLConnection,
)
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from adapters.redis_directive_store.circuit import DEFAULT_COOLDOWN_S, DEFAULT_MAX_COOLDOWN_S, INTERRUPTED, Circuit
from domain.model.directive import DEFAULT_INJECTION_MODE, INJECTION_MODES, Directive
from ports.directive_store import DirectiveStore
from ports.errors import DirectiveStoreError, DirectiveStoreTimeoutError

ENVELOPE_VERSION = 1
SOCKET_TIMEOUT_FLOOR_S = 0.05
SOCKET_TIMEOUT_BRANCH_MULTIPLE = 4.0
DEFAULT_MAX_CONNECTIONS = 16
DEFAULT_HEALTH_CHECK_INTERVAL_S = 30.0
DEFAULT_SENTINEL_PORT = 26379
SENTINEL_SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}  # scheme -> TLS
_SENTINEL_OPTIONS = frozenset({"sentinel_username", "sentinel_password", "ssl_ca_certs", "ssl_certfile",
                               "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname"})
_TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# Canonical (any case) or 32 bare hex digits; stricter than uuid.UUID, which also takes braces,
# "urn:uuid:", stray hyphens, underscores and non-ASCII digits.
_CANONICAL_UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.ASCII)
_UUID_TEXT = re.compile(r"[0-9a-f]{8}(-?)[0-9a-f]{4}\1[0-9a-f]{4}\1[0-9a-f]{4}\1[0-9a-f]{12}", re.IGNORECASE | re.ASCII)
_T = TypeVar("_T")


def backstop_timeout_s(branch_timeout_s: float) -> float:
    """Socket/connect timeout for a branch budget: ``max(SOCKET_TIMEOUT_FLOOR_S, 4 x budget)``."""
    _require_positive("branch_timeout_s", branch_timeout_s)
    return max(SOCKET_TIMEOUT_FLOOR_S, SOCKET_TIMEOUT_BRANCH_MULTIPLE * branch_timeout_s)


def directive_key(org_id: str, agent_id: str) -> str:
    """The Go proxy's key, with both ids in canonical lowercase hyphenated form.

    Raises:
        DirectiveStoreError: ``org_id`` or ``agent_id`` is not a UUID (the message names which).
    """
    return org_and_key(org_id, agent_id)[1]


def org_and_key(org_id: str, agent_id: str) -> tuple[str, str]:
    """``(org, key)``: the canonical org id and ``directive_key(org_id, agent_id)``, the whole key.

    The directive cache's key function (``adapters.directive_cache``, wired by the composition
    root): its entries are found by the whole key and dropped by the org.

    Raises:
        DirectiveStoreError: ``org_id`` or ``agent_id`` is not a UUID (the message names which).
    """
    org = _canonical_uuid("org_id", org_id)
    return org, f"{org}:directive:{_canonical_uuid('agent_id', agent_id)}"


@attrs.frozen
class SentinelUrl:
    """A parsed ``redis+sentinel://`` URL (``repr`` never shows the passwords)."""

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    db: int = 0
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    sentinel_username: str | None = None
    sentinel_password: str | None = attrs.field(default=None, repr=False)
    tls: bool = False
    tls_options: Mapping[str, Any] = attrs.field(factory=dict)


def is_sentinel_url(url: str) -> bool:
    return url.partition("://")[0].lower() in SENTINEL_SCHEMES


def parse_sentinel_url(url: str) -> SentinelUrl:
    """Parse ``redis+sentinel://[[user]:password@]host[:port],.../service_name[/db][?options]``.

    Raises:
        ValueError: the message names what is wrong and never contains a credential.
    """
    scheme, sep, _ = url.partition("://")
    if not sep or scheme.lower() not in SENTINEL_SCHEMES:
        raise ValueError(f"a Sentinel URL starts with {' or '.join(s + '://' for s in SENTINEL_SCHEMES)}")
    parts = urlsplit(url)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    sentinels = tuple(_sentinel_address(entry) for entry in hostlist.split(","))
    segments = [unquote(segment) for segment in parts.path.split("/")[1:]]
    if not segments or not segments[0]:
        raise ValueError("a Sentinel URL names the monitored service after the hosts: .../service_name[/db]")
    if len(segments) > 2 or (len(segments) == 2 and not segments[1].isdigit()):
        raise ValueError("a Sentinel URL's path is /service_name or /service_name/db (db a number)")
    options: dict[str, str] = {}
    for name, given in parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query)).items():
        if name not in _SENTINEL_OPTIONS:
            raise ValueError(f"unknown Sentinel URL option {name!r} (known: {', '.join(sorted(_SENTINEL_OPTIONS))})")
        options[name] = given[-1]
    tls = SENTINEL_SCHEMES[scheme.lower()]
    tls_options: dict[str, Any] = {name: options[name] for name in _TLS_OPTIONS if name in options}
    if tls_options and not tls:
        raise ValueError("TLS options need rediss+sentinel://")
    if "ssl_check_hostname" in tls_options:
        tls_options["ssl_check_hostname"] = tls_options["ssl_check_hostname"].lower() in ("1", "true", "yes")
    return SentinelUrl(
        sentinels=sentinels, service_name=segments[0], db=int(segments[1]) if len(segments) == 2 else 0,
        username=username, password=password, sentinel_username=options.get("sentinel_username") or None,
        sentinel_password=options.get("sentinel_password") or None, tls=tls, tls_options=tls_options,
    )


def _sentinel_address(entry: str) -> tuple[str, int]:
    entry = entry.strip()
    if entry.startswith("["):  # [IPv6]:port
        host, _, rest = entry[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = entry.partition(":")
    if not host:
        raise ValueError("a Sentinel URL lists host[:port] entries separated by commas, none empty")
    if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
        raise ValueError(f"Sentinel host {host!r}: the port must be 1..65535")
    return host, int(port_text) if port_text else DEFAULT_SENTINEL_PORT


class _BlockingSentinelPool(SentinelConnectionPool, redis_asyncio.BlockingConnectionPool):
    """A Sentinel-managed pool (each connect asks the sentinels for the master) that blocks,
    within its timeout, when all ``max_connections`` are in use, instead of failing."""


def open_client(
    url: str,
    *,
    socket_timeout_s: float,
    connect_timeout_s: float,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    health_check_interval_s: float = DEFAULT_HEALTH_CHECK_INTERVAL_S,
) -> tuple[redis_asyncio.Redis, Sentinel | None]:
    """A client for any of the URLs above on a bounded blocking pool with no retries, and the
    Sentinel manager it uses (None for a plain URL; the owner closes it after the client).

    The store's pool and the invalidation feed's connection (``invalidations``) both come from
    here, so they reach the same server the same way: after a Sentinel failover each reconnects
    to the new master.

    Raises:
        ValueError: a non-positive timeout or pool size, or a string that is not a Redis URL.
    """
    _require_positive("socket_timeout_s", socket_timeout_s)
    _require_positive("connect_timeout_s", connect_timeout_s)
    interval = health_check_interval_s
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not 0 <= interval < math.inf:
        raise ValueError(
            f"health_check_interval_s must be >= 0 seconds (0 disables), got {health_check_interval_s!r}"
        )
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
        raise ValueError(f"max_connections must be an integer >= 1, got {max_connections!r}")
    if is_sentinel_url(url):
        return _sentinel_client(parse_sentinel_url(url), socket_timeout_s, connect_timeout_s, max_connections, interval)
    try:
        pool = redis_asyncio.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=socket_timeout_s,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=connect_timeout_s,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=interval,
            **({} if url.startswith("unix:") else {"socket_keepalive": True}),
        )
    except ValueError as e:
        raise ValueError(
            f"redis url is not a Redis URL (redis://, rediss://, unix://, redis+sentinel://, rediss+sentinel://): {e}"
        ) from e
    return redis_asyncio.Redis.from_pool(pool), None


def _sentinel_client(target: SentinelUrl, socket_timeout_s: float, connect_timeout_s: float,
                     max_connections: int, health_check_interval_s: float) -> tuple[redis_asyncio.Redis, Sentinel]:
    backstop = {"socket_timeout": socket_timeout_s, "socket_connect_timeout": connect_timeout_s,
                "socket_keepalive": True, "retry": Retry(NoBackoff(), 0)}
    tls = {"ssl": True, **target.tls_options} if target.tls else {}
    sentinel = Sentinel(
        list(target.sentinels),
        sentinel_kwargs={**backstop, **tls, "username": target.sentinel_username,
                         "password": target.sentinel_password},
    )
    pool = _BlockingSentinelPool(
        target.service_name, sentinel,
        connection_class=SentinelManagedSSLConnection if target.tls else SentinelManagedConnection,
        max_connections=max_connections, timeout=socket_timeout_s,
        db=target.db, username=target.username, password=target.password,
        health_check_interval=health_check_interval_s, **backstop, **target.tls_options,
    )
    return redis_asyncio.Redis.from_pool(pool), sentinel


class RedisDirectiveStore(DirectiveStore):
    """Reads directives with one GET per call; owns (and closes) the client it is given.

    ``cooldown_s``, ``max_cooldown_s``, ``monotonic`` and ``on_circuit`` configure its circuit
    breaker (``adapters.redis_directive_store.circuit``; ``on_circuit`` is its ``on_change``).
    """

    def __init__(
        self,
        client: redis_asyncio.Redis,
        *,
        sentinel: Sentinel | None = None,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        max_cooldown_s: float = DEFAULT_MAX_COOLDOWN_S,
        monotonic: Callable[[], float] = time.monotonic,
        on_circuit: Callable[[str], None] | None = None,
    ) -> None:
        self._circuit = Circuit(cooldown_s=cooldown_s, max_cooldown_s=max_cooldown_s, monotonic=monotonic,
                                on_change=on_circuit)
        self._client = client
        self._sentinel = sentinel  # closed with the store: its clients talk to the sentinels
        self._closed = False

    @classmethod
    def for_branch_timeout(
        cls,
        url: str,
        *,
        branch_timeout_s: float,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        max_cooldown_s: float = DEFAULT_MAX_COOLDOWN_S,
        monotonic: Callable[[], float] = time.monotonic,
        on_circuit: Callable[[str], None] | None = None,
    ) -> RedisDirectiveStore:
        """A store whose socket timeouts are sized for the directive branch budget."""
        backstop = backstop_timeout_s(branch_timeout_s)
        return cls.from_url(
            url, socket_timeout_s=backstop, connect_timeout_s=backstop, max_connections=max_connections,
            cooldown_s=cooldown_s, max_cooldown_s=max_cooldown_s, monotonic=monotonic, on_circuit=on_circuit,
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        socket_timeout_s: float,
        connect_timeout_s: float,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        health_check_interval_s: float = DEFAULT_HEALTH_CHECK_INTERVAL_S,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        max_cooldown_s: float = DEFAULT_MAX_COOLDOWN_S,
        monotonic: Callable[[], float] = time.monotonic,
        on_circuit: Callable[[str], None] | None = None,
    ) -> RedisDirectiveStore:
        """Build the store on a bounded blocking pool with no retries (``open_client``).

        Raises:
            ValueError: a non-positive timeout, pool size or cool-down, or a string that is not a Redis URL.
        """
        Circuit(cooldown_s=cooldown_s, max_cooldown_s=max_cooldown_s)  # the cool-downs checked before a client exists
        client, sentinel = open_client(url, socket_timeout_s=socket_timeout_s, connect_timeout_s=connect_timeout_s,
                                       max_connections=max_connections,
                                       health_check_interval_s=health_check_interval_s)
        return cls(client, sentinel=sentinel, cooldown_s=cooldown_s, max_cooldown_s=max_cooldown_s,
                   monotonic=monotonic, on_circuit=on_circuit)

    @property
    def circuit(self) -> Circuit:
        """The store's circuit breaker (read its ``state``, ``last_failure``, ``cooldown_s``)."""
        return self._circuit

    async def get(self, org_id: str, agent_id: str, *, timeout_s: float) -> Directive | None:
        """One GET bounded by ``timeout_s``; None on a miss, else the parsed envelope.

        Raises:
            DirectiveStoreTimeoutError: no answer within ``timeout_s`` (or the socket backstop).
            DirectiveStoreError: closed store, bad ids, unreachable Redis, a malformed value, or
                the circuit open (Redis not asked: see ``circuit``).
        """
        key = directive_key(org_id, agent_id)
        if self._closed:
            raise DirectiveStoreError("directive store is closed")
        raw = await self._bounded_get(key, timeout_s)
        return None if raw is None else parse_envelope(key, raw)

    async def ping(self, *, timeout_s: float) -> None:
        """Open a pooled connection and PING it (start-up warm-up: no key is read).

        Raises:
            DirectiveStoreError: closed store, unreachable Redis, no answer within ``timeout_s``,
                or the circuit open.
        """
        if self._closed:
            raise DirectiveStoreError("directive store is closed")
        await self._guarded("PING", timeout_s, self._client.ping)

    async def close(self) -> None:
        """Close the client and its pool; later calls raise DirectiveStoreError. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._client.aclose()
            if self._sentinel is not None:
                await self._sentinel.aclose()
        except (RedisError, OSError) as e:
            raise DirectiveStoreError(f"closing the directive store failed: {e}") from e

    async def _bounded_get(self, key: str, timeout_s: float) -> bytes | None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or math.isnan(timeout_s):
            raise DirectiveStoreError(f"timeout_s must be a number of seconds, got {timeout_s!r}")
        if timeout_s <= 0:
            raise DirectiveStoreTimeoutError(f"directive GET {key!r} not attempted: no time left ({timeout_s} s)")
        return await self._guarded(f"directive GET {key!r}", timeout_s, lambda: self._exchange(key))

    async def _guarded(self, what: str, timeout_s: float, operation: Callable[[], Awaitable[_T]]) -> _T:
        """``operation`` admitted by the circuit and bounded by ``timeout_s``; library errors become
        port errors, and the circuit is told how the call ended (``failure``: never the key)."""
        budget_ms = f"{timeout_s * 1000:.3g} ms"
        failure: str | None = INTERRUPTED  # unless Redis answers or the call fails another way
        ticket = self._circuit.admit()  # nothing between admitting and the try: the ticket is always settled
        try:
            async with asyncio.timeout(timeout_s):
                result = await operation()
            failure = None
            return result
        except TimeoutError as e:  # before OSError: the builtin TimeoutError is an OSError
            failure = f"no answer within {budget_ms}"
            raise DirectiveStoreTimeoutError(f"{what} timeout after {budget_ms}") from e
        except RedisTimeoutError as e:
            failure = f"socket timeout: {e}"
            raise DirectiveStoreTimeoutError(f"{what} hit the socket timeout: {e}") from e
        except ResponseError as e:  # an error reply read in full (WRONGTYPE...): Redis answered
            failure = None
            raise DirectiveStoreError(f"{what} failed: {e}") from e
        except (RedisError, OSError) as e:
            # Connection errors' texts name the server and the errno; others' (a protocol error's)
            # may quote bytes off the wire, so only their type is kept to show later callers.
            failure = f"{type(e).__name__}: {e}" if isinstance(e, RedisConnectionError | OSError) else type(e).__name__
            raise DirectiveStoreError(f"{what} failed: {e}") from e
        except Exception as e:  # nothing but port errors may cross the port, whatever the library does
            failure = f"unexpected {type(e).__name__}"
            raise DirectiveStoreError(f"{what} failed unexpectedly: {type(e).__name__}: {e}") from e
        finally:  # whatever ended the call (a cancellation included): never a probe's slot left taken
            self._circuit.settle(ticket, failure)

    async def _exchange(self, key: str) -> bytes | None:
        """GET on a pooled connection; an interrupted exchange never returns its connection in use."""
        pool = self._client.connection_pool
        conn = await pool.get_connection()
        try:
            await conn.send_command("GET", key)
            reply = await conn.read_response(disable_decoding=True)
        except ResponseError:
            raise  # an error reply read in full: the connection is still in step
        except BaseException:
            await conn.disconnect(nowait=True)  # the reply may still arrive: never reuse this socket
            raise
        finally:
            await asyncio.shield(pool.release(conn))  # a second cancellation must not leak the slot
        return reply


def parse_envelope(key: str, raw: bytes) -> Directive:
    """Parse the Go proxy's envelope ``{"v":1,"content","injection_mode","version_id"}``.

    Lone surrogates (``"\\ud800"`` escapes) are replaced by U+FFFD; unknown or blank injection
    modes become ``system_first``.

    Raises:
        DirectiveStoreError: not UTF-8, not a JSON object, ``v`` not exactly the integer 1, or a
            field of the wrong type, or a ``version_id`` that is not a UUID.
    """
    envelope = _json_object(key, raw)
    version = envelope.get("v")
    if type(version) is not int or version != ENVELOPE_VERSION:
        raise DirectiveStoreError(f"directive value at {key!r}: unsupported envelope version {version!r}")
    content = _optional_text(key, envelope, "content")
    return Directive(
        content=content,
        injection_mode=_injection_mode(_optional_text(key, envelope, "injection_mode")),
        version_id=_version_id(key, _optional_text(key, envelope, "version_id")),
    )


def _json_object(key: str, raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DirectiveStoreError(f"directive value at {key!r} is not UTF-8: {e}") from e
    try:
        envelope = json.loads(text, parse_constant=_reject_constant)
    except ValueError as e:
        raise DirectiveStoreError(f"directive value at {key!r} is not JSON: {e}") from e
    if not isinstance(envelope, dict):
        raise DirectiveStoreError(f"directive value at {key!r} is not a JSON object: {type(envelope).__name__}")
    return envelope


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _optional_text(key: str, envelope: dict[str, Any], field: str) -> str:
    value = envelope.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DirectiveStoreError(f"directive value at {key!r}: {field} must be a string, got {type(value).__name__}")
    return _LONE_SURROGATE.sub("\ufffd", value)


def _injection_mode(raw_mode: str) -> str:
    mode = raw_mode.strip()
    return mode if mode in INJECTION_MODES else DEFAULT_INJECTION_MODE


def _version_id(key: str, raw_version_id: str) -> str | None:
    if raw_version_id == "":
        return None
    canonical = canonical_uuid(raw_version_id)
    if canonical is None:
        raise DirectiveStoreError(f"directive value at {key!r}: version_id is not a UUID: {raw_version_id[:64]!r}")
    return canonical


def _canonical_uuid(name: str, value: str) -> str:
    if not isinstance(value, str):
        raise DirectiveStoreError(f"{name} must be a UUID string, got {type(value).__name__}")
    canonical = canonical_uuid(value)
    if canonical is None:
        raise DirectiveStoreError(f"{name} is not a UUID: {value[:64]!r}")
    return canonical


def canonical_uuid(text: str) -> str | None:
    """``text`` in canonical lowercase hyphenated form when it is a UUID (canonical in any case, or
    32 bare hex digits), else None."""
    if _CANONICAL_UUID_TEXT.fullmatch(text):
        return text  # already what str(uuid.UUID(text)) would give
    return str(uuid.UUID(text)) if _UUID_TEXT.fullmatch(text) else None


def _require_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")
