"""Shutdown for rolling updates: NOT_SERVING, a drain delay still serving, then stop(grace).

In-process tests drive ``RunningService.shutdown`` with the drain delay gated by the test (the
``drain_pause`` seam), so what happens *during* the delay is checked deterministically. The
subprocess test runs the real SIGTERM path of ``serve`` with ``IBEX_CONTEXT_DRAIN_DELAY``.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from entrypoints.cli import service as service_module
from entrypoints.cli.service import RunningService, start_service
from entrypoints.grpc_api.server import LIVENESS_NAME, SERVICE_NAME
from entrypoints.settings import Settings
from tests.e2e.tenant import assemble_request
from tests.e2e.test_cli_serve import serve_env, serving
from tests.support.tls_certs import make_pki

pytestmark = pytest.mark.e2e
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[RunningService]:
    settings = Settings.from_env({
        "IBEX_CONTEXT_GRPC_ADDR": "127.0.0.1:0", "IBEX_CONTEXT_HTTP_ADDR": "127.0.0.1:0",
        "IBEX_CONTEXT_HEALTH_ADDR": "127.0.0.1:0", "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "ibex.db"),
        "IBEX_CONTEXT_TIMEOUT": "600ms", "IBEX_CONTEXT_DEADLINE_MS": "600",
    })
    service = await start_service(settings)
    yield service
    await service.shutdown(grace_s=0)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> dict[str, asyncio.Event]:
    """Replaces the drain delay: ``entered`` is set when it starts, it ends when ``release`` is set."""
    events = {"entered": asyncio.Event(), "release": asyncio.Event()}
    delays: list[float] = []

    async def pause(seconds: float) -> None:
        delays.append(seconds)
        events["entered"].set()
        await events["release"].wait()

    monkeypatch.setattr(service_module, "drain_pause", pause)
    events["delays"] = delays  # type: ignore[assignment]
    return events


async def status(channel: grpc.aio.Channel, name: str = SERVICE_NAME) -> int:
    reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
    return reply.status


async def test_during_the_drain_delay_calls_are_served_and_health_is_not_serving(
    running: RunningService, gate: dict[str, asyncio.Event]
) -> None:
    channel = grpc.aio.insecure_channel(running.grpc_address)
    health_channel = grpc.aio.insecure_channel(running.grpc.health_address)
    assert running.http is not None
    try:
        stub = pb_grpc.ContextAssemblyServiceStub(channel)
        assert (await stub.AssembleContext(assemble_request(), timeout=10)).degradation_level == "L0"
        assert await status(channel) == SERVING and await status(health_channel, "") == SERVING

        shutdown = asyncio.create_task(running.shutdown(grace_s=2, drain_delay_s=7.5))
        await asyncio.wait_for(gate["entered"].wait(), 5)
        assert gate["delays"] == [7.5]  # type: ignore[comparison-overlap]
        # inside the drain delay: NOT_SERVING everywhere, liveness still SERVING, calls still served
        for name in ("", SERVICE_NAME):
            assert await status(channel, name) == NOT_SERVING
            assert await status(health_channel, name) == NOT_SERVING
        assert await status(health_channel, LIVENESS_NAME) == SERVING
        during = await stub.AssembleContext(assemble_request(request_id="during-drain"), timeout=10)
        assert during.degradation_level == "L0" and during.request_id == "during-drain"
        async with httpx.AsyncClient(base_url=running.http.url) as http:
            assert (await http.get("/readyz")).status_code == 503
            assert (await http.get("/healthz")).status_code == 200
            body = {"orgId": assemble_request().org_id, "agentId": assemble_request().agent_id, "model": "gpt-4o"}
            assert (await http.post("/v1/context:assemble", json=body)).status_code == 200
        assert not shutdown.done()

        gate["release"].set()
        await asyncio.wait_for(shutdown, 15)
        with pytest.raises(grpc.aio.AioRpcError) as after:
            await stub.AssembleContext(assemble_request(), timeout=5)
        assert after.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.aio.AioRpcError) as health_after:
            await status(health_channel, "")
        assert health_after.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await channel.close()
        await health_channel.close()


async def test_a_call_in_flight_when_the_drain_ends_finishes_within_the_grace(
    running: RunningService, gate: dict[str, asyncio.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    started, finish = asyncio.Event(), asyncio.Event()
    assemble = running.app.assemble
    real_execute = assemble.execute

    async def slow_execute(*args: object, **kwargs: object) -> object:
        started.set()
        await finish.wait()
        return await real_execute(*args, **kwargs)

    monkeypatch.setattr(assemble, "execute", slow_execute)
    channel = grpc.aio.insecure_channel(running.grpc_address)
    try:
        stub = pb_grpc.ContextAssemblyServiceStub(channel)
        in_flight = asyncio.ensure_future(stub.AssembleContext(assemble_request(), timeout=20))
        await asyncio.wait_for(started.wait(), 10)
        shutdown = asyncio.create_task(running.shutdown(grace_s=10, drain_delay_s=1))
        await asyncio.wait_for(gate["entered"].wait(), 5)
        gate["release"].set()
        # stop(grace) may now begin; the call is held by ``finish``, so it is still running whatever the timing
        assert not in_flight.done() and not shutdown.done()
        finish.set()
        assert (await in_flight).degradation_level == "L0"
        await asyncio.wait_for(shutdown, 15)
    finally:
        await channel.close()


def test_sigterm_drains_for_the_configured_delay_then_exits(tmp_path: Path) -> None:
    env = serve_env(tmp_path, IBEX_CONTEXT_DRAIN_DELAY="4s", IBEX_CONTEXT_SHUTDOWN_GRACE="1s")
    with serving(env) as served:
        with grpc.insecure_channel(served.grpc_target) as channel:
            stub = pb_grpc.ContextAssemblyServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            stub.AssembleContext(assemble_request(), timeout=10)
            served.process.send_signal(signal.SIGTERM)
            request = health_pb2.HealthCheckRequest(service=SERVICE_NAME)
            for _ in range(200):  # the signal is handled within a few ms
                if health.Check(request, timeout=5).status == NOT_SERVING:
                    break
            assert health.Check(request, timeout=5).status == NOT_SERVING
            assert stub.AssembleContext(assemble_request(), timeout=10).degradation_level == "L0"
            assert httpx.get(f"{served.http_url}/readyz", timeout=5).status_code == 503
            assert served.process.poll() is None
            assert served.process.wait(timeout=30) == 0
            with pytest.raises(grpc.RpcError) as after:
                stub.AssembleContext(assemble_request(), timeout=5)
            assert after.value.code() == grpc.StatusCode.UNAVAILABLE
        stderr = served.process.stderr.read()  # type: ignore[union-attr]
    assert '"drain_delay_s": 4.0' in stderr and '"service_stopped"' in stderr


async def test_the_health_listener_serves_only_health(running: RunningService) -> None:
    channel = grpc.aio.insecure_channel(running.grpc.health_address)
    try:
        assert await status(channel, SERVICE_NAME) == SERVING
        with pytest.raises(grpc.aio.AioRpcError) as other:
            await pb_grpc.ContextAssemblyServiceStub(channel).AssembleContext(assemble_request(), timeout=5)
        assert other.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await status(channel, "no.such.Service")
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await channel.close()
    assert running.grpc.health_address.rsplit(":", 1)[1] != running.grpc_address.rsplit(":", 1)[1]


async def test_with_mtls_on_the_main_port_the_plaintext_health_port_still_answers(tmp_path: Path) -> None:
    """What the kubelet's gRPC probe can do: no TLS, no client certificate, no proof."""
    pki = make_pki(tmp_path)
    settings = Settings.from_env({
        "IBEX_CONTEXT_GRPC_ADDR": "127.0.0.1:0", "IBEX_CONTEXT_HEALTH_ADDR": "127.0.0.1:0",
        "IBEX_CONTEXT_DATA_PATH": str(tmp_path / "ibex.db"),
        "IBEX_CONTEXT_TLS_CERT": str(pki.server.cert_path), "IBEX_CONTEXT_TLS_KEY": str(pki.server.key_path),
        "IBEX_CONTEXT_TLS_CLIENT_CA": str(pki.ca.cert_path),
    })
    service = await start_service(settings, with_http=False)
    probe = grpc.aio.insecure_channel(service.grpc.health_address)
    plaintext_main = grpc.aio.insecure_channel(service.grpc_address)
    try:
        assert await status(probe, "") == SERVING and await status(probe, LIVENESS_NAME) == SERVING
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await status(plaintext_main, "")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # the main port speaks mTLS only
    finally:
        await probe.close()
        await plaintext_main.close()
        await service.shutdown(grace_s=0)
