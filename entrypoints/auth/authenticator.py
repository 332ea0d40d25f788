"""The edge-independent core: verify a proof, bind a request, report every failure."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from entrypoints.auth.binding import Tenant, bind_request, unauthenticated_tenant
from entrypoints.auth.errors import AuthError
from entrypoints.auth.failures import FailureCallback, report_failure
from entrypoints.auth.principal import VerifiedPrincipal
from entrypoints.auth.proof import DEFAULT_MAX_LIFETIME, KeyLookup, verify_proof


def utc_now() -> datetime:
    return datetime.now(UTC)


class PrincipalAuthenticator:
    """Signed-principal checks shared by the gRPC and HTTP edges.

    With ``keyring`` None (``IBEX_CONTEXT_PRINCIPAL_KEYS`` empty) the signed-principal mode is off:
    proofs are not read, ``verify`` returns None and ``bind`` returns the request's own ids.
    ``max_lifetime`` is the longest validity window a proof may have
    (``IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME``).
    """

    def __init__(self, keyring: KeyLookup | None, *, now: Callable[[], datetime] = utc_now,
                 on_failure: FailureCallback | None = None, max_lifetime: timedelta = DEFAULT_MAX_LIFETIME) -> None:
        if max_lifetime <= timedelta(0):
            raise ValueError("max_lifetime must be > 0")
        self._keyring = keyring
        self._now = now
        self._on_failure = on_failure
        self._max_lifetime = max_lifetime

    @property
    def enabled(self) -> bool:
        return self._keyring is not None

    def verify(self, raw: bytes | None) -> VerifiedPrincipal | None:
        """The verified principal, or None when the mode is off. Raises AuthError (reported)."""
        if self._keyring is None:
            return None
        try:
            return verify_proof(raw, self._keyring, self._now(), self._max_lifetime)
        except AuthError as exc:
            raise self.reported(exc) from None

    def bind(self, principal: VerifiedPrincipal | None, *, org_id: str, agent_id: str | None = None) -> Tenant:
        """The ids the use case acts for (see ``binding.bind_request``). Raises AuthError (reported)."""
        if principal is None:
            return unauthenticated_tenant(org_id=org_id, agent_id=agent_id)
        try:
            return bind_request(principal, org_id=org_id, agent_id=agent_id)
        except AuthError as exc:
            raise self.reported(exc) from None

    def reported(self, error: AuthError) -> AuthError:
        """Count ``error`` through ``on_failure`` and return it for raising."""
        report_failure(self._on_failure, error.reason)
        return error
