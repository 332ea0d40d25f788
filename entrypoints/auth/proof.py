"""Signed principal proofs: verification for the edges, signing for the CLI and tests.

A proof is a serialized ``ibex.auth.v1.PrincipalContextProof``; its signature covers
``context.SerializeToString(deterministic=True)``. The format is documented for other
implementers in docs/PRINCIPAL_PROOF.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf.message import DecodeError

from contracts.ibex.auth.v1 import principal_context_pb2 as pb
from entrypoints.auth.errors import AuthError
from entrypoints.auth.keyfile import ALGORITHMS, ED25519, ED25519_KEY_BYTES, HMAC_SHA256, MIN_HMAC_SECRET_BYTES
from entrypoints.auth.keys import VerificationKey
from entrypoints.auth.principal import VerifiedPrincipal, datetime_nanos, timestamp_nanos

PROOF_METADATA_KEY = "ibex-principal-proof-bin"
CLOCK_SKEW = timedelta(seconds=30)
# The longest validity window (expires_at - issued_at) accepted; IBEX_CONTEXT_PRINCIPAL_MAX_LIFETIME.
# Proofs are minted per call (they carry request_id/trace_id) and the CLI's default is 300 s; with
# no replay cache, this bounds how long a captured proof stays usable. docs/PRINCIPAL_PROOF.md.
DEFAULT_MAX_LIFETIME = timedelta(hours=1)
MAX_PROOF_BYTES = 8192
_SKEW_NANOS = CLOCK_SKEW // timedelta(microseconds=1) * 1000


class KeyLookup(Protocol):
    """Anything that finds a verification key by id (``KeyRing``, ``KeySet``)."""

    def find(self, key_id: str) -> VerificationKey | None: ...


def verify_proof(raw: bytes | None, keyring: KeyLookup, now: datetime,
                 max_lifetime: timedelta = DEFAULT_MAX_LIFETIME) -> VerifiedPrincipal:
    """Verify a serialized proof and return the principal it vouches for.

    Checks, in order: presence and decoding, signature present, algorithm supported, key known,
    algorithm equal to the key's, signature valid, then the validity window (expires_at after
    issued_at, at most ``max_lifetime`` long), then issued_at / expires_at against ``now`` with
    ``CLOCK_SKEW`` either way, then that the principal's ids are UUIDs.

    Args:
        raw: the proof bytes (None or empty when the caller sent none).
        keyring: where to find the key named by ``key_id``.
        now: the current time, timezone-aware.
        max_lifetime: the longest ``expires_at - issued_at`` accepted.

    Raises:
        AuthError: code ``unauthenticated`` with one of the reasons in ``errors.REASONS``.
    """
    proof = _decode(raw)
    key = _key_for(proof, keyring)
    if not key.verifies(proof.signature, proof.context.SerializeToString(deterministic=True)):
        raise AuthError("bad_signature")
    _check_validity(proof.context, datetime_nanos(now), max_lifetime // timedelta(microseconds=1) * 1000)
    return VerifiedPrincipal.from_context(proof.context, key_id=key.key_id, algorithm=key.algorithm)


def _decode(raw: bytes | None) -> pb.PrincipalContextProof:
    if not raw:
        raise AuthError("missing_proof")
    if len(raw) > MAX_PROOF_BYTES:
        raise AuthError("malformed_proof")
    proof = pb.PrincipalContextProof()
    try:
        proof.ParseFromString(bytes(raw))
    except DecodeError:
        raise AuthError("malformed_proof") from None
    if not proof.HasField("context"):
        raise AuthError("malformed_proof")
    return proof


def _key_for(proof: pb.PrincipalContextProof, keyring: KeyLookup) -> VerificationKey:
    if not proof.signature or not proof.signature_algorithm:
        raise AuthError("unsigned")
    if proof.signature_algorithm not in ALGORITHMS:
        raise AuthError("unsupported_algorithm")
    key = keyring.find(proof.key_id) if proof.key_id else None
    if key is None:
        raise AuthError("unknown_key")
    if key.algorithm != proof.signature_algorithm:
        raise AuthError("algorithm_mismatch")
    return key


def _check_validity(context: pb.PrincipalContext, now_nanos: int, max_lifetime_nanos: int) -> None:
    if not context.HasField("expires_at"):
        raise AuthError("missing_expiry")
    if not context.HasField("issued_at"):
        raise AuthError("missing_issued_at")
    issued, expires = timestamp_nanos(context.issued_at), timestamp_nanos(context.expires_at)
    if expires <= issued:
        raise AuthError("invalid_validity")
    if expires - issued > max_lifetime_nanos:
        raise AuthError("lifetime_too_long")
    if issued > now_nanos + _SKEW_NANOS:
        raise AuthError("not_yet_valid")
    if expires + _SKEW_NANOS < now_nanos:
        raise AuthError("expired")


def signature_for(data: bytes, algorithm: str, key_material: bytes) -> bytes:
    """Sign ``data``: Ed25519 with a raw 32-byte seed, or HMAC-SHA256 with a secret of >= 16 bytes.

    Raises:
        ValueError: unknown algorithm or key material of the wrong size.
    """
    if algorithm == ED25519:
        if len(key_material) != ED25519_KEY_BYTES:
            raise ValueError(
                f"an ed25519 private key is a {ED25519_KEY_BYTES}-byte seed, got {len(key_material)} bytes"
            )
        return Ed25519PrivateKey.from_private_bytes(key_material).sign(data)
    if algorithm == HMAC_SHA256:
        if len(key_material) < MIN_HMAC_SECRET_BYTES:
            raise ValueError(
                f"an hmac-sha256 secret needs at least {MIN_HMAC_SECRET_BYTES} bytes, got {len(key_material)}"
            )
        mac = hmac.HMAC(key_material, hashes.SHA256())
        mac.update(data)
        return mac.finalize()
    raise ValueError(f"unknown signature algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")


def sign_proof(context: pb.PrincipalContext, key_id: str, algorithm: str, key_material: bytes) -> bytes:
    """A serialized PrincipalContextProof for ``context``, signed with ``key_material``.

    Raises:
        ValueError: see ``signature_for``; also an empty key_id.
    """
    if not key_id:
        raise ValueError("key_id is required")
    signed = context.SerializeToString(deterministic=True)
    proof = pb.PrincipalContextProof(
        context=context,
        signature_algorithm=algorithm,
        signature=signature_for(signed, algorithm, key_material),
        key_id=key_id,
    )
    return proof.SerializeToString(deterministic=True)
