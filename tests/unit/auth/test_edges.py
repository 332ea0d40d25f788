"""Edge helpers: proof extraction from gRPC metadata and HTTP headers, failure reporting, status mapping."""

from __future__ import annotations

import base64
import logging
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from starlette.datastructures import Headers

from entrypoints.auth.authenticator import PrincipalAuthenticator
from entrypoints.auth.errors import AuthError
from entrypoints.auth.failures import report_failure
from tests.support.failure_tally import FailureTally
from entrypoints.auth.grpc_auth import GrpcAuthenticator, grpc_status, proof_from_metadata
from entrypoints.auth.http_auth import PROOF_HEADER, HttpAuthenticator, error_body, http_status, proof_from_headers
from entrypoints.auth.keys import KeyRing
from entrypoints.auth.proof import PROOF_METADATA_KEY
from tests.support.principal_proofs import AGENT, ORG, OTHER_ORG, T0, context, ed_entry, ed_proof, write_key_file


@pytest.fixture
def ring(tmp_path: Path) -> KeyRing:
    return KeyRing.from_path(write_key_file(tmp_path / "keys.json", ed_entry("ed-1")))


def _now():
    return T0 + timedelta(minutes=1)


def _failure(call) -> AuthError:
    with pytest.raises(AuthError) as caught:
        call()
    return caught.value


def test_metadata_proof_is_found_among_other_keys() -> None:
    assert proof_from_metadata((("x-other", "v"), (PROOF_METADATA_KEY, b"\x01\x02"))) == b"\x01\x02"


def test_absent_metadata_proof_is_none() -> None:
    assert proof_from_metadata(None) is None and proof_from_metadata((("x", "y"),)) is None


def test_repeated_metadata_proof_is_duplicate() -> None:
    metadata = ((PROOF_METADATA_KEY, b"a"), (PROOF_METADATA_KEY, b"b"))
    assert _failure(lambda: proof_from_metadata(metadata)).reason == "duplicate_proof"


def test_text_metadata_proof_is_malformed() -> None:
    assert _failure(lambda: proof_from_metadata(((PROOF_METADATA_KEY, "text"),))).reason == "malformed_proof"


def test_header_proof_is_base64_decoded_case_insensitively() -> None:
    raw = ed_proof(context())
    assert proof_from_headers(Headers({PROOF_HEADER: base64.b64encode(raw).decode()})) == raw
    assert proof_from_headers({PROOF_HEADER.upper(): base64.b64encode(raw).decode()}) == raw


def test_header_proof_that_is_not_base64_is_malformed() -> None:
    assert _failure(lambda: proof_from_headers({PROOF_HEADER: "not base64!"})).reason == "malformed_proof"


def test_repeated_header_proof_is_duplicate() -> None:
    headers = Headers(raw=[(PROOF_HEADER.lower().encode(), b"AA=="), (PROOF_HEADER.lower().encode(), b"AA==")])
    assert _failure(lambda: proof_from_headers(headers)).reason == "duplicate_proof"


def test_grpc_authenticator_without_keys_reads_nothing() -> None:
    authenticator = GrpcAuthenticator(None)
    assert not authenticator.enabled
    assert authenticator.authenticate(((PROOF_METADATA_KEY, b"junk"),)) is None
    assert authenticator.authorize(None, org_id="o", agent_id="a").org_id == "o"


def test_grpc_authenticator_reports_each_failure_once(ring: KeyRing) -> None:
    tally = FailureTally()
    authenticator = GrpcAuthenticator(ring, now=_now, on_failure=tally)
    _failure(lambda: authenticator.authenticate(()))
    _failure(lambda: authenticator.authenticate(((PROOF_METADATA_KEY, b"a"), (PROOF_METADATA_KEY, b"b"))))
    principal = authenticator.authenticate(((PROOF_METADATA_KEY, ed_proof(context())),))
    _failure(lambda: authenticator.authorize(principal, org_id=OTHER_ORG, agent_id=AGENT))
    assert authenticator.authorize(principal, org_id=ORG, agent_id=AGENT).org_id == ORG
    assert tally.counts() == {"missing_proof": 1, "duplicate_proof": 1, "org_mismatch": 1}


def test_http_authenticator_admits_a_bound_request(ring: KeyRing) -> None:
    authenticator = HttpAuthenticator(ring, now=_now)
    headers = Headers({PROOF_HEADER: base64.b64encode(ed_proof(context())).decode()})
    tenant = authenticator.authorize(authenticator.authenticate(headers), org_id=ORG.upper(), agent_id=AGENT)
    assert (tenant.org_id, tenant.agent_id, tenant.principal.key_id) == (ORG, AGENT, "ed-1")


def test_http_authenticator_reports_failures(ring: KeyRing) -> None:
    tally = FailureTally()
    authenticator = HttpAuthenticator(ring, now=_now, on_failure=tally)
    assert _failure(lambda: authenticator.authenticate(Headers({}))).reason == "missing_proof"
    assert _failure(lambda: authenticator.authenticate(Headers({PROOF_HEADER: "%%"}))).reason == "malformed_proof"
    principal = authenticator.authenticate(Headers({PROOF_HEADER: base64.b64encode(ed_proof(context())).decode()}))
    assert _failure(lambda: authenticator.authorize(principal, org_id=OTHER_ORG, agent_id=AGENT)).reason == "org_mismatch"
    assert tally.counts() == {"missing_proof": 1, "malformed_proof": 1, "org_mismatch": 1}


def test_http_authenticator_without_keys_uses_the_request_ids() -> None:
    authenticator = HttpAuthenticator(None)
    tenant = authenticator.authorize(authenticator.authenticate(Headers({})), org_id="o", agent_id="a")
    assert (tenant.org_id, tenant.agent_id, tenant.principal) == ("o", "a", None)


def test_status_mapping() -> None:
    assert grpc_status(AuthError("expired")) == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_status(AuthError("agent_mismatch")) == grpc.StatusCode.PERMISSION_DENIED
    assert (http_status(AuthError("expired")), http_status(AuthError("org_mismatch"))) == (401, 403)


def test_http_error_body_names_code_and_reason() -> None:
    assert error_body(AuthError("org_mismatch")) == {"detail": {
        "code": "PERMISSION_DENIED", "reason": "org_mismatch",
        "message": "org_mismatch: the request's org_id differs from the authenticated principal's"}}


def test_a_failing_counter_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def broken(reason: str) -> None:
        raise RuntimeError("metrics down")

    with caplog.at_level(logging.ERROR):
        report_failure(broken, "expired")
    assert "reason=expired" in caplog.text


def test_core_authenticator_is_shared_by_both_edges(ring: KeyRing) -> None:
    core = PrincipalAuthenticator(ring, now=_now)
    assert core.enabled and core.verify(ed_proof(context())).org_id == ORG
