"""The conformance kit run against the memory-service HTTP adapter and the loopback memory server.

The memory service derives the org from the Bearer token, so the backend under test holds one
adapter (one token) per org, as a deployment per org would; agent ids belong to one org only.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Sequence

import pytest

from adapters.memory_http import HttpMemorySource
from conformance.memory_source import MemorySourceConformance
from conformance.seed import SeedMemory
from domain.model.feedback import FeedbackItem, FeedbackResult
from domain.model.memory import HotQuery, MemoryBatch, SearchQuery
from ports.errors import MemorySourceClosedError
from ports.feedback_sink import FeedbackSink
from ports.memory_source import MemorySource
from tests.support.memory_server import MemoryServer


class PerOrgHttpSource(MemorySource, FeedbackSink):
    """Routes each call to the HTTP adapter holding the token of the call's org."""

    def __init__(self, server: MemoryServer) -> None:
        self._server = server
        self._adapters: dict[str, HttpMemorySource] = {}
        self._closed = False

    def adapter(self, org_id: str) -> HttpMemorySource:
        if self._closed:
            raise MemorySourceClosedError("memory source is closed")
        if org_id not in self._adapters:
            token = f"token-{uuid.uuid4().hex}"
            self._server.add_token(token, org_id)
            self._adapters[org_id] = HttpMemorySource(self._server.base_url, token, pool_size=8)
        return self._adapters[org_id]

    async def hot(self, query: HotQuery, *, timeout_s: float) -> MemoryBatch:
        return await self.adapter(query.org_id).hot(query, timeout_s=timeout_s)

    async def search(self, query: SearchQuery, *, timeout_s: float) -> MemoryBatch:
        return await self.adapter(query.org_id).search(query, timeout_s=timeout_s)

    async def record(self, item: FeedbackItem, *, timeout_s: float) -> FeedbackResult:
        return await self.adapter(item.org_id).record(item, timeout_s=timeout_s)

    async def close(self) -> None:
        self._closed = True
        for adapter in self._adapters.values():
            await adapter.close()


class HttpBackend:
    def __init__(self, server: MemoryServer) -> None:
        self.server = server
        self.source = self.feedback = PerOrgHttpSource(server)

    async def seed(self, memories: Sequence[SeedMemory]) -> None:
        for memory in memories:
            self.source.adapter(memory.org_id)
            self.server.add_memory(
                memory.org_id, memory.agent_id, memory.content, id=memory.memory_id, category=memory.category,
                confidence=memory.confidence, usefulness=memory.usefulness, tags=memory.tags,
                retrieval_count=memory.retrieval_count,
            )

    async def close(self) -> None:
        await self.source.close()


@pytest.fixture(scope="module")
def memory_server() -> Iterator[MemoryServer]:
    with MemoryServer.running() as server:
        yield server


class TestHttpMemorySourceConformance(MemorySourceConformance):
    agent_ids_are_global = True

    @pytest.fixture
    async def conformance_backend(self, memory_server: MemoryServer) -> AsyncIterator[HttpBackend]:
        backend = HttpBackend(memory_server)
        yield backend
        await backend.close()
