"""Server TLS material for both edges, validated at start with errors naming the variable."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

CERT_VARIABLE = "IBEX_CONTEXT_TLS_CERT"
KEY_VARIABLE = "IBEX_CONTEXT_TLS_KEY"
CLIENT_CA_VARIABLE = "IBEX_CONTEXT_TLS_CLIENT_CA"


class TlsConfigError(ValueError):
    """A TLS file is missing, unreadable, not PEM, or the key does not match the certificate."""


@attrs.frozen
class TlsMaterial:
    """PEM bytes as read and checked; ``client_ca`` empty means client certificates are not required."""

    certificate_chain: bytes = attrs.field(repr=False)
    private_key: bytes = attrs.field(repr=False)
    client_ca: bytes = attrs.field(repr=False, default=b"")

    @property
    def requires_client_certificates(self) -> bool:
        return bool(self.client_ca)


def load_tls_material(cert_path: str, key_path: str, client_ca_path: str = "",
                      now: datetime | None = None) -> TlsMaterial | None:
    """Read and validate the server certificate chain, its key and the optional client CA bundle.

    Returns:
        None when no certificate is configured (plaintext).

    Raises:
        TlsConfigError: one line naming the variable and what is wrong.
    """
    if not cert_path and not key_path:
        if client_ca_path:
            raise TlsConfigError(f"{CLIENT_CA_VARIABLE}: requires {CERT_VARIABLE} and {KEY_VARIABLE}")
        return None
    if not cert_path or not key_path:
        raise TlsConfigError(f"{CERT_VARIABLE} / {KEY_VARIABLE}: set both or neither")
    chain_pem = _read(CERT_VARIABLE, cert_path)
    key_pem = _read(KEY_VARIABLE, key_path)
    chain = _certificates(CERT_VARIABLE, cert_path, chain_pem)
    _check_current(chain[0], cert_path, now or datetime.now(UTC))
    _check_key_matches(key_pem, key_path, chain[0])
    ca_pem = b""
    if client_ca_path:
        ca_pem = _read(CLIENT_CA_VARIABLE, client_ca_path)
        _certificates(CLIENT_CA_VARIABLE, client_ca_path, ca_pem)
    return TlsMaterial(certificate_chain=chain_pem, private_key=key_pem, client_ca=ca_pem)


def _read(variable: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"{variable}: cannot read {path}: {exc.strerror or exc}") from None


def _certificates(variable: str, path: str, pem: bytes) -> list[x509.Certificate]:
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise TlsConfigError(f"{variable}: {path} holds no valid PEM certificate") from None
    return certificates


def _check_current(certificate: x509.Certificate, path: str, now: datetime) -> None:
    if certificate.not_valid_after_utc < now:
        raise TlsConfigError(
            f"{CERT_VARIABLE}: the certificate in {path} expired at {certificate.not_valid_after_utc.isoformat()}"
        )


def _check_key_matches(key_pem: bytes, key_path: str, certificate: x509.Certificate) -> None:
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise TlsConfigError(f"{KEY_VARIABLE}: {key_path} is encrypted; an unencrypted PEM key is required") from None
    except (ValueError, UnsupportedAlgorithm):
        raise TlsConfigError(f"{KEY_VARIABLE}: {key_path} holds no valid PEM private key") from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != certificate.public_key().public_bytes(*spki):
        raise TlsConfigError(f"{KEY_VARIABLE}: {key_path} does not match the certificate in {CERT_VARIABLE}")
