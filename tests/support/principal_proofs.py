"""Helpers for signed-principal tests: key files on disk and proofs minted with the real signer."""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from contracts.ibex.auth.v1 import principal_context_pb2 as pb
from entrypoints.auth.proof import sign_proof
from entrypoints.auth.signing_keys import ed25519_public_key

ORG = "0b5f6a1e-7c4d-4e2a-9f3b-1a2b3c4d5e6f"
AGENT = "4a3b2c1d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
OTHER_ORG = "11111111-2222-4333-8444-555555555555"
OTHER_AGENT = "66666666-7777-4888-8999-aaaaaaaaaaaa"
ED_SEED = bytes(range(32))
OTHER_ED_SEED = bytes(range(1, 33))
HMAC_SECRET = b"a-test-hmac-secret-of-32-bytes!!"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def ed_entry(key_id: str, seed: bytes = ED_SEED) -> dict:
    return {"key_id": key_id, "algorithm": "ed25519", "public_key": b64(ed25519_public_key(seed))}


def hmac_entry(key_id: str, secret: bytes = HMAC_SECRET) -> dict:
    return {"key_id": key_id, "algorithm": "hmac-sha256", "secret": b64(secret)}


def write_key_file(path: Path, *entries: dict) -> Path:
    """Write atomically (temp file + rename), as an operator's deploy tool would."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({"keys": list(entries)}), encoding="utf-8")
    os.replace(temporary, path)
    return path


def context(*, org_id: str = ORG, agent_id: str = AGENT, issued_at: datetime = T0,
            ttl: timedelta = timedelta(minutes=5), **fields: object) -> pb.PrincipalContext:
    message = pb.PrincipalContext(org_id=org_id, agent_id=agent_id, principal_id="user-1", **fields)
    message.issued_at.FromDatetime(issued_at)
    message.expires_at.FromDatetime(issued_at + ttl)
    return message


def ed_proof(message: pb.PrincipalContext, key_id: str = "ed-1", seed: bytes = ED_SEED) -> bytes:
    return sign_proof(message, key_id, "ed25519", seed)


def hmac_proof(message: pb.PrincipalContext, key_id: str = "hmac-1", secret: bytes = HMAC_SECRET) -> bytes:
    return sign_proof(message, key_id, "hmac-sha256", secret)


def reproof(raw: bytes, **changes: object) -> bytes:
    """Re-serialize a proof with some top-level fields replaced (no re-signing)."""
    proof = pb.PrincipalContextProof.FromString(raw)
    for name, value in changes.items():
        setattr(proof, name, value)
    return proof.SerializeToString()
