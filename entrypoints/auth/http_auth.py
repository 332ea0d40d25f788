"""Caller authentication for the HTTP edge: the same proof, base64 in a header, and uvicorn TLS options.

App use (every API route, before validation or any use case)::

    try:
        tenant = authenticator.admit(request.headers, org_id=body["org_id"], agent_id=body["agent_id"])
    except AuthError as exc:
        return JSONResponse(error_body(exc), status_code=http_status(exc))
"""

from __future__ import annotations

import base64
import binascii
import ssl
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from entrypoints.auth.authenticator import PrincipalAuthenticator, utc_now
from entrypoints.auth.binding import Tenant
from entrypoints.auth.errors import PERMISSION_DENIED, AuthError
from entrypoints.auth.failures import FailureCallback
from entrypoints.auth.principal import VerifiedPrincipal
from entrypoints.auth.proof import DEFAULT_MAX_LIFETIME, KeyLookup
from entrypoints.auth.tls import load_tls_material

PROOF_HEADER = "X-Ibex-Principal-Proof"
_HEADER_KEY = PROOF_HEADER.lower()
_MAX_HEADER_CHARS = 12_000


def http_status(error: AuthError) -> int:
    """``unauthenticated`` -> 401, ``permission_denied`` -> 403."""
    return 403 if error.code == PERMISSION_DENIED else 401


def error_body(error: AuthError) -> dict[str, dict[str, str]]:
    """``{"detail": {"code": "UNAUTHENTICATED"|"PERMISSION_DENIED", "message": "<reason>: ...", "reason"}}``."""
    return {"detail": {"code": error.code.upper(), "message": error.detail, "reason": error.reason}}


def proof_from_headers(headers: Mapping[str, str]) -> bytes | None:
    """Decode the ``X-Ibex-Principal-Proof`` header (standard base64, padded); None when absent.

    ``headers`` is a Starlette ``Headers`` (case-insensitive, with ``getlist``) or any mapping.

    Raises:
        AuthError: ``duplicate_proof`` or ``malformed_proof``.
    """
    values = _header_values(headers)
    if not values:
        return None
    if len(values) > 1:
        raise AuthError("duplicate_proof")
    text = values[0].strip()
    if len(text) > _MAX_HEADER_CHARS:
        raise AuthError("malformed_proof")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise AuthError("malformed_proof") from None


def _header_values(headers: Mapping[str, str]) -> list[str]:
    getlist = getattr(headers, "getlist", None)
    if getlist is not None:
        return list(getlist(_HEADER_KEY))
    return [value for key, value in headers.items() if key.lower() == _HEADER_KEY]


class HttpAuthenticator:
    """Signed-principal authentication and request binding for HTTP requests; failures are counted."""

    def __init__(self, keyring: KeyLookup | None, *, now: Callable[[], datetime] = utc_now,
                 on_failure: FailureCallback | None = None, max_lifetime: timedelta = DEFAULT_MAX_LIFETIME) -> None:
        self._core = PrincipalAuthenticator(keyring, now=now, on_failure=on_failure, max_lifetime=max_lifetime)

    @property
    def enabled(self) -> bool:
        return self._core.enabled

    def authenticate(self, headers: Mapping[str, str]) -> VerifiedPrincipal | None:
        """The verified principal from the headers; None when no principal keys are configured.

        Raises:
            AuthError: code ``unauthenticated``.
        """
        if not self._core.enabled:
            return None
        try:
            raw = proof_from_headers(headers)
        except AuthError as exc:
            raise self._core.reported(exc) from None
        return self._core.verify(raw)

    def authorize(self, principal: VerifiedPrincipal | None, *, org_id: str, agent_id: str | None = None) -> Tenant:
        """Bind the request's ids to the principal. Raises AuthError code ``permission_denied`` (counted)."""
        return self._core.bind(principal, org_id=org_id, agent_id=agent_id)


def uvicorn_ssl_options(tls_cert: str, tls_key: str, tls_client_ca: str = "") -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config`` serving the same certificates as the gRPC edge.

    Empty when no certificate is set; with a client CA, client certificates are required (CERT_REQUIRED).

    Raises:
        TlsConfigError: a file is unreadable or invalid (the message names the variable).
    """
    material = load_tls_material(tls_cert, tls_key, tls_client_ca)
    if material is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": tls_cert, "ssl_keyfile": tls_key}
    if material.requires_client_certificates:
        options.update(ssl_ca_certs=tls_client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED)
    return options
