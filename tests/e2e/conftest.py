"""The real service in-process on 127.0.0.1:0: real Redis, the loopback memory service, real gRPC.

``start_service_under_test(**env)`` builds Settings from an environment (the e2e defaults below,
with overrides), opens the application through the composition root and starts the gRPC server
(HTTP off: these tests are about the gRPC surface). Timeouts are far longer than any branch takes
by default, so that no answer depends on how busy the machine is; a test that needs a timeout to
fire holds that memory endpoint (``memory_server.hold``: no answer at all) and sets a short budget
for that branch only.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import attrs
import grpc
import pytest
import redis.asyncio as redis_asyncio

from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from entrypoints.cli.service import RunningService, start_service
from entrypoints.settings import Settings
from tests.e2e.tenant import AGENT_ID, DIRECTIVE, MEMORIES, NAMESPACE, ORG_ID, TOKEN
from tests.support.memory_server import MemoryServer

E2E_ENV = {
    "IBEX_CONTEXT_GRPC_ADDR": "127.0.0.1:0",
    "IBEX_CONTEXT_TIMEOUT": "20s",
    "IBEX_CONTEXT_DEADLINE_MS": "20000",
    "IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS": "10000",
    "IBEX_CONTEXT_HOT_TIMEOUT_MS": "10000",
    "IBEX_CONTEXT_COLD_TIMEOUT_MS": "10000",
}
SHORT_BUDGET_MS = "200"  # the budget a test gives the one branch whose endpoint it holds


@attrs.define
class Harness:
    """A running service and a client channel to it."""

    service: RunningService
    channel: grpc.aio.Channel
    stub: pb_grpc.ContextAssemblyServiceStub

    @property
    def port(self) -> int:
        return self.service.grpc.port

    def requests_seen(self, method: str, code: str) -> float:
        """How many calls of ``method`` the server answered (or saw end) with ``code``."""
        value = self.service.app.metrics.registry.get_sample_value(
            "ibex_context_requests_total", {"surface": "grpc", "method": method, "code": code})
        return value or 0.0


StartService = Callable[..., Awaitable[Harness]]


@pytest.fixture
def memory_server() -> Iterator[MemoryServer]:
    with MemoryServer.running() as server:
        server.add_token(TOKEN, ORG_ID)
        server.add_agent(ORG_ID, AGENT_ID)
        for index, (content, category) in enumerate(MEMORIES):
            server.add_memory(ORG_ID, AGENT_ID, content, category=category,
                              id=str(uuid.uuid5(NAMESPACE, f"memory-{index}")), hot_score=0.9 - index / 10)
        yield server


@pytest.fixture
async def directive(redis_client: redis_asyncio.Redis) -> str:
    envelope = {"v": 1, "content": DIRECTIVE, "injection_mode": "system_first", "version_id": str(uuid.uuid4())}
    await redis_client.set(f"{ORG_ID}:directive:{AGENT_ID}", json.dumps(envelope))
    return DIRECTIVE


@pytest.fixture
def service_env(redis_url: str, memory_server: MemoryServer) -> dict[str, str]:
    return {
        **E2E_ENV,
        "IBEX_CONTEXT_REDIS_URL": redis_url,
        "IBEX_CONTEXT_MEMORY_BASE_URL": memory_server.base_url,
        "IBEX_CONTEXT_MEMORY_API_TOKEN": TOKEN,
    }


@pytest.fixture
async def start_service_under_test(service_env: dict[str, str]) -> AsyncIterator[StartService]:
    started: list[Harness] = []

    async def start(**env: str) -> Harness:
        settings = Settings.from_env({**service_env, **env})
        service = await start_service(settings, with_http=False)
        channel = grpc.aio.insecure_channel(service.grpc_address)
        harness = Harness(service, channel, pb_grpc.ContextAssemblyServiceStub(channel))
        started.append(harness)
        return harness

    yield start
    for harness in started:
        await harness.channel.close()
        await harness.service.shutdown(grace_s=0)


@pytest.fixture
async def harness(start_service_under_test: StartService, directive: str) -> Harness:
    return await start_service_under_test()
