"""Caller authentication for the gRPC edge: TLS credentials, signed-principal metadata, binding.

Servicer use (every RPC, before validation or any use case)::

    principal = authenticator.authenticate(context.invocation_metadata())  # metadata only: the
    # body need not be read yet (the production servicer refuses before decoding it)
    tenant = authenticator.authorize(principal, org_id=request.org_id, agent_id=request.agent_id)
    # RecordMemoryFeedback: agent_id omitted (org-scoped). Both raise AuthError; answer it with
    # set_auth_status(context, error) and return an empty response.

or, in one step, ``tenant = await authenticator.admit(context, org_id=..., agent_id=...)``, which
sets the status itself and returns None on failure (the handler then returns).

Never ``context.abort`` a failed call: grpc.aio keeps the AbortError on the call's state and its
traceback holds the handler's frames, so the call state, the frames and the request they hold
form a reference cycle that lives until a full garbage collection. Setting the code and details
and returning leaves nothing behind (``tests/e2e/test_grpc_hostile.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import grpc

from entrypoints.auth.authenticator import PrincipalAuthenticator, utc_now
from entrypoints.auth.bind_guard import InsecureBindError, bind_guard
from entrypoints.auth.binding import Tenant
from entrypoints.auth.errors import PERMISSION_DENIED, AuthError
from entrypoints.auth.failures import FailureCallback
from entrypoints.auth.principal import VerifiedPrincipal
from entrypoints.auth.proof import DEFAULT_MAX_LIFETIME, PROOF_METADATA_KEY, KeyLookup
from entrypoints.auth.tls import load_tls_material

__all__ = ("GrpcAuthenticator", "InsecureBindError", "bind_guard", "grpc_status", "proof_from_metadata",
           "server_credentials", "set_auth_status")


def grpc_status(error: AuthError) -> grpc.StatusCode:
    """``unauthenticated`` -> UNAUTHENTICATED, ``permission_denied`` -> PERMISSION_DENIED."""
    return grpc.StatusCode.PERMISSION_DENIED if error.code == PERMISSION_DENIED else grpc.StatusCode.UNAUTHENTICATED


def proof_from_metadata(invocation_metadata: Iterable[Any] | None) -> bytes | None:
    """The ``ibex-principal-proof-bin`` value, None when absent.

    Raises:
        AuthError: ``duplicate_proof`` when sent more than once, ``malformed_proof`` when not bytes.
    """
    values = [value for key, value in (invocation_metadata or ()) if key.lower() == PROOF_METADATA_KEY]
    if not values:
        return None
    if len(values) > 1:
        raise AuthError("duplicate_proof")
    if not isinstance(values[0], (bytes, bytearray, memoryview)):
        raise AuthError("malformed_proof")
    return bytes(values[0])


class GrpcAuthenticator:
    """Signed-principal authentication and request binding for gRPC calls; failures are counted."""

    def __init__(self, keyring: KeyLookup | None, *, now: Callable[[], datetime] = utc_now,
                 on_failure: FailureCallback | None = None, max_lifetime: timedelta = DEFAULT_MAX_LIFETIME) -> None:
        self._core = PrincipalAuthenticator(keyring, now=now, on_failure=on_failure, max_lifetime=max_lifetime)

    @property
    def enabled(self) -> bool:
        return self._core.enabled

    def authenticate(self, invocation_metadata: Iterable[Any] | None) -> VerifiedPrincipal | None:
        """The verified principal from the call's metadata; None when no principal keys are configured.

        Raises:
            AuthError: code ``unauthenticated``.
        """
        if not self._core.enabled:
            return None
        try:
            raw = proof_from_metadata(invocation_metadata)
        except AuthError as exc:
            raise self._core.reported(exc) from None
        return self._core.verify(raw)

    def authorize(self, principal: VerifiedPrincipal | None, *, org_id: str, agent_id: str | None = None) -> Tenant:
        """Bind the request's ids to the principal. Raises AuthError code ``permission_denied``."""
        return self._core.bind(principal, org_id=org_id, agent_id=agent_id)


def set_auth_status(context: grpc.aio.ServicerContext, error: AuthError) -> None:
    """Set the error's status code and ``"<reason>: <description>"`` as the call's details (no abort)."""
    context.set_code(grpc_status(error))
    context.set_details(error.detail)


def server_credentials(tls_cert: str, tls_key: str, tls_client_ca: str = "") -> grpc.ServerCredentials | None:
    """TLS credentials for ``server.add_secure_port``; None when no certificate is set (plaintext port).

    With ``tls_client_ca`` set, clients must present a certificate issued by that CA (mTLS).

    Raises:
        TlsConfigError: a file is unreadable or invalid (the message names the variable).
    """
    material = load_tls_material(tls_cert, tls_key, tls_client_ca)
    if material is None:
        return None
    return grpc.ssl_server_credentials(
        [(material.private_key, material.certificate_chain)],
        root_certificates=material.client_ca or None,
        require_client_auth=material.requires_client_certificates,
    )
