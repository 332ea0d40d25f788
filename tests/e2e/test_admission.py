"""Admission control at both edges, over real gRPC and HTTP on loopback.

The condition is made by the test: the use case holds every call until released, so the second
call finds the only slot taken; the minimum start deadline is set above the call's own deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
import uvicorn

from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from domain.model.errors import InvalidRequestError
from entrypoints.admission import Admission
from entrypoints.grpc_api.server import build_server
from entrypoints.grpc_api.servicer import ContextAssemblyServicer
from entrypoints.http_api.app import make_app
from entrypoints.observability.metrics import ServiceMetrics
from tests.e2e.tenant import AGENT_ID, ORG_ID, assemble_request

pytestmark = pytest.mark.e2e
WAIT_S = 30.0  # only ever reached on a bug
MIN_START_S = 20.0  # above the deadline the deadline test sends, below none the others send
BUSY_START_S = 60.0  # above the deadline the busy test sends (seconds: no timing can make a test pass)
BODY = {"orgId": ORG_ID, "agentId": AGENT_ID, "model": "gpt-4o", "query": "q"}


class HeldAssemble:
    """Every call waits for ``release``, then fails INVALID_ARGUMENT (the refused calls are the point)."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def execute(self, request: object) -> object:
        self.calls += 1
        self.started.set()
        await self.release.wait()
        raise InvalidRequestError("query", "released")


class Service:
    def __init__(self) -> None:
        self.metrics = ServiceMetrics()
        self.assemble = HeldAssemble()
        self.channel: grpc.aio.Channel | None = None
        self.admission = Admission(max_in_flight=1, max_wait_s=0.0, min_deadline_s=MIN_START_S, busy_deadline_s=BUSY_START_S,
                                   on_shed=self.metrics.call_shed)

    def shed(self, surface: str, reason: str) -> float:
        value = self.metrics.registry.get_sample_value("ibex_context_shed_total", {"surface": surface, "reason": reason})
        return value or 0.0


@pytest.fixture
async def grpc_service() -> AsyncIterator[tuple[Service, pb_grpc.ContextAssemblyServiceStub]]:
    service = Service()
    servicer = ContextAssemblyServicer(assemble=service.assemble, search=object(), feedback=object(),  # type: ignore[arg-type]
                                       metrics=service.metrics, admission=service.admission)
    server, port = build_server(servicer, "127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        service.channel = channel
        yield service, pb_grpc.ContextAssemblyServiceStub(channel)
    service.assemble.release.set()
    await server.drain(0)


async def refused(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call  # type: ignore[misc]
    return error.value


async def test_grpc_past_the_in_flight_bound_is_resource_exhausted(grpc_service) -> None:  # type: ignore[no-untyped-def]
    service, stub = grpc_service
    held = asyncio.ensure_future(stub.AssembleContext(assemble_request()))  # no deadline: admitted
    await asyncio.wait_for(service.assemble.started.wait(), WAIT_S)
    error = await refused(stub.AssembleContext(assemble_request()))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.details() == "not started (in_flight): all 1 assembly slots are taken and none freed within 0 ms; retry shortly"
    assert (service.assemble.calls, service.shed("grpc", "in_flight")) == (1, 1.0)
    service.assemble.release.set()
    assert (await refused(held)).code() == grpc.StatusCode.INVALID_ARGUMENT  # the held call ran to its end


async def test_grpc_a_call_with_too_little_deadline_left_never_starts(grpc_service) -> None:  # type: ignore[no-untyped-def]
    service, stub = grpc_service
    error = await refused(stub.AssembleContext(assemble_request(), timeout=10.0))  # 10 s < MIN_START_S
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.details().startswith("not started (deadline): ")
    assert "an assembly is not started with less than 20000 ms" in error.details()
    assert (service.assemble.calls, service.shed("grpc", "deadline")) == (0, 1.0)


async def test_grpc_a_deadline_refusal_comes_before_the_request_is_read(grpc_service) -> None:  # type: ignore[no-untyped-def]
    # Bytes that are no AssembleContextRequest would be INVALID_ARGUMENT once read: the refusal
    # for the deadline comes first, so that a shed call costs no reading or decoding.
    service, stub = grpc_service
    assert service.channel is not None
    garbage = service.channel.unary_unary(
        "/ibex.context.v1.ContextAssemblyService/AssembleContext",
        request_serializer=None, response_deserializer=None)
    error = await refused(garbage(b"\xff\xff\xff", timeout=10.0))  # 10 s < MIN_START_S
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.details().startswith("not started (deadline): ")
    assert (service.assemble.calls, service.shed("grpc", "deadline")) == (0, 1.0)
    assert (await refused(garbage(b"\xff\xff\xff"))).code() == grpc.StatusCode.INVALID_ARGUMENT  # no deadline: read


async def test_grpc_a_busy_process_refuses_at_once_a_call_with_less_than_the_busy_deadline(grpc_service) -> None:  # type: ignore[no-untyped-def]
    service, stub = grpc_service
    held = asyncio.ensure_future(stub.AssembleContext(assemble_request()))
    await asyncio.wait_for(service.assemble.started.wait(), WAIT_S)
    error = await refused(stub.AssembleContext(assemble_request(), timeout=30.0))  # MIN_START_S < 30 s < BUSY_START_S
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.details().startswith("not started (deadline): all 1 assembly slots are taken and ")
    assert error.details().endswith("a busy process needs 60000 ms to start one")
    assert (service.assemble.calls, service.shed("grpc", "deadline")) == (1, 1.0)
    service.assemble.release.set()
    await refused(held)


async def test_http_past_the_in_flight_bound_is_503_with_retry_after() -> None:
    service = Service()
    app = make_app(assemble=service.assemble, search=object(), feedback=object(),  # type: ignore[arg-type]
                   metrics=service.metrics, readiness=lambda: True, admission=service.admission)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_config=None,
                                           access_log=False))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done()
            await asyncio.sleep(0.01)
        url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/v1/context:assemble"
        async with httpx.AsyncClient(timeout=WAIT_S) as client:
            held = asyncio.ensure_future(client.post(url, json=BODY))
            await asyncio.wait_for(service.assemble.started.wait(), WAIT_S)
            answer = await client.post(url, json=BODY)
            assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
            error = answer.json()["error"]
            assert error["code"] == "RESOURCE_EXHAUSTED"
            assert error["message"] == "not started (in_flight): all 1 assembly slots are taken and none freed within 0 ms; retry shortly"
            assert (service.assemble.calls, service.shed("http", "in_flight")) == (1, 1.0)
            service.assemble.release.set()
            assert (await held).status_code == 400
    finally:
        service.assemble.release.set()
        server.should_exit = True
        await task
