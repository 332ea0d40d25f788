"""The HTTP edge's auth helpers over a real uvicorn server on 127.0.0.1 with real mTLS and signatures.

The app is a minimal Starlette route that calls HttpAuthenticator.authenticate() and .authorize() as the production HTTP
app must, and records whether its "use case" was reached.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from entrypoints.auth.errors import AuthError
from tests.support.failure_tally import FailureTally
from entrypoints.auth.http_auth import PROOF_HEADER, HttpAuthenticator, error_body, http_status, uvicorn_ssl_options
from entrypoints.auth.keys import KeyRing
from tests.support.principal_proofs import AGENT, ORG, OTHER_ORG, context, ed_entry, ed_proof, write_key_file
from tests.support.tls_certs import Issued, Pki, make_pki

pytestmark = pytest.mark.e2e


def build_app(authenticator: HttpAuthenticator, reached: list[tuple[str, str]]) -> Starlette:
    async def search(request: Request) -> JSONResponse:
        body = await request.json()
        try:
            principal = authenticator.authenticate(request.headers)
            tenant = authenticator.authorize(principal, org_id=body["org_id"], agent_id=body["agent_id"])
        except AuthError as exc:
            return JSONResponse(error_body(exc), status_code=http_status(exc))
        reached.append((tenant.org_id, tenant.agent_id))
        return JSONResponse({"org_id": tenant.org_id, "agent_id": tenant.agent_id})

    return Starlette(routes=[Route("/v1/search", search, methods=["POST"])])


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tally() -> FailureTally:
    return FailureTally()


@pytest.fixture
def reached() -> list[tuple[str, str]]:
    return []


@pytest.fixture
async def base_url(pki: Pki, tmp_path: Path, tally: FailureTally, reached: list) -> AsyncIterator[str]:
    ring = KeyRing.from_path(write_key_file(tmp_path / "keys.json", ed_entry("ed-1")))
    app = build_app(HttpAuthenticator(ring, on_failure=tally), reached)
    options = uvicorn_ssl_options(str(pki.server.cert_path), str(pki.server.key_path), str(pki.ca.cert_path))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", **options))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn exited during start-up"
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"https://localhost:{port}"
    finally:
        server.should_exit = True
        await task


def client_for(pki: Pki, client: Issued | None) -> httpx.AsyncClient:
    context = ssl.create_default_context(cafile=str(pki.ca.cert_path))
    if client is not None:
        context.load_cert_chain(str(client.cert_path), str(client.key_path))
    return httpx.AsyncClient(verify=context, timeout=10)


def proof_header(raw: bytes) -> dict[str, str]:
    return {PROOF_HEADER: base64.b64encode(raw).decode("ascii")}


def fresh_context(**fields: str):
    return context(issued_at=datetime.now(UTC) - timedelta(seconds=1), **fields)


async def test_valid_proof_over_mtls_reaches_the_use_case(pki: Pki, base_url: str, reached: list) -> None:
    async with client_for(pki, pki.client) as client:
        response = await client.post(f"{base_url}/v1/search", json={"org_id": ORG.upper(), "agent_id": AGENT},
                                      headers=proof_header(ed_proof(fresh_context())))
    assert response.status_code == 200 and response.json() == {"org_id": ORG, "agent_id": AGENT}
    assert reached == [(ORG, AGENT)]


async def test_missing_proof_is_401(pki: Pki, base_url: str, reached: list, tally: FailureTally) -> None:
    async with client_for(pki, pki.client) as client:
        response = await client.post(f"{base_url}/v1/search", json={"org_id": ORG, "agent_id": AGENT})
    assert response.status_code == 401
    assert response.json()["detail"]["code"] == "UNAUTHENTICATED"
    assert response.json()["detail"]["reason"] == "missing_proof"
    assert reached == [] and tally.counts() == {"missing_proof": 1}


async def test_expired_proof_is_401(pki: Pki, base_url: str, reached: list) -> None:
    stale = context(issued_at=datetime.now(UTC) - timedelta(hours=1))
    async with client_for(pki, pki.client) as client:
        response = await client.post(f"{base_url}/v1/search", json={"org_id": ORG, "agent_id": AGENT},
                                      headers=proof_header(ed_proof(stale)))
    assert (response.status_code, response.json()["detail"]["reason"]) == (401, "expired")
    assert reached == []


async def test_other_org_is_403(pki: Pki, base_url: str, reached: list) -> None:
    async with client_for(pki, pki.client) as client:
        response = await client.post(f"{base_url}/v1/search", json={"org_id": OTHER_ORG, "agent_id": AGENT},
                                      headers=proof_header(ed_proof(fresh_context())))
    assert response.status_code == 403
    assert response.json()["detail"] == {"code": "PERMISSION_DENIED", "reason": "org_mismatch",
                                         "message": "org_mismatch: the request's org_id differs from the "
                                                    "authenticated principal's"}
    assert reached == []


@pytest.mark.parametrize("who", ["foreign-ca", "no-certificate"])
async def test_clients_without_a_certificate_from_the_ca_are_refused(pki: Pki, base_url: str, reached: list,
                                                                     who: str) -> None:
    async with client_for(pki, pki.foreign_client if who == "foreign-ca" else None) as client:
        with pytest.raises(httpx.TransportError):
            await client.post(f"{base_url}/v1/search", json={"org_id": ORG, "agent_id": AGENT},
                              headers=proof_header(ed_proof(fresh_context())))
    assert reached == []
