"""Authentication errors: a status code class and a short, stable reason slug.

Reasons never carry key material or request data; they name what failed, so they are safe to
return to callers, to log and to use as a metrics label.
"""

from __future__ import annotations

UNAUTHENTICATED = "unauthenticated"
PERMISSION_DENIED = "permission_denied"

# reason -> (code, description). The description is static text: it is what the caller sees.
REASONS: dict[str, tuple[str, str]] = {
    "missing_proof": (UNAUTHENTICATED, "no principal proof was sent"),
    "duplicate_proof": (UNAUTHENTICATED, "more than one principal proof was sent"),
    "malformed_proof": (UNAUTHENTICATED, "the principal proof could not be decoded"),
    "unsigned": (UNAUTHENTICATED, "the principal proof carries no signature or no signature algorithm"),
    "unsupported_algorithm": (UNAUTHENTICATED, "the signature algorithm is not ed25519 or hmac-sha256"),
    "unknown_key": (UNAUTHENTICATED, "the key_id is not a configured key"),
    "algorithm_mismatch": (UNAUTHENTICATED, "the signature algorithm differs from the key's algorithm"),
    "bad_signature": (UNAUTHENTICATED, "the signature does not verify"),
    "missing_expiry": (UNAUTHENTICATED, "the principal context has no expires_at"),
    "missing_issued_at": (UNAUTHENTICATED, "the principal context has no issued_at"),
    "invalid_validity": (UNAUTHENTICATED, "expires_at is not after issued_at"),
    "lifetime_too_long": (UNAUTHENTICATED, "expires_at - issued_at exceeds the maximum proof lifetime "
                                           "(IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME)"),
    "not_yet_valid": (UNAUTHENTICATED, "issued_at is in the future"),
    "expired": (UNAUTHENTICATED, "the principal context has expired"),
    "invalid_principal": (UNAUTHENTICATED, "the principal's org_id or agent_id is not a UUID"),
    "org_mismatch": (PERMISSION_DENIED, "the request's org_id differs from the authenticated principal's"),
    "agent_mismatch": (PERMISSION_DENIED, "the request's agent_id differs from the authenticated principal's"),
}

ALL_REASONS: tuple[str, ...] = tuple(REASONS)


class AuthError(Exception):
    """A call failed caller authentication (``unauthenticated``) or authorisation (``permission_denied``).

    Attributes:
        code: ``"unauthenticated"`` or ``"permission_denied"``.
        reason: a slug from ``ALL_REASONS``.
    """

    def __init__(self, reason: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown auth failure reason {reason!r}")
        self.code, self.description = REASONS[reason]
        self.reason = reason
        super().__init__(self.detail)

    @property
    def detail(self) -> str:
        """One line for the caller: ``"<reason>: <description>"``."""
        return f"{self.reason}: {self.description}"
