"""Signing keys for the CLI: private key files, and generation of matching key file pairs.

Private key file::

    {"keys": [{"key_id": "k1", "algorithm": "ed25519", "private_key": "<base64 raw 32-byte seed>"},
              {"key_id": "k2", "algorithm": "hmac-sha256", "secret": "<base64, >= 16 bytes>"}]}
"""

from __future__ import annotations

import base64
import secrets
from pathlib import Path
from typing import Any

import attrs
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from entrypoints.auth.keyfile import (
    ALGORITHMS,
    ED25519,
    ED25519_KEY_BYTES,
    MIN_HMAC_SECRET_BYTES,
    KeyFileError,
    algorithm_of,
    check_fields,
    check_unique,
    key_bytes,
    key_id_of,
    read_entries,
)

GENERATED_HMAC_SECRET_BYTES = 32


@attrs.frozen
class SigningKey:
    key_id: str
    algorithm: str
    material: bytes = attrs.field(repr=False)


def load_signing_key(path: str | Path, key_id: str) -> SigningKey:
    """The entry ``key_id`` of a private key file (every entry is validated).

    Raises:
        KeyFileError: an invalid file, or no entry with that key id.
    """
    entries = read_entries(path)
    keys = tuple(_signing_key(path, index, entry) for index, entry in enumerate(entries))
    check_unique(path, (key.key_id for key in keys))
    for key in keys:
        if key.key_id == key_id:
            return key
    raise KeyFileError(f"{path}: no key with key_id {key_id!r} (present: {', '.join(k.key_id for k in keys)})")


def _signing_key(path: str | Path, index: int, entry: dict) -> SigningKey:
    key_id = key_id_of(path, index, entry)
    algorithm = algorithm_of(path, index, entry)
    if algorithm == ED25519:
        check_fields(path, index, entry, ("key_id", "algorithm", "private_key"))
        return SigningKey(key_id, algorithm, key_bytes(path, index, entry, "private_key", exact=ED25519_KEY_BYTES))
    check_fields(path, index, entry, ("key_id", "algorithm", "secret"))
    return SigningKey(key_id, algorithm, key_bytes(path, index, entry, "secret", minimum=MIN_HMAC_SECRET_BYTES))


def generate_key_files(algorithm: str, key_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A fresh key as (private key file, verification key file) JSON documents.

    For hmac-sha256 both files hold the same secret: the verifier needs it too.

    Raises:
        ValueError: unknown algorithm or empty key id.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")
    if not key_id:
        raise ValueError("key_id is required")
    if algorithm == ED25519:
        seed = secrets.token_bytes(ED25519_KEY_BYTES)
        private = {"key_id": key_id, "algorithm": algorithm, "private_key": _b64(seed)}
        public = {"key_id": key_id, "algorithm": algorithm, "public_key": _b64(ed25519_public_key(seed))}
    else:
        secret = secrets.token_bytes(GENERATED_HMAC_SECRET_BYTES)
        entry = {"key_id": key_id, "algorithm": algorithm, "secret": _b64(secret)}
        private, public = entry, dict(entry)
    return {"keys": [private]}, {"keys": [public]}


def ed25519_public_key(seed: bytes) -> bytes:
    """The raw 32-byte public key of a raw 32-byte Ed25519 seed."""
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
