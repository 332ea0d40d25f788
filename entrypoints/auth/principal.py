"""The verified principal the edges hand to the use cases, built from a verified PrincipalContext."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import attrs
from google.protobuf.timestamp_pb2 import Timestamp

from contracts.ibex.auth.v1 import principal_context_pb2 as pb
from entrypoints.auth.errors import AuthError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# google.protobuf.Timestamp's valid range: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z.
MIN_TIMESTAMP_SECONDS = -62_135_596_800
MAX_TIMESTAMP_SECONDS = 253_402_300_799


def canonical_uuid(text: str) -> str | None:
    """The lowercase hyphenated form of a UUID, or None when ``text`` is not one."""
    try:
        return str(uuid.UUID(text.strip()))
    except (ValueError, AttributeError):
        return None


def timestamp_nanos(stamp: Timestamp) -> int:
    """Nanoseconds since the epoch; raises AuthError(malformed_proof) outside the Timestamp range."""
    if not MIN_TIMESTAMP_SECONDS <= stamp.seconds <= MAX_TIMESTAMP_SECONDS or not 0 <= stamp.nanos < 10**9:
        raise AuthError("malformed_proof")
    return stamp.seconds * 10**9 + stamp.nanos


def datetime_nanos(moment: datetime) -> int:
    """Nanoseconds since the epoch of an aware datetime."""
    if moment.tzinfo is None:
        raise ValueError("now must be a timezone-aware datetime")
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


def nanos_datetime(nanos: int) -> datetime:
    return _EPOCH + timedelta(microseconds=nanos // 1000)


@attrs.frozen
class VerifiedPrincipal:
    """A caller identity whose signature, key and validity window were checked.

    ``org_id`` is a canonical UUID; ``agent_id`` is a canonical UUID, or empty for an org-scoped
    principal (see ``binding``). These ids, not the request's, are what the use cases see.
    """

    org_id: str
    agent_id: str
    principal_id: str
    principal_type: str
    key_id: str
    algorithm: str
    issued_at: datetime
    expires_at: datetime
    authority: str = ""
    authz_snapshot_id: str = ""
    authz_snapshot_digest: str = ""
    request_id: str = ""
    trace_id: str = ""
    source: str = ""
    permissions: int = 0
    token_id: str = ""

    @classmethod
    def from_context(cls, context: pb.PrincipalContext, *, key_id: str, algorithm: str) -> VerifiedPrincipal:
        """Build from a context whose signature and validity were already verified.

        Raises:
            AuthError: ``invalid_principal`` when org_id is not a UUID, or agent_id is neither empty nor a UUID.
        """
        org_id = canonical_uuid(context.org_id)
        agent_id = canonical_uuid(context.agent_id) if context.agent_id else ""
        if org_id is None or agent_id is None:
            raise AuthError("invalid_principal")
        return cls(
            org_id=org_id,
            agent_id=agent_id,
            principal_id=context.principal_id,
            principal_type=context.principal_type,
            key_id=key_id,
            algorithm=algorithm,
            issued_at=nanos_datetime(timestamp_nanos(context.issued_at)),
            expires_at=nanos_datetime(timestamp_nanos(context.expires_at)),
            authority=context.authority,
            authz_snapshot_id=context.authz_snapshot_id,
            authz_snapshot_digest=context.authz_snapshot_digest,
            request_id=context.request_id,
            trace_id=context.trace_id,
            source=context.source,
            permissions=context.permissions,
            token_id=context.token_id,
        )
