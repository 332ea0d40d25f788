"""TLS material validation (both edges) and the start-up bind guard."""

from __future__ import annotations

import re
import ssl
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives import serialization

from entrypoints.auth.bind_guard import InsecureBindError, bind_guard
from entrypoints.auth.grpc_auth import server_credentials
from entrypoints.auth.http_auth import uvicorn_ssl_options
from entrypoints.auth.tls import TlsConfigError, load_tls_material
from entrypoints.settings import Settings
from tests.support.tls_certs import Pki, issue, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _paths(pki: Pki) -> tuple[str, str, str]:
    return str(pki.server.cert_path), str(pki.server.key_path), str(pki.ca.cert_path)


def test_no_certificate_means_plaintext(pki: Pki) -> None:
    assert load_tls_material("", "") is None
    assert server_credentials("", "") is None
    assert uvicorn_ssl_options("", "") == {}


def test_server_tls_without_client_ca(pki: Pki) -> None:
    cert, key, _ = _paths(pki)
    material = load_tls_material(cert, key)
    assert not material.requires_client_certificates
    assert isinstance(server_credentials(cert, key), grpc.ServerCredentials)
    assert uvicorn_ssl_options(cert, key) == {"ssl_certfile": cert, "ssl_keyfile": key}


def test_client_ca_requires_client_certificates_on_both_edges(pki: Pki) -> None:
    cert, key, ca = _paths(pki)
    assert load_tls_material(cert, key, ca).requires_client_certificates
    assert uvicorn_ssl_options(cert, key, ca) == {
        "ssl_certfile": cert, "ssl_keyfile": key, "ssl_ca_certs": ca, "ssl_cert_reqs": ssl.CERT_REQUIRED}


def test_unreadable_files_name_the_variable(pki: Pki, tmp_path: Path) -> None:
    cert, key, _ = _paths(pki)
    with pytest.raises(TlsConfigError, match=r"^IBEX_CONTEXT_TLS_KEY: cannot read .*absent"):
        load_tls_material(cert, str(tmp_path / "absent"))
    with pytest.raises(TlsConfigError, match=r"^IBEX_CONTEXT_TLS_CLIENT_CA: cannot read"):
        load_tls_material(cert, key, str(tmp_path / "absent"))


def test_non_pem_certificate_is_rejected(pki: Pki, tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.crt"
    bogus.write_text("hello", encoding="utf-8")
    with pytest.raises(TlsConfigError, match=r"^IBEX_CONTEXT_TLS_CERT: .*no valid PEM certificate"):
        load_tls_material(str(bogus), str(pki.server.key_path))
    with pytest.raises(TlsConfigError, match=r"^IBEX_CONTEXT_TLS_CLIENT_CA: .*no valid PEM certificate"):
        load_tls_material(str(pki.server.cert_path), str(pki.server.key_path), str(bogus))


def test_key_of_another_certificate_is_rejected(pki: Pki) -> None:
    with pytest.raises(TlsConfigError, match="does not match the certificate"):
        load_tls_material(str(pki.server.cert_path), str(pki.client.key_path))


def test_encrypted_key_is_rejected(pki: Pki, tmp_path: Path) -> None:
    key = serialization.load_pem_private_key(pki.server.key_pem, password=None)
    encrypted = tmp_path / "enc.key"
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"pw")))
    with pytest.raises(TlsConfigError, match="encrypted"):
        load_tls_material(str(pki.server.cert_path), str(encrypted))


def test_expired_certificate_is_rejected(pki: Pki, tmp_path: Path) -> None:
    stale = issue(pki.ca, tmp_path, "stale", server=True, valid_for=timedelta(seconds=-1))
    with pytest.raises(TlsConfigError, match="expired at"):
        load_tls_material(str(stale.cert_path), str(stale.key_path))


def test_half_configured_tls_is_rejected(pki: Pki) -> None:
    with pytest.raises(TlsConfigError, match="set both or neither"):
        load_tls_material(str(pki.server.cert_path), "")
    with pytest.raises(TlsConfigError, match="requires IBEX_CONTEXT_TLS_CERT"):
        load_tls_material("", "", str(pki.ca.cert_path))


@pytest.mark.parametrize("addr", ["127.0.0.1:9092", "localhost:0", "[::1]:9092", "127.8.9.10:1", "127.5.5.5:9092"])
def test_loopback_binds_need_nothing(addr: str) -> None:
    assert bind_guard(addr, has_auth=False, allow_insecure=False) is None


@pytest.mark.parametrize("addr", ["0.0.0.0:9092", "10.0.0.5:9092", "10.0.0.1:9092", "[::]:9092",
                                  "127.example.invalid:9092", "no-such-host.invalid:9092"])
def test_non_loopback_bind_without_auth_refuses_to_start(addr: str) -> None:
    with pytest.raises(InsecureBindError, match=rf"refusing to bind {re.escape(addr)}.*ALLOW_INSECURE_BIND=true"):
        bind_guard(addr, has_auth=False, allow_insecure=False)


@pytest.mark.parametrize(("addr", "reason"), [
    ("0.0.0.0:9092", "0.0.0.0 is not a loopback address, which binds every interface"),
    ("10.0.0.1:9092", "10.0.0.1 is not a loopback address;"),
    ("127.example.invalid:9092", "host name '127.example.invalid' does not resolve"),
])
def test_the_refusal_says_why_the_address_is_not_loopback(addr: str, reason: str) -> None:
    with pytest.raises(InsecureBindError) as refused:
        bind_guard(addr, has_auth=False, allow_insecure=False)
    assert reason in str(refused.value) and "\n" not in str(refused.value)
    warning = bind_guard(addr, has_auth=False, allow_insecure=True)
    assert warning and f"insecure bind: {addr} is not a loopback address (" in warning


def test_an_unresolvable_name_with_auth_configured_is_not_resolved_by_the_guard() -> None:
    assert bind_guard("no-such-host.invalid:9092", has_auth=True, allow_insecure=False) is None


def test_override_allows_the_bind_with_a_warning() -> None:
    warning = bind_guard("0.0.0.0:9092", has_auth=False, allow_insecure=True)
    assert warning and "insecure bind: 0.0.0.0:9092" in warning


@pytest.mark.parametrize("variable", ["IBEX_CONTEXT_PRINCIPAL_KEYS", "IBEX_CONTEXT_TLS_CLIENT_CA"])
def test_either_auth_mode_allows_a_non_loopback_bind(variable: str) -> None:
    environ = {"IBEX_CONTEXT_TLS_CERT": "c", "IBEX_CONTEXT_TLS_KEY": "k", variable: "x"}
    assert bind_guard("0.0.0.0:9092", Settings.from_env(environ).has_auth, allow_insecure=False) is None


def test_server_tls_alone_is_not_caller_authentication() -> None:
    settings = Settings.from_env({"IBEX_CONTEXT_TLS_CERT": "c", "IBEX_CONTEXT_TLS_KEY": "k"})
    with pytest.raises(InsecureBindError):
        bind_guard("0.0.0.0:9092", settings.has_auth, settings.allow_insecure_bind)
