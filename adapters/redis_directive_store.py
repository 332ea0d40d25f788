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

Cancellation safety (SPEC 2.14). A GET cancelled by its deadline after it was written leaves its
reply on the wire. If that connection went back to the pool in that state, the next caller would
read the earlier caller's directive: another tenant's data. ``_exchange`` therefore disconnects any
connection whose exchange was interrupted before the reply was read in full, before handing it back;
the pool reconnects it on next use. redis-py 8 also disconnects on interrupted reads; this keeps the
guarantee local, whatever the library version or the point of interruption.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import uuid
from typing import Any

import redis.asyncio as redis_asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from domain.model.directive import DEFAULT_INJECTION_MODE, INJECTION_MODES, Directive
from ports.directive_store import DirectiveStore
from ports.errors import DirectiveStoreError, DirectiveStoreTimeoutError

ENVELOPE_VERSION = 1
SOCKET_TIMEOUT_FLOOR_S = 0.05
SOCKET_TIMEOUT_BRANCH_MULTIPLE = 4.0
DEFAULT_MAX_CONNECTIONS = 16
DEFAULT_HEALTH_CHECK_INTERVAL_S = 30.0
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# Canonical (any case) or 32 bare hex digits; stricter than uuid.UUID, which also takes braces,
# "urn:uuid:", stray hyphens, underscores and non-ASCII digits.
_CANONICAL_UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.ASCII)
_UUID_TEXT = re.compile(r"[0-9a-f]{8}(-?)[0-9a-f]{4}\1[0-9a-f]{4}\1[0-9a-f]{4}\1[0-9a-f]{12}", re.IGNORECASE | re.ASCII)


def backstop_timeout_s(branch_timeout_s: float) -> float:
    """Socket/connect timeout for a branch budget: ``max(SOCKET_TIMEOUT_FLOOR_S, 4 x budget)``."""
    _require_positive("branch_timeout_s", branch_timeout_s)
    return max(SOCKET_TIMEOUT_FLOOR_S, SOCKET_TIMEOUT_BRANCH_MULTIPLE * branch_timeout_s)


def directive_key(org_id: str, agent_id: str) -> str:
    """The Go proxy's key, with both ids in canonical lowercase hyphenated form.

    Raises:
        DirectiveStoreError: ``org_id`` or ``agent_id`` is not a UUID (the message names which).
    """
    return f"{_canonical_uuid('org_id', org_id)}:directive:{_canonical_uuid('agent_id', agent_id)}"


class RedisDirectiveStore(DirectiveStore):
    """Reads directives with one GET per call; owns (and closes) the client it is given."""

    def __init__(self, client: redis_asyncio.Redis) -> None:
        self._client = client
        self._closed = False

    @classmethod
    def for_branch_timeout(
        cls, url: str, *, branch_timeout_s: float, max_connections: int = DEFAULT_MAX_CONNECTIONS
    ) -> RedisDirectiveStore:
        """A store whose socket timeouts are sized for the directive branch budget."""
        backstop = backstop_timeout_s(branch_timeout_s)
        return cls.from_url(
            url, socket_timeout_s=backstop, connect_timeout_s=backstop, max_connections=max_connections
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
    ) -> RedisDirectiveStore:
        """Build the store on a bounded blocking pool with no retries.

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
            raise ValueError(f"redis url is not a Redis URL (redis://, rediss://, unix://): {e}") from e
        return cls(redis_asyncio.Redis.from_pool(pool))

    async def get(self, org_id: str, agent_id: str, *, timeout_s: float) -> Directive | None:
        """One GET bounded by ``timeout_s``; None on a miss, else the parsed envelope.

        Raises:
            DirectiveStoreTimeoutError: no answer within ``timeout_s`` (or the socket backstop).
            DirectiveStoreError: closed store, bad ids, unreachable Redis, or a malformed value.
        """
        key = directive_key(org_id, agent_id)
        if self._closed:
            raise DirectiveStoreError("directive store is closed")
        raw = await self._bounded_get(key, timeout_s)
        return None if raw is None else parse_envelope(key, raw)

    async def close(self) -> None:
        """Close the client and its pool; later calls raise DirectiveStoreError. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._client.aclose()
        except (RedisError, OSError) as e:
            raise DirectiveStoreError(f"closing the directive store failed: {e}") from e

    async def _bounded_get(self, key: str, timeout_s: float) -> bytes | None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or math.isnan(timeout_s):
            raise DirectiveStoreError(f"timeout_s must be a number of seconds, got {timeout_s!r}")
        if timeout_s <= 0:
            raise DirectiveStoreTimeoutError(f"directive GET {key!r} not attempted: no time left ({timeout_s} s)")
        try:
            async with asyncio.timeout(timeout_s):
                return await self._exchange(key)
        except TimeoutError as e:  # before OSError: the builtin TimeoutError is an OSError
            raise DirectiveStoreTimeoutError(f"directive GET {key!r} timeout after {timeout_s * 1000:.3g} ms") from e
        except RedisTimeoutError as e:
            raise DirectiveStoreTimeoutError(f"directive GET {key!r} hit the socket timeout: {e}") from e
        except (RedisError, OSError) as e:
            raise DirectiveStoreError(f"directive GET {key!r} failed: {e}") from e
        except Exception as e:  # nothing but port errors may cross the port, whatever the library does
            raise DirectiveStoreError(f"directive GET {key!r} failed unexpectedly: {type(e).__name__}: {e}") from e

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
    canonical = _parse_uuid(raw_version_id)
    if canonical is None:
        raise DirectiveStoreError(f"directive value at {key!r}: version_id is not a UUID: {raw_version_id[:64]!r}")
    return canonical


def _canonical_uuid(name: str, value: str) -> str:
    if not isinstance(value, str):
        raise DirectiveStoreError(f"{name} must be a UUID string, got {type(value).__name__}")
    canonical = _parse_uuid(value)
    if canonical is None:
        raise DirectiveStoreError(f"{name} is not a UUID: {value[:64]!r}")
    return canonical


def _parse_uuid(text: str) -> str | None:
    if _CANONICAL_UUID_TEXT.fullmatch(text):
        return text  # already what str(uuid.UUID(text)) would give
    return str(uuid.UUID(text)) if _UUID_TEXT.fullmatch(text) else None


def _require_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")
