"""Binding a request to its verified principal: nothing the caller sends can widen what it sees.

Rules (the ids are compared after UUID canonicalisation, so case and braces do not matter):

- the request's ``org_id`` must equal the principal's, else ``permission_denied`` / ``org_mismatch``;
- for agent-scoped calls (AssembleContext, SearchMemories) the request's ``agent_id`` must equal
  the principal's, else ``permission_denied`` / ``agent_mismatch``;
- a principal with an **empty agent_id is org-scoped, not a wildcard**: it may make org-scoped
  calls (RecordMemoryFeedback, which carries only ``org_id``) and is refused every agent-scoped
  call with ``agent_mismatch``. A missing field never widens access; an issuer that wants an
  agent-scoped call must name the agent.
- a request id that is not a UUID never equals a principal's id (principal ids are UUIDs), so it
  is a mismatch, not a validation error: the caller learns nothing about other tenants.
"""

from __future__ import annotations

import attrs

from entrypoints.auth.errors import AuthError
from entrypoints.auth.principal import VerifiedPrincipal, canonical_uuid


@attrs.frozen
class Tenant:
    """The ids a use case must act for, and the principal that vouched for them (None without auth)."""

    org_id: str
    agent_id: str
    principal: VerifiedPrincipal | None = None


def bind_request(principal: VerifiedPrincipal, *, org_id: str, agent_id: str | None = None) -> Tenant:
    """Check a request's ids against the principal and return the principal's ids.

    Args:
        principal: the verified caller.
        org_id: the request's org_id.
        agent_id: the request's agent_id, or None for an org-scoped call (RecordMemoryFeedback).

    Raises:
        AuthError: ``permission_denied`` with ``org_mismatch`` or ``agent_mismatch``.
    """
    if canonical_uuid(org_id) != principal.org_id:
        raise AuthError("org_mismatch")
    if agent_id is not None and (not principal.agent_id or canonical_uuid(agent_id) != principal.agent_id):
        raise AuthError("agent_mismatch")
    return Tenant(org_id=principal.org_id, agent_id=principal.agent_id, principal=principal)


def unauthenticated_tenant(*, org_id: str, agent_id: str | None = None) -> Tenant:
    """The request's own ids, verbatim, when no signed-principal mode is configured."""
    return Tenant(org_id=org_id, agent_id=agent_id or "")
