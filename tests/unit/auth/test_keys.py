"""Key files: validation with errors naming file/entry/field, and atomic reload."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from entrypoints.auth.keyfile import KeyFileError
from entrypoints.auth.keys import KeyRing, load_verification_keys, keyring_from_setting
from entrypoints.auth.proof import verify_proof
from tests.support.principal_proofs import (
    HMAC_SECRET,
    T0,
    b64,
    context,
    ed_entry,
    hmac_entry,
    hmac_proof,
    write_key_file,
)


def _write_json(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _error_for(path: Path) -> str:
    with pytest.raises(KeyFileError) as caught:
        load_verification_keys(path)
    return str(caught.value)


def test_loads_ed25519_and_hmac_keys(tmp_path: Path) -> None:
    keys = load_verification_keys(write_key_file(tmp_path / "k.json", ed_entry("ed-1"), hmac_entry("hmac-1")))
    assert keys.key_ids == ("ed-1", "hmac-1")
    assert keys.find("ed-1").algorithm == "ed25519"
    assert keys.find("hmac-1").algorithm == "hmac-sha256"
    assert keys.find("nope") is None


def test_missing_file_is_named(tmp_path: Path) -> None:
    message = _error_for(tmp_path / "absent.json")
    assert "absent.json" in message and "cannot read" in message


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text('{"keys": [\n  {"key_id": }\n]}', encoding="utf-8")
    message = _error_for(path)
    assert str(path) in message and "line 2" in message


@pytest.mark.parametrize("document", [[], {"key": []}, {"keys": {}}], ids=["list", "no-keys", "keys-object"])
def test_top_level_shape_is_checked(tmp_path: Path, document: object) -> None:
    assert '{"keys": [...]}' in _error_for(_write_json(tmp_path / "k.json", document))


def test_empty_key_list_is_rejected(tmp_path: Path) -> None:
    assert "keys: the list is empty" in _error_for(_write_json(tmp_path / "k.json", {"keys": []}))


@pytest.mark.parametrize(
    ("entry", "location", "problem"),
    [
        ("not-an-object", "keys[1]:", "expected a JSON object"),
        ({"algorithm": "ed25519", "public_key": "x"}, "keys[1].key_id", "required"),
        ({"key_id": "has space", "algorithm": "ed25519"}, "keys[1].key_id", "characters"),
        ({"key_id": "k", "algorithm": "rsa"}, "keys[1].algorithm", "ed25519, hmac-sha256"),
        ({"key_id": "k", "algorithm": "ed25519"}, "keys[1].public_key", "required"),
        ({"key_id": "k", "algorithm": "ed25519", "public_key": "!!notbase64"}, "keys[1].public_key", "not valid base64"),
        ({"key_id": "k", "algorithm": "ed25519", "public_key": b64(bytes(31))}, "keys[1].public_key", "exactly 32 bytes, got 31"),
        ({"key_id": "k", "algorithm": "ed25519", "public_key": b64(bytes(33))}, "keys[1].public_key", "exactly 32 bytes, got 33"),
        ({"key_id": "k", "algorithm": "hmac-sha256", "secret": b64(bytes(15))}, "keys[1].secret", "at least 16 bytes, got 15"),
        ({"key_id": "k", "algorithm": "hmac-sha256", "secret": ""}, "keys[1].secret", "required"),
        ({"key_id": "k", "algorithm": "ed25519", "private_key": b64(bytes(32))}, "keys[1].private_key", "public keys only"),
        ({**hmac_entry("k"), "public_key": b64(bytes(32))}, "keys[1].public_key", "unexpected field"),
        (ed_entry("ed-1"), "keys[1].key_id", "duplicate key id 'ed-1'"),
    ],
    ids=["not-object", "no-key-id", "bad-key-id", "algorithm", "no-public-key", "bad-base64", "ed-31-bytes",
         "ed-33-bytes", "short-secret", "empty-secret", "private-key", "unknown-field", "duplicate-id"],
)
def test_bad_entry_names_file_index_and_field(tmp_path: Path, entry: object, location: str, problem: str) -> None:
    path = _write_json(tmp_path / "keys.json", {"keys": [ed_entry("ed-1"), entry]})
    message = _error_for(path)
    assert message.startswith(f"{path}: {location}")
    assert problem in message


def test_errors_never_echo_key_material(tmp_path: Path) -> None:
    short_secret = b64(b"fifteen-bytes!!")
    path = _write_json(tmp_path / "k.json", {"keys": [{"key_id": "k", "algorithm": "hmac-sha256", "secret": short_secret}]})
    assert short_secret not in _error_for(path)


def test_key_repr_hides_the_secret(tmp_path: Path) -> None:
    keys = load_verification_keys(write_key_file(tmp_path / "k.json", hmac_entry("hmac-1")))
    assert b64(HMAC_SECRET) not in repr(keys) and str(HMAC_SECRET) not in repr(keys)


def test_keyring_from_empty_setting_is_none() -> None:
    assert keyring_from_setting("") is None


def test_keyring_from_setting_prefixes_the_variable(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match=r"^IBEX_CONTEXT_PRINCIPAL_KEYS: .*absent\.json"):
        keyring_from_setting(str(tmp_path / "absent.json"))


def test_reload_swaps_in_a_valid_file(tmp_path: Path) -> None:
    path = write_key_file(tmp_path / "k.json", ed_entry("ed-1"))
    ring = KeyRing.from_path(path)
    write_key_file(path, hmac_entry("hmac-1"))
    outcome = ring.reload()
    assert outcome.loaded and outcome.key_ids == ("hmac-1",)
    assert ring.find("ed-1") is None and ring.find("hmac-1") is not None
    assert "reloaded: 1 key(s): hmac-1" in outcome.describe()


def test_reload_keeps_the_old_keys_when_the_new_file_is_invalid(tmp_path: Path) -> None:
    path = write_key_file(tmp_path / "k.json", ed_entry("ed-1"))
    ring = KeyRing.from_path(path)
    _write_json(path, {"keys": [ed_entry("ed-1"), ed_entry("ed-1")]})
    outcome = ring.reload()
    assert not outcome.loaded and outcome.key_ids == ("ed-1",)
    assert "duplicate key id" in outcome.error and str(path) in outcome.error
    assert "NOT reloaded" in outcome.describe()
    assert ring.find("ed-1") is not None


def test_reload_keeps_the_old_keys_when_the_file_vanishes(tmp_path: Path) -> None:
    path = write_key_file(tmp_path / "k.json", ed_entry("ed-1"))
    ring = KeyRing.from_path(path)
    path.unlink()
    assert not ring.reload().loaded
    assert ring.current.key_ids == ("ed-1",)


def test_verification_never_fails_while_another_thread_reloads(tmp_path: Path) -> None:
    path = write_key_file(tmp_path / "k.json", ed_entry("ed-1"), hmac_entry("hmac-1"))
    ring = KeyRing.from_path(path)
    proof = hmac_proof(context())
    stop, reloads, verified = threading.Event(), [], []

    def churn() -> None:
        # Exactly 20 reloads, each one only once 100 more verifications have run since the last:
        # the two threads interleave however they are scheduled, and nothing depends on a rate.
        for n in range(20):
            while len(verified) < 100 * (n + 1):
                if stop.is_set():
                    return
                time.sleep(0.0001)  # let the verifying thread run
            write_key_file(path, hmac_entry("hmac-1"), ed_entry(f"ed-{n}"))
            reloads.append(ring.reload().loaded)

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        while worker.is_alive() or len(verified) < 2000:
            verified.append(verify_proof(proof, ring, T0).key_id)
    finally:
        stop.set()
        worker.join()
    assert len(reloads) == 20 and all(reloads)
    assert set(verified) == {"hmac-1"} and len(verified) >= 2000
