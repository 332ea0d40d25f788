"""Verification keys for signed principals, and the reloadable key ring the edges verify against.

Key file (``IBEX_CONTEXT_PRINCIPAL_KEYS``)::

    {"keys": [{"key_id": "proxy-2025", "algorithm": "ed25519", "public_key": "<base64 raw 32 bytes>"},
              {"key_id": "proxy-hmac", "algorithm": "hmac-sha256", "secret": "<base64, >= 16 bytes>"}]}
"""

from __future__ import annotations

import threading
from pathlib import Path

import attrs
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from entrypoints.auth.keyfile import (
    ED25519,
    ED25519_KEY_BYTES,
    MIN_HMAC_SECRET_BYTES,
    KeyFileError,
    algorithm_of,
    check_fields,
    check_unique,
    entry_error,
    key_bytes,
    key_id_of,
    read_entries,
)

PRINCIPAL_KEYS_VARIABLE = "IBEX_CONTEXT_PRINCIPAL_KEYS"


@attrs.frozen
class VerificationKey:
    """One configured key: an Ed25519 public key or an HMAC-SHA256 secret (never shown in repr)."""

    key_id: str
    algorithm: str
    material: Ed25519PublicKey | bytes = attrs.field(repr=False, eq=False)

    def verifies(self, signature: bytes, data: bytes) -> bool:
        """True when ``signature`` is valid for ``data``; MACs are compared in constant time."""
        try:
            if isinstance(self.material, Ed25519PublicKey):
                self.material.verify(signature, data)
            else:
                mac = hmac.HMAC(self.material, hashes.SHA256())
                mac.update(data)
                mac.verify(signature)
        except InvalidSignature:
            return False
        return True


@attrs.frozen
class KeySet:
    """An immutable set of verification keys loaded from one file."""

    source: str
    keys: tuple[VerificationKey, ...] = attrs.field(converter=tuple)

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(key.key_id for key in self.keys)

    def find(self, key_id: str) -> VerificationKey | None:
        for key in self.keys:
            if key.key_id == key_id:
                return key
        return None


def load_verification_keys(path: str | Path) -> KeySet:
    """Parse and validate a verification key file.

    Raises:
        KeyFileError: naming the file, the entry index and the field (duplicate key ids, bad base64,
            an Ed25519 key that is not 32 bytes, an HMAC secret under 16 bytes, a private key, ...).
    """
    entries = read_entries(path)
    keys = tuple(_verification_key(path, index, entry) for index, entry in enumerate(entries))
    check_unique(path, (key.key_id for key in keys))
    return KeySet(source=str(path), keys=keys)


def _verification_key(path: str | Path, index: int, entry: dict) -> VerificationKey:
    key_id = key_id_of(path, index, entry)
    algorithm = algorithm_of(path, index, entry)
    if algorithm == ED25519:
        if "private_key" in entry:
            raise entry_error(path, index, "private_key", "a verification key file holds public keys only; "
                              "use public_key (see `ibex-context principal keygen`)")
        check_fields(path, index, entry, ("key_id", "algorithm", "public_key"))
        raw = key_bytes(path, index, entry, "public_key", exact=ED25519_KEY_BYTES)
        return VerificationKey(key_id, algorithm, Ed25519PublicKey.from_public_bytes(raw))
    check_fields(path, index, entry, ("key_id", "algorithm", "secret"))
    secret = key_bytes(path, index, entry, "secret", minimum=MIN_HMAC_SECRET_BYTES)
    return VerificationKey(key_id, algorithm, secret)


@attrs.frozen
class ReloadOutcome:
    """What ``KeyRing.reload()`` did: ``loaded`` False means the old keys stay in force."""

    loaded: bool
    key_ids: tuple[str, ...]
    error: str = ""

    def describe(self) -> str:
        """One log line."""
        if self.loaded:
            return f"principal keys reloaded: {len(self.key_ids)} key(s): {', '.join(self.key_ids)}"
        return f"principal keys NOT reloaded, keeping {len(self.key_ids)} key(s) in force: {self.error}"


class KeyRing:
    """The verification keys in force, re-read from their file by ``reload()``.

    Readers take one reference to the current immutable ``KeySet`` per lookup, and ``reload()``
    replaces that reference in one assignment, so verifications running during a reload see either
    the old set or the new one, never a mixture, and never block.
    """

    def __init__(self, path: str | Path, keys: KeySet) -> None:
        self._path = Path(path)
        self._keys = keys
        self._reload_lock = threading.Lock()

    @classmethod
    def from_path(cls, path: str | Path) -> KeyRing:
        """Load the key file. Raises KeyFileError (see ``load_verification_keys``)."""
        return cls(path, load_verification_keys(path))

    @property
    def path(self) -> Path:
        return self._path

    @property
    def current(self) -> KeySet:
        return self._keys

    def find(self, key_id: str) -> VerificationKey | None:
        return self._keys.find(key_id)

    def reload(self) -> ReloadOutcome:
        """Re-read the file; swap the new keys in only if the whole file is valid. Never raises KeyFileError."""
        with self._reload_lock:
            try:
                fresh = load_verification_keys(self._path)
            except KeyFileError as exc:
                return ReloadOutcome(loaded=False, key_ids=self._keys.key_ids, error=str(exc))
            self._keys = fresh
            return ReloadOutcome(loaded=True, key_ids=fresh.key_ids)


def keyring_from_setting(path: str) -> KeyRing | None:
    """The key ring named by ``IBEX_CONTEXT_PRINCIPAL_KEYS`` (None when it is empty).

    Raises:
        KeyFileError: with the message prefixed by the variable name, for start-up.
    """
    if not path:
        return None
    try:
        return KeyRing.from_path(path)
    except KeyFileError as exc:
        raise KeyFileError(f"{PRINCIPAL_KEYS_VARIABLE}: {exc}") from None
