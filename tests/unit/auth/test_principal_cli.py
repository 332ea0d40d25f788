"""``python -m entrypoints.cli principal keygen|sign|verify`` run as real subprocesses."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.ibex.auth.v1 import principal_context_pb2 as pb
from tests.support.principal_proofs import AGENT, ORG
from tests.unit.auth.test_proof_vector import published

REPO = Path(__file__).resolve().parents[3]


def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "entrypoints.cli", "principal", *args], cwd=REPO, input=stdin,
                          capture_output=True, timeout=60, check=False)


@pytest.fixture(scope="module", params=["ed25519", "hmac-sha256"])
def key_files(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp(request.param)
    private, public = directory / "signer.json", directory / "verify.json"
    result = cli("keygen", "--algorithm", request.param, "--key-id", "k1",
                 "--out-private", str(private), "--out-verify", str(public))
    assert result.returncode == 0, result.stderr
    return private, public


def test_keygen_prints_a_private_and_a_public_key_file() -> None:
    result = cli("keygen", "--algorithm", "ed25519", "--key-id", "k1")
    assert result.returncode == 0
    private, public = (json.loads(line) for line in result.stdout.decode().splitlines())
    assert set(private["keys"][0]) == {"key_id", "algorithm", "private_key"}
    assert set(public["keys"][0]) == {"key_id", "algorithm", "public_key"}
    assert len(base64.b64decode(public["keys"][0]["public_key"])) == 32


def test_keygen_writes_the_private_file_owner_only(key_files: tuple[Path, Path]) -> None:
    private, public = key_files
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert json.loads(public.read_text())["keys"][0]["key_id"] == "k1"


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """umask 0 for the CLI subprocesses (inherited): only the CLI's own modes can keep others out."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.usefixtures("permissive_umask")
@pytest.mark.parametrize(("algorithm", "verify_name", "verify_mode"), [
    ("ed25519", "proxy.pub.json", 0o644),
    ("hmac-sha256", "proxy-hmac.verify.secret.json", 0o600),
])
def test_keygen_creates_every_file_holding_a_secret_0600(tmp_path: Path, algorithm: str, verify_name: str,
                                                         verify_mode: int) -> None:
    private, verification = tmp_path / "signer.secret.json", tmp_path / verify_name
    result = cli("keygen", "--algorithm", algorithm, "--key-id", "k1",
                 "--out-private", str(private), "--out-verify", str(verification))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(verification.stat().st_mode) == verify_mode
    entry = json.loads(verification.read_text())["keys"][0]
    assert ("secret" in entry) is (algorithm == "hmac-sha256")
    if algorithm == "hmac-sha256":
        assert b"shared secret" in result.stdout and b"keep both secret" in result.stdout


@pytest.mark.usefixtures("permissive_umask")
def test_keygen_refuses_a_public_looking_name_for_an_hmac_secret(tmp_path: Path) -> None:
    private, verification = tmp_path / "signer.secret.json", tmp_path / "proxy.pub.json"
    result = cli("keygen", "--algorithm", "hmac-sha256", "--key-id", "k1",
                 "--out-private", str(private), "--out-public", str(verification))
    assert result.returncode == 2 and b"must not suggest a public key" in result.stderr
    assert not private.exists() and not verification.exists()


def test_keygen_does_not_follow_a_symlink_or_leave_half_a_pair(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    (tmp_path / "verify.secret.json").symlink_to(target)
    private = tmp_path / "signer.secret.json"
    result = cli("keygen", "--algorithm", "hmac-sha256", "--key-id", "k1", "--out-private", str(private),
                 "--out-verify", str(tmp_path / "verify.secret.json"))
    assert result.returncode == 2 and b"already exists" in result.stderr
    assert not target.exists() and not private.exists()


def test_keygen_refuses_to_overwrite(key_files: tuple[Path, Path]) -> None:
    private, public = key_files
    result = cli("keygen", "--algorithm", "ed25519", "--key-id", "k2", "--out-private", str(private),
                 "--out-public", str(public.with_name("new.json")))
    assert result.returncode == 2 and b"already exists" in result.stderr


def test_signed_proof_verifies(key_files: tuple[Path, Path], tmp_path: Path) -> None:
    private, public = key_files
    proof = tmp_path / "proof.bin"
    signed = cli("sign", "--key-file", str(private), "--key-id", "k1", "--org-id", ORG.upper(), "--agent-id", AGENT,
                 "--principal-id", "alice", "--permissions", "3", "--ttl", "2m", "--out", str(proof))
    assert signed.returncode == 0, signed.stderr
    context = pb.PrincipalContextProof.FromString(proof.read_bytes()).context
    assert (context.org_id, context.principal_id, context.expires_at.seconds - context.issued_at.seconds) == (ORG, "alice", 120)
    verified = cli("verify", "--key-file", str(public), "--proof", str(proof))
    assert verified.returncode == 0, verified.stderr
    assert f"org_id = {ORG}" in verified.stdout.decode() and "principal_id = alice" in verified.stdout.decode()


def test_base64_proof_round_trips_through_stdout_and_stdin(key_files: tuple[Path, Path]) -> None:
    private, public = key_files
    signed = cli("sign", "--key-file", str(private), "--key-id", "k1", "--org-id", ORG, "--base64")
    assert signed.returncode == 0, signed.stderr
    verified = cli("verify", "--key-file", str(public), "--proof", "-", "--base64", stdin=signed.stdout)
    assert verified.returncode == 0 and b"agent_id = \n" in verified.stdout


def test_expired_proof_fails_with_exit_2_and_the_reason(key_files: tuple[Path, Path]) -> None:
    private, public = key_files
    signed = cli("sign", "--key-file", str(private), "--key-id", "k1", "--org-id", ORG, "--base64",
                 "--issued-at", "2025-01-01T00:00:00Z", "--ttl", "60")
    verified = cli("verify", "--key-file", str(public), "--proof", "-", "--base64", stdin=signed.stdout)
    assert verified.returncode == 2 and b"proof rejected: expired" in verified.stderr and not verified.stdout


def test_future_proof_is_not_yet_valid(key_files: tuple[Path, Path]) -> None:
    private, public = key_files
    signed = cli("sign", "--key-file", str(private), "--key-id", "k1", "--org-id", ORG, "--base64",
                 "--issued-at", "2099-01-01T00:00:00+00:00")
    verified = cli("verify", "--key-file", str(public), "--proof", "-", "--base64", stdin=signed.stdout)
    assert verified.returncode == 2 and b"not_yet_valid" in verified.stderr


def test_tampered_proof_is_a_bad_signature(key_files: tuple[Path, Path], tmp_path: Path) -> None:
    private, public = key_files
    proof = tmp_path / "p.bin"
    cli("sign", "--key-file", str(private), "--key-id", "k1", "--org-id", ORG, "--out", str(proof))
    message = pb.PrincipalContextProof.FromString(proof.read_bytes())
    message.context.permissions = 999
    proof.write_bytes(message.SerializeToString())
    verified = cli("verify", "--key-file", str(public), "--proof", str(proof))
    assert verified.returncode == 2 and b"bad_signature" in verified.stderr


def test_the_documented_vector_verifies_with_the_cli(tmp_path: Path) -> None:
    vector = published()
    keys = tmp_path / "vector.json"
    keys.write_text(json.dumps({"keys": [{"key_id": vector["ed25519.key_id"], "algorithm": "ed25519",
                                          "public_key": vector["ed25519.public_key_base64"]}]}))
    result = cli("verify", "--key-file", str(keys), "--proof", "-", "--base64", "--at", vector["verify_at"],
                 stdin=vector["ed25519.proof_base64"].encode())
    assert result.returncode == 0, result.stderr
    assert f"org_id = {vector['context.org_id']}" in result.stdout.decode()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--key-id", "nope", "--org-id", ORG), b"no key with key_id 'nope'"),
        (("--key-id", "k1", "--org-id", "acme"), b"--org-id: expected a UUID"),
        (("--key-id", "k1", "--org-id", ORG, "--agent-id", "x"), b"--agent-id: expected a UUID"),
        (("--key-id", "k1", "--org-id", ORG, "--ttl", "0s"), b"--ttl: expected a positive duration"),
        (("--key-id", "k1", "--org-id", ORG, "--issued-at", "2025-01-01T00:00:00"), b"--issued-at: expected an ISO 8601"),
    ],
    ids=["unknown-key", "bad-org", "bad-agent", "zero-ttl", "naive-time"],
)
def test_bad_sign_input_exits_2_naming_the_problem(key_files: tuple[Path, Path], args: tuple[str, ...],
                                                   message: bytes) -> None:
    result = cli("sign", "--key-file", str(key_files[0]), "--base64", *args)
    assert result.returncode == 2 and message in result.stderr and not result.stdout


def test_verify_with_an_ed25519_private_file_explains_the_mistake(tmp_path: Path) -> None:
    private = tmp_path / "private.json"
    private.write_bytes(cli("keygen", "--algorithm", "ed25519", "--key-id", "k1").stdout.splitlines()[0])
    proof = tmp_path / "p.b64"
    cli("sign", "--key-file", str(private), "--key-id", "k1", "--org-id", ORG, "--base64", "--out", str(proof))
    result = cli("verify", "--key-file", str(private), "--proof", str(proof), "--base64")
    assert result.returncode == 2
    assert b"keys[0].private_key: a verification key file holds public keys only" in result.stderr


def test_hmac_key_file_serves_both_sides() -> None:
    private, public = (json.loads(line) for line in cli("keygen", "--algorithm", "hmac-sha256", "--key-id", "h").stdout.splitlines())
    assert private == public and len(base64.b64decode(private["keys"][0]["secret"])) == 32
