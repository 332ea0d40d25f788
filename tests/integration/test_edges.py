"""The edges' composition (``entrypoints.containers.Edges``) over an opened application: what serve runs."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from entrypoints.containers import build_edges
from entrypoints.containers import Application, open_application
from entrypoints.settings import Settings
from tests.support.principal_proofs import ed_entry, write_key_file

ORG, AGENT = str(uuid.uuid4()), str(uuid.uuid4())


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[Application]:
    keys = write_key_file(tmp_path / "keys.json", ed_entry("k1"))
    settings = Settings.from_env({
        "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "ibex.db"), "IBEX_CONTEXT_GRPC_ADDR": "127.0.0.1:0",
        "IBEX_CONTEXT_PRINCIPAL_KEYS": str(keys), "IBEX_CONTEXT_HTTP_READ_TIMEOUT": "3s",
    })
    opened = await open_application(settings)
    yield opened
    await opened.close()


async def test_the_grpc_server_serves_the_applications_use_cases_behind_its_authenticator(app: Application) -> None:
    edges = build_edges(app, grace_s=0.0)
    assert edges.servicer() is edges.servicer()  # one servicer per process
    server = edges.grpc_server()
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = pb_grpc.ContextAssemblyServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as excinfo:  # principal keys are set: no proof, no answer
                await stub.AssembleContext(pb.AssembleContextRequest(org_id=ORG, agent_id=AGENT, model="gpt-4o"),
                                           timeout=10)
    finally:
        await server.drain(0.0)
    assert excinfo.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert app.metrics.registry.get_sample_value("ibex_context_auth_failures_total", {"reason": "missing_proof"}) == 1


async def test_the_http_app_shares_the_metrics_authenticates_and_follows_readiness(app: Application) -> None:
    edges = build_edges(app)
    transport = httpx.ASGITransport(app=edges.asgi_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://edge") as client:
        assert (await client.get("/readyz")).status_code == 200
        denied = await client.post("/v1/context:assemble", json={"orgId": ORG, "agentId": AGENT, "model": "gpt-4o"})
        edges.readiness().draining = True
        assert (await client.get("/readyz")).status_code == 503
    assert denied.status_code == 401
    assert app.metrics.registry.get_sample_value("ibex_context_auth_failures_total", {"reason": "missing_proof"}) == 1
    assert edges.http_protocol().read_timeout_s == 3.0
    assert edges.http_protocol().max_connections == 512
