"""verify_proof / sign_proof: every acceptance rule and every failure reason."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.ibex.auth.v1 import principal_context_pb2 as pb
from entrypoints.auth.errors import ALL_REASONS, PERMISSION_DENIED, UNAUTHENTICATED, AuthError
from entrypoints.auth.keys import KeySet, load_verification_keys
from entrypoints.auth.proof import CLOCK_SKEW, DEFAULT_MAX_LIFETIME, MAX_PROOF_BYTES, sign_proof, verify_proof
from tests.support.principal_proofs import (
    AGENT,
    ED_SEED,
    HMAC_SECRET,
    ORG,
    OTHER_ED_SEED,
    T0,
    context,
    ed_entry,
    ed_proof,
    hmac_entry,
    hmac_proof,
    reproof,
    write_key_file,
)

NOW = T0 + timedelta(minutes=1)


@pytest.fixture
def keys(tmp_path: Path) -> KeySet:
    return load_verification_keys(write_key_file(tmp_path / "keys.json", ed_entry("ed-1"), hmac_entry("hmac-1")))


def _reason(raw: bytes | None, keys: KeySet, now=NOW) -> str:
    with pytest.raises(AuthError) as caught:
        verify_proof(raw, keys, now)
    assert caught.value.code == UNAUTHENTICATED
    return caught.value.reason


def test_valid_ed25519_proof_yields_the_principal(keys: KeySet) -> None:
    principal = verify_proof(ed_proof(context(principal_type="user", permissions=7, token_id="t")), keys, NOW)
    assert (principal.org_id, principal.agent_id, principal.principal_id) == (ORG, AGENT, "user-1")
    assert (principal.key_id, principal.algorithm) == ("ed-1", "ed25519")
    assert (principal.principal_type, principal.permissions, principal.token_id) == ("user", 7, "t")
    assert principal.issued_at == T0 and principal.expires_at == T0 + timedelta(minutes=5)


def test_valid_hmac_proof_yields_the_principal(keys: KeySet) -> None:
    principal = verify_proof(hmac_proof(context()), keys, NOW)
    assert (principal.org_id, principal.key_id, principal.algorithm) == (ORG, "hmac-1", "hmac-sha256")


def test_principal_ids_are_canonical_uuids(keys: KeySet) -> None:
    principal = verify_proof(ed_proof(context(org_id=ORG.upper(), agent_id="{" + AGENT + "}")), keys, NOW)
    assert (principal.org_id, principal.agent_id) == (ORG, AGENT)


def test_org_scoped_principal_has_an_empty_agent_id(keys: KeySet) -> None:
    assert verify_proof(ed_proof(context(agent_id="")), keys, NOW).agent_id == ""


@pytest.mark.parametrize("raw", [None, b""], ids=["none", "empty"])
def test_absent_proof_is_missing_proof(keys: KeySet, raw: bytes | None) -> None:
    assert _reason(raw, keys) == "missing_proof"


@pytest.mark.parametrize(
    "raw",
    [b"\xff\xff\xff", pb.PrincipalContextProof(signature=b"s", key_id="ed-1").SerializeToString(), bytes(MAX_PROOF_BYTES + 1)],
    ids=["garbage", "no-context", "oversize"],
)
def test_undecodable_proof_is_malformed(keys: KeySet, raw: bytes) -> None:
    assert _reason(raw, keys) == "malformed_proof"


@pytest.mark.parametrize("change", [{"signature": b""}, {"signature_algorithm": ""}], ids=["signature", "algorithm"])
def test_proof_without_signature_is_unsigned(keys: KeySet, change: dict) -> None:
    assert _reason(reproof(ed_proof(context()), **change), keys) == "unsigned"


def test_unknown_algorithm_is_unsupported(keys: KeySet) -> None:
    assert _reason(reproof(ed_proof(context()), signature_algorithm="Ed25519"), keys) == "unsupported_algorithm"


def test_unconfigured_key_id_is_unknown_key(keys: KeySet) -> None:
    assert _reason(ed_proof(context(), key_id="ed-2"), keys) == "unknown_key"


def test_empty_key_id_is_unknown_key(keys: KeySet) -> None:
    assert _reason(reproof(ed_proof(context()), key_id=""), keys) == "unknown_key"


def test_algorithm_other_than_the_keys_is_a_mismatch(keys: KeySet) -> None:
    forged = sign_proof(context(), "ed-1", "hmac-sha256", ED_SEED)
    assert _reason(forged, keys) == "algorithm_mismatch"


def test_signature_by_another_ed25519_key_is_bad(keys: KeySet) -> None:
    assert _reason(ed_proof(context(), seed=OTHER_ED_SEED), keys) == "bad_signature"


def test_hmac_with_another_secret_is_bad(keys: KeySet) -> None:
    assert _reason(hmac_proof(context(), secret=b"x" * 32), keys) == "bad_signature"


@pytest.mark.parametrize("proof_of", [ed_proof, hmac_proof], ids=["ed25519", "hmac"])
def test_tampered_context_is_bad_signature(keys: KeySet, proof_of) -> None:
    proof = pb.PrincipalContextProof.FromString(proof_of(context()))
    proof.context.org_id = "11111111-2222-4333-8444-555555555555"
    assert _reason(proof.SerializeToString(), keys) == "bad_signature"


@pytest.mark.parametrize("proof_of", [ed_proof, hmac_proof], ids=["ed25519", "hmac"])
def test_truncated_signature_is_bad(keys: KeySet, proof_of) -> None:
    raw = proof_of(context())
    signature = pb.PrincipalContextProof.FromString(raw).signature
    assert _reason(reproof(raw, signature=signature[:-1]), keys) == "bad_signature"


def test_signature_is_checked_before_the_clock(keys: KeySet) -> None:
    assert _reason(ed_proof(context(), seed=OTHER_ED_SEED), keys, now=T0 + timedelta(days=9)) == "bad_signature"


def test_missing_expiry_is_rejected(keys: KeySet) -> None:
    message = context()
    message.ClearField("expires_at")
    assert _reason(ed_proof(message), keys) == "missing_expiry"


def test_missing_issued_at_is_rejected(keys: KeySet) -> None:
    message = context()
    message.ClearField("issued_at")
    assert _reason(ed_proof(message), keys) == "missing_issued_at"


@pytest.mark.parametrize("ttl", [timedelta(0), timedelta(seconds=-1)], ids=["zero", "negative"])
def test_expiry_not_after_issue_is_invalid(keys: KeySet, ttl: timedelta) -> None:
    assert _reason(ed_proof(context(ttl=ttl)), keys) == "invalid_validity"


def test_issued_beyond_the_skew_in_the_future_is_not_yet_valid(keys: KeySet) -> None:
    issued = NOW + CLOCK_SKEW + timedelta(microseconds=1)
    assert _reason(ed_proof(context(issued_at=issued)), keys) == "not_yet_valid"


def test_issued_within_the_skew_in_the_future_is_accepted(keys: KeySet) -> None:
    assert verify_proof(ed_proof(context(issued_at=NOW + CLOCK_SKEW)), keys, NOW).org_id == ORG


def test_expired_beyond_the_skew_is_expired(keys: KeySet) -> None:
    expires = T0 + timedelta(minutes=5)
    assert _reason(ed_proof(context()), keys, now=expires + CLOCK_SKEW + timedelta(microseconds=1)) == "expired"


def test_expired_within_the_skew_is_accepted(keys: KeySet) -> None:
    expires = T0 + timedelta(minutes=5)
    assert verify_proof(ed_proof(context()), keys, expires + CLOCK_SKEW).org_id == ORG


def test_timestamp_out_of_range_is_malformed(keys: KeySet) -> None:
    message = context()
    message.expires_at.seconds = 10**12
    assert _reason(ed_proof(message), keys) == "malformed_proof"


@pytest.mark.parametrize(("org_id", "agent_id"), [("not-a-uuid", AGENT), ("", AGENT), (ORG, "agent-7")],
                         ids=["org", "empty-org", "agent"])
def test_principal_ids_that_are_not_uuids_are_invalid(keys: KeySet, org_id: str, agent_id: str) -> None:
    assert _reason(ed_proof(context(org_id=org_id, agent_id=agent_id)), keys) == "invalid_principal"


def test_naive_now_is_a_programming_error(keys: KeySet) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        verify_proof(ed_proof(context()), keys, NOW.replace(tzinfo=None))


@given(position=st.integers(min_value=0, max_value=10**6), flip=st.integers(min_value=1, max_value=255))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_flipped_byte_never_yields_a_different_principal(keys: KeySet, position: int, flip: int) -> None:
    for original in (ed_proof(context()), hmac_proof(context())):
        tampered = bytearray(original)
        tampered[position % len(tampered)] ^= flip
        try:
            principal = verify_proof(bytes(tampered), keys, NOW)
        except AuthError:
            continue
        assert principal == verify_proof(original, keys, NOW)


@pytest.mark.parametrize(
    ("algorithm", "material", "message"),
    [("ed25519", bytes(31), "32-byte seed"), ("hmac-sha256", bytes(15), "at least 16 bytes"), ("rsa", bytes(32), "unknown")],
)
def test_signing_rejects_bad_key_material(algorithm: str, material: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sign_proof(context(), "k", algorithm, material)


def test_signing_requires_a_key_id() -> None:
    with pytest.raises(ValueError, match="key_id"):
        sign_proof(context(), "", "hmac-sha256", HMAC_SECRET)


def test_every_reason_has_a_code_and_a_safe_detail() -> None:
    for reason in ALL_REASONS:
        error = AuthError(reason)
        assert error.code in (UNAUTHENTICATED, PERMISSION_DENIED)
        assert error.detail.startswith(f"{reason}: ")
    assert {r for r in ALL_REASONS if AuthError(r).code == PERMISSION_DENIED} == {"org_mismatch", "agent_mismatch"}


def test_unknown_reason_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown auth failure reason"):
        AuthError("oops")


# ------------------------------------------------------------------ maximum lifetime
def test_a_proof_longer_lived_than_the_maximum_is_refused_whatever_the_time(keys: KeySet) -> None:
    century = context(ttl=timedelta(days=36_525))
    assert _reason(ed_proof(century), keys) == "lifetime_too_long"
    assert _reason(hmac_proof(context(ttl=DEFAULT_MAX_LIFETIME + timedelta(microseconds=1))), keys) == "lifetime_too_long"
    assert AuthError("lifetime_too_long").detail == (
        "lifetime_too_long: expires_at - issued_at exceeds the maximum proof lifetime (IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME)")


def test_the_default_maximum_lifetime_is_one_hour_inclusive(keys: KeySet) -> None:
    assert DEFAULT_MAX_LIFETIME == timedelta(hours=1)
    assert verify_proof(ed_proof(context(ttl=DEFAULT_MAX_LIFETIME)), keys, NOW).org_id == ORG


def test_the_maximum_lifetime_is_configurable(keys: KeySet) -> None:
    five_minutes = ed_proof(context(ttl=timedelta(minutes=5)))
    assert verify_proof(five_minutes, keys, NOW, timedelta(minutes=5)).org_id == ORG
    with pytest.raises(AuthError) as caught:
        verify_proof(five_minutes, keys, NOW, timedelta(minutes=4))
    assert caught.value.reason == "lifetime_too_long"


def test_the_lifetime_is_checked_after_the_signature(keys: KeySet) -> None:
    forged = ed_proof(context(ttl=timedelta(days=365)), seed=OTHER_ED_SEED)
    assert _reason(forged, keys) == "bad_signature"
