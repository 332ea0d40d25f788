"""Test PKI generated in-process with cryptography.x509: a CA, a server cert, client certs."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@attrs.frozen
class Issued:
    """A certificate and its key, as PEM bytes and as files."""

    cert_pem: bytes
    key_pem: bytes
    cert_path: Path
    key_path: Path


@attrs.frozen
class Authority:
    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    cert_path: Path

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_authority(directory: Path, name: str) -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name)).issuer_name(_name(name))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Authority(name=name, key=key, cert=cert, cert_path=path)


def issue(authority: Authority, directory: Path, name: str, *, server: bool,
          valid_for: timedelta = timedelta(days=1)) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(name)).issuer_name(authority.cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = builder.sign(authority.key, hashes.SHA256())
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_pem, key_pem = cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)
    cert_path.write_bytes(cert_pem)
    key_path.write_bytes(key_pem)
    return Issued(cert_pem=cert_pem, key_pem=key_pem, cert_path=cert_path, key_path=key_path)


@attrs.frozen
class Pki:
    ca: Authority
    other_ca: Authority
    server: Issued
    client: Issued
    foreign_client: Issued


def make_pki(directory: Path) -> Pki:
    """A CA with a server cert (localhost, 127.0.0.1) and a client cert, plus a client cert from another CA."""
    ca, other_ca = make_authority(directory, "test-ca"), make_authority(directory, "other-ca")
    return Pki(
        ca=ca,
        other_ca=other_ca,
        server=issue(ca, directory, "server", server=True),
        client=issue(ca, directory, "client", server=False),
        foreign_client=issue(other_ca, directory, "foreign-client", server=False),
    )
