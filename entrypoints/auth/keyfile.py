"""Shared parsing of JSON key files: ``{"keys": [{"key_id": ..., "algorithm": ..., ...}, ...]}``.

Every error names the file, the entry index and the field, and never echoes key material.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ED25519 = "ed25519"
HMAC_SHA256 = "hmac-sha256"
ALGORITHMS = (ED25519, HMAC_SHA256)
ED25519_KEY_BYTES = 32
MIN_HMAC_SECRET_BYTES = 16
_KEY_ID = re.compile(r"[A-Za-z0-9._:/@+-]{1,128}")


class KeyFileError(ValueError):
    """A key file is unreadable or invalid; the message names the file, entry and field."""


def read_entries(path: str | Path) -> tuple[Mapping[str, Any], ...]:
    """The ``keys`` entries of a key file, each checked to be a JSON object.

    Raises:
        KeyFileError: unreadable file, invalid JSON, no ``keys`` list, an empty list or a non-object entry.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"{path}: cannot read the key file: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise KeyFileError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise KeyFileError(f'{path}: expected a JSON object {{"keys": [...]}}')
    entries = document["keys"]
    if not entries:
        raise KeyFileError(f"{path}: keys: the list is empty")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise KeyFileError(f"{path}: keys[{index}]: expected a JSON object")
    return tuple(entries)


def entry_error(path: str | Path, index: int, field: str, problem: str) -> KeyFileError:
    return KeyFileError(f"{path}: keys[{index}].{field}: {problem}")


def key_id_of(path: str | Path, index: int, entry: Mapping[str, Any]) -> str:
    value = entry.get("key_id")
    if not isinstance(value, str) or not _KEY_ID.fullmatch(value):
        raise entry_error(path, index, "key_id", "required: 1-128 characters from A-Z a-z 0-9 . _ : / @ + -")
    return value


def algorithm_of(path: str | Path, index: int, entry: Mapping[str, Any]) -> str:
    value = entry.get("algorithm")
    if value not in ALGORITHMS:
        raise entry_error(path, index, "algorithm", f"expected one of {', '.join(ALGORITHMS)}, got {value!r}")
    return str(value)


def check_fields(path: str | Path, index: int, entry: Mapping[str, Any], allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    for name in entry:
        if name not in allowed:
            raise entry_error(path, index, name, f"unexpected field for this algorithm (allowed: {', '.join(allowed)})")


def key_bytes(path: str | Path, index: int, entry: Mapping[str, Any], field: str, *, exact: int | None = None,
              minimum: int | None = None) -> bytes:
    """Decode a base64 field, checking its decoded length; the value itself is never echoed."""
    value = entry.get(field)
    if not isinstance(value, str) or not value:
        raise entry_error(path, index, field, "required: base64 text")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise entry_error(path, index, field, "not valid base64") from None
    if exact is not None and len(raw) != exact:
        raise entry_error(path, index, field, f"must decode to exactly {exact} bytes, got {len(raw)}")
    if minimum is not None and len(raw) < minimum:
        raise entry_error(path, index, field, f"must decode to at least {minimum} bytes, got {len(raw)}")
    return raw


def check_unique(path: str | Path, key_ids: Iterable[str]) -> None:
    seen: set[str] = set()
    for index, key_id in enumerate(key_ids):
        if key_id in seen:
            raise entry_error(path, index, "key_id", f"duplicate key id {key_id!r}")
        seen.add(key_id)
