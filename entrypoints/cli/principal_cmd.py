"""``ibex-context principal``: mint, check and generate keys for signed principal proofs.

- ``principal keygen --algorithm ed25519|hmac-sha256 --key-id K [--out-private F --out-verify F]``
  (every file holding a secret is created 0600; an hmac-sha256 verification file holds the secret too)
- ``principal sign --key-file PRIVATE --key-id K --org-id U [--agent-id U] [--ttl 300s] [--out F|-] [--base64]``
- ``principal verify --key-file PUBLIC --proof F|- [--base64] [--at TIME]`` (exit 2 when rejected)
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
from google.protobuf.timestamp_pb2 import Timestamp

from contracts.ibex.auth.v1 import principal_context_pb2 as pb
from entrypoints.auth.errors import AuthError
from entrypoints.auth.keyfile import ALGORITHMS, HMAC_SHA256, KeyFileError
from entrypoints.auth.keys import load_verification_keys
from entrypoints.auth.principal import canonical_uuid, datetime_nanos
from entrypoints.auth.proof import sign_proof, verify_proof
from entrypoints.auth.signing_keys import SigningKey, generate_key_files, load_signing_key
from entrypoints.cli.errors import EXIT_BAD_INPUT, CliError

_TTL = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)?")
_TTL_UNITS = {"ms": timedelta(milliseconds=1), "s": timedelta(seconds=1), "m": timedelta(minutes=1),
              "h": timedelta(hours=1)}
SECRET_FILE_MODE = 0o600  # a signing key, or an hmac-sha256 secret (the verifier's file holds it too)
PUBLIC_FILE_MODE = 0o644  # an ed25519 verification file: public keys only
_TEXT_FIELDS = ("principal_id", "principal_type", "authority", "authz_snapshot_id", "authz_snapshot_digest",
                "request_id", "trace_id", "source", "token_id")


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("principal", help="mint and check signed principal proofs (docs/PRINCIPAL_PROOF.md)")
    actions = parser.add_subparsers(dest="principal_command", required=True, metavar="ACTION")
    _register_keygen(actions)
    _register_sign(actions)
    _register_verify(actions)


def _register_keygen(actions: argparse._SubParsersAction) -> None:
    keygen = actions.add_parser("keygen", help="generate a private key file and its verification key file")
    keygen.add_argument("--algorithm", required=True, choices=ALGORITHMS)
    keygen.add_argument("--key-id", required=True)
    keygen.add_argument("--out-private", help="write the signing key file here (mode 0600; must not exist)")
    keygen.add_argument("--out-verify", "--out-public", dest="out_verify",
                        help="write the verification key file (IBEX_CONTEXT_PRINCIPAL_KEYS) here; must not exist. "
                             "ed25519: the public key, mode 0644; hmac-sha256: the shared secret itself, mode 0600, "
                             "and a name containing 'pub' is refused")
    keygen.set_defaults(handler=run_keygen)


def _register_sign(actions: argparse._SubParsersAction) -> None:
    sign = actions.add_parser("sign", help="mint a signed PrincipalContextProof")
    sign.add_argument("--key-file", required=True, help="private key file")
    sign.add_argument("--key-id", required=True)
    sign.add_argument("--org-id", required=True, help="UUID")
    sign.add_argument("--agent-id", default="", help="UUID; omit for an org-scoped principal")
    for name in _TEXT_FIELDS:
        sign.add_argument(f"--{name.replace('_', '-')}", default="")
    sign.add_argument("--permissions", type=int, default=0)
    sign.add_argument("--ttl", default="300s", help="lifetime: 300s, 5m, 1h, 1500ms; a bare number is seconds")
    sign.add_argument("--issued-at", help="ISO 8601 time with a UTC offset (default: now)")
    sign.add_argument("--out", default="-", help="file for the proof, or - for stdout (default)")
    sign.add_argument("--base64", action="store_true", help="write base64 text (HTTP header / metadata tools)")
    sign.set_defaults(handler=run_sign)


def _register_verify(actions: argparse._SubParsersAction) -> None:
    verify = actions.add_parser("verify", help="verify a proof and print its principal (exit 2 when rejected)")
    verify.add_argument("--key-file", required=True, help="verification key file (IBEX_CONTEXT_PRINCIPAL_KEYS format)")
    verify.add_argument("--proof", required=True, help="proof file, or - for stdin")
    verify.add_argument("--base64", action="store_true", help="the proof is base64 text")
    verify.add_argument("--at", help="verify as of this ISO 8601 time (default: now)")
    verify.set_defaults(handler=run_verify)


def run_keygen(args: argparse.Namespace) -> int:
    if bool(args.out_private) != bool(args.out_verify):
        raise CliError("principal keygen: give both --out-private and --out-verify, or neither")
    shared_secret = args.algorithm == HMAC_SHA256
    if shared_secret and args.out_verify and "pub" in Path(args.out_verify).name.lower():
        raise CliError(f"--out-verify: {args.out_verify}: an hmac-sha256 verification key file holds the shared "
                       "secret, so its name must not suggest a public key; choose e.g. proxy-hmac.secret.json")
    private, verification = generate_key_files(args.algorithm, args.key_id)
    if not args.out_private:
        print(json.dumps(private))
        print(json.dumps(verification))
        return 0
    _write_new(args.out_private, json.dumps(private, indent=2) + "\n", mode=SECRET_FILE_MODE)
    try:
        _write_new(args.out_verify, json.dumps(verification, indent=2) + "\n",
                   mode=SECRET_FILE_MODE if shared_secret else PUBLIC_FILE_MODE)
    except CliError:
        os.unlink(args.out_private)  # no half-generated key pair left behind
        raise
    if shared_secret:
        print(f"wrote {args.out_private} (signing key) and {args.out_verify} (for IBEX_CONTEXT_PRINCIPAL_KEYS); "
              "both hold the hmac-sha256 shared secret (mode 0600): keep both secret")
    else:
        print(f"wrote {args.out_private} (private signing key, mode 0600) and {args.out_verify} "
              "(public verification key for IBEX_CONTEXT_PRINCIPAL_KEYS, mode 0644)")
    return 0


def run_sign(args: argparse.Namespace) -> int:
    key = _signing_key(args.key_file, args.key_id)
    context = _context_from_args(args)
    proof = sign_proof(context, key.key_id, key.algorithm, key.material)
    _emit(proof, args.out, as_base64=args.base64)
    return 0


def run_verify(args: argparse.Namespace) -> int:
    try:
        keys = load_verification_keys(args.key_file)
    except KeyFileError as exc:
        raise CliError(str(exc)) from None
    now = parse_time("--at", args.at) if args.at else datetime.now(UTC)
    raw = _read_proof(args.proof, as_base64=args.base64)
    try:
        principal = verify_proof(raw, keys, now)
    except AuthError as exc:
        print(f"ibex-context: proof rejected: {exc.detail}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for name, value in attrs.asdict(principal).items():
        print(f"{name} = {value.isoformat() if isinstance(value, datetime) else value}")
    return 0


def parse_ttl(text: str) -> timedelta:
    """``300s``, ``5m``, ``1h``, ``1500ms``; a bare number is seconds. Raises CliError when not positive."""
    match = _TTL.fullmatch(text.strip())
    ttl = float(match.group(1)) * _TTL_UNITS[match.group(2) or "s"] if match else timedelta(0)
    if ttl <= timedelta(0):
        raise CliError(f"--ttl: expected a positive duration such as 300s, 5m, 1h or 1500ms, got {text!r}")
    return ttl


def parse_time(flag: str, text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise CliError(
            f"{flag}: expected an ISO 8601 time with a UTC offset such as 2025-01-01T00:00:00Z, got {text!r}"
        )
    return moment


def _signing_key(path: str, key_id: str) -> SigningKey:
    try:
        return load_signing_key(path, key_id)
    except KeyFileError as exc:
        raise CliError(str(exc)) from None


def _context_from_args(args: argparse.Namespace) -> pb.PrincipalContext:
    org_id = canonical_uuid(args.org_id)
    agent_id = canonical_uuid(args.agent_id) if args.agent_id else ""
    if org_id is None:
        raise CliError(f"--org-id: expected a UUID, got {args.org_id!r}")
    if agent_id is None:
        raise CliError(f"--agent-id: expected a UUID, got {args.agent_id!r}")
    if not -(2**63) <= args.permissions < 2**63:
        raise CliError(f"--permissions: expected a signed 64-bit integer, got {args.permissions}")
    issued_at = parse_time("--issued-at", args.issued_at) if args.issued_at else datetime.now(UTC)
    context = pb.PrincipalContext(org_id=org_id, agent_id=agent_id, permissions=args.permissions,
                                  **{name: getattr(args, name) for name in _TEXT_FIELDS})
    _set_timestamp(context.issued_at, issued_at)
    _set_timestamp(context.expires_at, issued_at + parse_ttl(args.ttl))
    return context


def _set_timestamp(stamp: Timestamp, moment: datetime) -> None:
    stamp.seconds, stamp.nanos = divmod(datetime_nanos(moment), 10**9)


def _emit(proof: bytes, out: str, *, as_base64: bool) -> None:
    data = base64.b64encode(proof) + b"\n" if as_base64 else proof
    if out != "-":
        Path(out).write_bytes(data)
        return
    if not as_base64 and sys.stdout.isatty():
        raise CliError("principal sign: refusing to write a binary proof to a terminal; use --base64 or --out FILE")
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _read_proof(source: str, *, as_base64: bool) -> bytes:
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise CliError(f"--proof: cannot read {source}: {exc.strerror or exc}") from None
    if not as_base64:
        return data
    try:
        return base64.b64decode(data.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise CliError(f"--proof: {source} is not valid base64") from None


def _write_new(path: str, text: str, *, mode: int) -> None:
    """Create ``path`` (never an existing file or a symlink) and write ``text`` to it.

    The file is created owner-only (0600) in the same ``open`` call, so it is never readable by
    others even briefly whatever the umask, then set to exactly ``mode`` before anything is
    written (0600 for a secret; 0644 only for an ed25519 public key). On a failed write the
    partial file is removed.
    """
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             SECRET_FILE_MODE)
    except FileExistsError:
        raise CliError(f"{path}: already exists; refusing to overwrite a key file") from None
    except OSError as exc:
        raise CliError(f"{path}: cannot create: {exc.strerror or exc}") from None
    try:
        os.fchmod(descriptor, mode)  # exact, whatever the umask took away
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            descriptor = -1
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        if descriptor >= 0:
            os.close(descriptor)
        os.unlink(path)
        raise CliError(f"{path}: cannot write: {exc.strerror or exc}") from None
