"""Redis directives: the store (one GET per call, ``store``, failing fast while Redis is failing:
``circuit``) and its invalidation feed (one ``PSUBSCRIBE directive_updates:*`` per process,
``invalidations``).

One package because both halves must reach Redis the same way (``store.open_client``: the URL
forms, TLS, Sentinel) and read org ids the same way (``store.canonical_uuid``), and adapters may
not import one another (``.importlinter``, contract 9). The in-process cache they serve is
``adapters.directive_cache``, wired to them by the composition root.
"""

from __future__ import annotations

from adapters.redis_directive_store.circuit import (
    CLOSED, DEFAULT_COOLDOWN_S, DEFAULT_MAX_COOLDOWN_S, HALF_OPEN, OPEN, Circuit,
)
from adapters.redis_directive_store.invalidations import RedisInvalidations
from adapters.redis_directive_store.store import (
    DEFAULT_HEALTH_CHECK_INTERVAL_S, DEFAULT_MAX_CONNECTIONS, DEFAULT_SENTINEL_PORT, ENVELOPE_VERSION,
    SOCKET_TIMEOUT_BRANCH_MULTIPLE, SOCKET_TIMEOUT_FLOOR_S, RedisDirectiveStore, SentinelUrl, backstop_timeout_s,
    canonical_uuid, directive_key, is_sentinel_url, open_client, org_and_key, parse_envelope, parse_sentinel_url,
)

__all__ = [
    "CLOSED", "DEFAULT_COOLDOWN_S", "DEFAULT_MAX_COOLDOWN_S", "HALF_OPEN", "OPEN", "Circuit",
    "DEFAULT_HEALTH_CHECK_INTERVAL_S", "DEFAULT_MAX_CONNECTIONS", "DEFAULT_SENTINEL_PORT", "ENVELOPE_VERSION",
    "SOCKET_TIMEOUT_BRANCH_MULTIPLE", "SOCKET_TIMEOUT_FLOOR_S", "RedisDirectiveStore", "RedisInvalidations",
    "SentinelUrl", "backstop_timeout_s", "canonical_uuid", "directive_key", "is_sentinel_url", "open_client",
    "org_and_key", "parse_envelope", "parse_sentinel_url",
]
