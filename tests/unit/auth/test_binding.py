"""Binding requests to the verified principal; the principal's ids are what the use cases see."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from entrypoints.auth.binding import bind_request, unauthenticated_tenant
from entrypoints.auth.errors import PERMISSION_DENIED, AuthError
from entrypoints.auth.principal import VerifiedPrincipal
from tests.support.principal_proofs import AGENT, ORG, OTHER_AGENT, OTHER_ORG


def _principal(agent_id: str = AGENT) -> VerifiedPrincipal:
    moment = datetime(2025, 1, 1, tzinfo=UTC)
    return VerifiedPrincipal(org_id=ORG, agent_id=agent_id, principal_id="p", principal_type="user",
                             key_id="k", algorithm="ed25519", issued_at=moment, expires_at=moment)


def _denied(principal: VerifiedPrincipal, **ids: str | None) -> str:
    with pytest.raises(AuthError) as caught:
        bind_request(principal, **ids)
    assert caught.value.code == PERMISSION_DENIED
    return caught.value.reason


def test_matching_ids_bind_to_the_principals_ids() -> None:
    tenant = bind_request(_principal(), org_id=ORG.upper(), agent_id=" " + AGENT.upper())
    assert (tenant.org_id, tenant.agent_id) == (ORG, AGENT)
    assert tenant.principal == _principal()


def test_other_org_is_org_mismatch() -> None:
    assert _denied(_principal(), org_id=OTHER_ORG, agent_id=AGENT) == "org_mismatch"


def test_other_agent_is_agent_mismatch() -> None:
    assert _denied(_principal(), org_id=ORG, agent_id=OTHER_AGENT) == "agent_mismatch"


@pytest.mark.parametrize("org_id", ["", "not-a-uuid"], ids=["empty", "garbage"])
def test_request_org_that_is_not_a_uuid_is_a_mismatch(org_id: str) -> None:
    assert _denied(_principal(), org_id=org_id, agent_id=AGENT) == "org_mismatch"


def test_request_agent_that_is_not_a_uuid_is_a_mismatch() -> None:
    assert _denied(_principal(), org_id=ORG, agent_id="") == "agent_mismatch"


def test_org_scoped_principal_is_refused_agent_scoped_calls() -> None:
    assert _denied(_principal(agent_id=""), org_id=ORG, agent_id=AGENT) == "agent_mismatch"


def test_org_scoped_principal_may_make_org_scoped_calls() -> None:
    tenant = bind_request(_principal(agent_id=""), org_id=ORG)
    assert (tenant.org_id, tenant.agent_id) == (ORG, "")


def test_agent_principal_may_make_org_scoped_calls_in_its_org() -> None:
    assert bind_request(_principal(), org_id=ORG).org_id == ORG


def test_agent_principal_is_refused_org_scoped_calls_elsewhere() -> None:
    assert _denied(_principal(), org_id=OTHER_ORG) == "org_mismatch"


def test_without_auth_the_request_ids_are_used_verbatim() -> None:
    tenant = unauthenticated_tenant(org_id="Org", agent_id=None)
    assert (tenant.org_id, tenant.agent_id, tenant.principal) == ("Org", "", None)
