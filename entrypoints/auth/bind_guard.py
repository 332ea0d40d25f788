"""Start-up guard: a non-loopback bind with no caller authentication refuses to start."""

from __future__ import annotations

from entrypoints.settings import not_loopback_reason


class InsecureBindError(RuntimeError):
    """A non-loopback address was to be bound with no authentication mode and no override."""


def bind_guard(addr: str, has_auth: bool, allow_insecure: bool) -> str | None:
    """Decide whether ``addr`` may be bound.

    Args:
        addr: the ``host:port`` to bind.
        has_auth: an authentication mode is configured (``Settings.has_auth``: a client CA or principal keys).
        allow_insecure: ``IBEX_CONTEXT_ALLOW_INSECURE_BIND``.

    Returns:
        None when the bind is safe; a warning line to log at every start when it is allowed only by the override.

    Raises:
        InsecureBindError: a non-loopback bind with no authentication and no override.
    """
    if has_auth:
        return None
    reason = not_loopback_reason(addr)  # an IP address as parsed; a host name by every address it resolves to
    if reason is None:
        return None
    if not allow_insecure:
        raise InsecureBindError(
            f"refusing to bind {addr}: {reason}; a non-loopback address needs caller authentication "
            "(IBEX_CONTEXT_TLS_CLIENT_CA for mTLS and/or IBEX_CONTEXT_PRINCIPAL_KEYS for signed principals); "
            "set IBEX_CONTEXT_ALLOW_INSECURE_BIND=true to accept unauthenticated callers"
        )
    return (
        f"insecure bind: {addr} is not a loopback address ({reason}) and no caller authentication is configured "
        "(IBEX_CONTEXT_ALLOW_INSECURE_BIND=true); request org_id/agent_id are trusted as sent"
    )
