"""The published test vector in docs/PRINCIPAL_PROOF.md, recomputed by the implementation.

Every value in the document's vector block is checked here, and the block must hold exactly the
names below, so the document and the code cannot drift apart.
"""

from __future__ import annotations

import base64
import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from contracts.ibex.auth.v1 import principal_context_pb2 as pb
from entrypoints.auth.errors import ALL_REASONS, AuthError
from entrypoints.auth.keys import load_verification_keys
from entrypoints.auth.proof import CLOCK_SKEW, PROOF_METADATA_KEY, sign_proof, signature_for, verify_proof
from entrypoints.auth.signing_keys import ed25519_public_key

DOC = Path(__file__).resolve().parents[3] / "docs" / "PRINCIPAL_PROOF.md"
_BLOCK = re.compile(r"<!-- test-vector:begin -->\s*```text\n(.*?)```\s*<!-- test-vector:end -->", re.S)
_STRING_FIELDS = ("org_id", "principal_id", "agent_id", "principal_type", "authz_snapshot_id",
                  "authz_snapshot_digest", "authority", "request_id", "trace_id", "source", "token_id")
_TIMESTAMPS = ("issued_at", "expires_at")
_DERIVED = ("ed25519.public_key_base64", "context_hex", "ed25519.signature_hex", "ed25519.proof_base64",
            "hmac.signature_hex", "hmac.proof_base64")
_INPUTS = ("ed25519.key_id", "ed25519.seed_hex", "hmac.key_id", "hmac.secret_base64", "verify_at",
           "context.permissions")


def published() -> dict[str, str]:
    match = _BLOCK.search(DOC.read_text(encoding="utf-8"))
    assert match, f"no test-vector block in {DOC}"
    values: dict[str, str] = {}
    for line in match.group(1).splitlines():
        name, separator, value = line.partition(" = ")
        assert separator, f"vector line without ' = ': {line!r}"
        assert name.strip() not in values, f"vector name repeated: {name.strip()}"
        values[name.strip()] = value
    return values


@pytest.fixture(scope="module")
def vector() -> dict[str, str]:
    return published()


def _context(vector: dict[str, str]) -> pb.PrincipalContext:
    message = pb.PrincipalContext(permissions=int(vector["context.permissions"]),
                                  **{name: vector[f"context.{name}"] for name in _STRING_FIELDS})
    for name in _TIMESTAMPS:
        stamp = getattr(message, name)
        stamp.seconds, stamp.nanos = int(vector[f"context.{name}.seconds"]), int(vector[f"context.{name}.nanos"])
    return message


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def test_the_block_holds_exactly_the_checked_names(vector: dict[str, str]) -> None:
    expected = {*_DERIVED, *_INPUTS, *(f"context.{n}" for n in _STRING_FIELDS),
                *(f"context.{n}.{part}" for n in _TIMESTAMPS for part in ("seconds", "nanos"))}
    assert set(vector) == expected


def test_public_key_is_derived_from_the_seed(vector: dict[str, str]) -> None:
    assert _b64(ed25519_public_key(bytes.fromhex(vector["ed25519.seed_hex"]))) == vector["ed25519.public_key_base64"]


def test_signed_bytes_are_the_deterministic_serialization(vector: dict[str, str]) -> None:
    assert _context(vector).SerializeToString(deterministic=True).hex() == vector["context_hex"]


@pytest.mark.parametrize("algorithm", ["ed25519", "hmac"])
def test_signature_and_proof_are_reproduced(vector: dict[str, str], algorithm: str) -> None:
    name, material = _signer(vector, algorithm)
    signed = bytes.fromhex(vector["context_hex"])
    assert signature_for(signed, name, material).hex() == vector[f"{algorithm}.signature_hex"]
    proof = sign_proof(_context(vector), vector[f"{algorithm}.key_id"], name, material)
    assert _b64(proof) == vector[f"{algorithm}.proof_base64"]


@pytest.mark.parametrize("algorithm", ["ed25519", "hmac"])
def test_published_proofs_verify_at_verify_at_and_expire_after(vector: dict[str, str], tmp_path: Path,
                                                              algorithm: str) -> None:
    keys = load_verification_keys(_verification_file(vector, tmp_path))
    proof = base64.b64decode(vector[f"{algorithm}.proof_base64"])
    at = datetime.fromisoformat(vector["verify_at"])
    principal = verify_proof(proof, keys, at)
    assert (principal.org_id, principal.agent_id) == (vector["context.org_id"], vector["context.agent_id"])
    assert principal.key_id == vector[f"{algorithm}.key_id"]
    with pytest.raises(AuthError, match="expired"):
        verify_proof(proof, keys, principal.expires_at + CLOCK_SKEW + timedelta(seconds=1))


def test_the_document_names_the_metadata_key_and_the_skew() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert f"`{PROOF_METADATA_KEY}`" in text
    assert f"**{int(CLOCK_SKEW.total_seconds())} seconds**" in text


def test_the_document_lists_every_failure_reason_and_its_status() -> None:
    text = DOC.read_text(encoding="utf-8")
    listed = set(re.findall(r"^\|[^|\n]*\| `([a-z_]+)` \| (UNAUTHENTICATED|PERMISSION_DENIED) \|", text, re.M))
    assert listed == {(reason, AuthError(reason).code.upper()) for reason in ALL_REASONS}


def test_the_prose_describes_the_vector_keys(vector: dict[str, str]) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert bytes.fromhex(vector["ed25519.seed_hex"]) == bytes(range(32)) and "the bytes 0x00..0x1f" in text
    assert f"ASCII bytes `{base64.b64decode(vector['hmac.secret_base64']).decode('ascii')}`" in text


def _signer(vector: dict[str, str], algorithm: str) -> tuple[str, bytes]:
    if algorithm == "ed25519":
        return "ed25519", bytes.fromhex(vector["ed25519.seed_hex"])
    return "hmac-sha256", base64.b64decode(vector["hmac.secret_base64"])


def _verification_file(vector: dict[str, str], directory: Path) -> Path:
    path = directory / "vector-keys.json"
    path.write_text(json.dumps({"keys": [
        {"key_id": vector["ed25519.key_id"], "algorithm": "ed25519", "public_key": vector["ed25519.public_key_base64"]},
        {"key_id": vector["hmac.key_id"], "algorithm": "hmac-sha256", "secret": vector["hmac.secret_base64"]},
    ]}), encoding="utf-8")
    return path
