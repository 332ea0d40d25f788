"""The memory-service adapter passes the current trace context on: ``traceparent`` (and
``tracestate``) on every request, hot, search and feedback; nothing without a context."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from adapters.memory_http import HttpMemorySource
from domain.model.feedback import FeedbackItem
from domain.model.memory import HotQuery, SearchQuery
from tests.support.memory_server import MemoryServer

ORG, AGENT = str(uuid.uuid4()), str(uuid.uuid4())
TRACE_ID, SPAN_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@pytest.fixture
def server() -> Iterator[MemoryServer]:
    with MemoryServer.running() as running:
        running.add_token("t", ORG)
        running.add_agent(ORG, AGENT)
        yield running


@pytest.fixture
async def source(server: MemoryServer) -> AsyncIterator[HttpMemorySource]:
    memory = HttpMemorySource(server.base_url, "t")
    yield memory
    await memory.close()


async def _every_call(source: HttpMemorySource, server: MemoryServer) -> None:
    memory_id = server.add_memory(ORG, AGENT, "tea every morning")
    await source.hot(HotQuery(ORG, AGENT), timeout_s=5)
    await source.search(SearchQuery(ORG, AGENT, "tea"), timeout_s=5)
    await source.record(FeedbackItem(org_id=ORG, memory_id=memory_id, feedback="positive", idempotency_key="k-1"), timeout_s=5)


async def test_every_request_carries_the_current_trace_context(source: HttpMemorySource, server: MemoryServer) -> None:
    span = NonRecordingSpan(SpanContext(int(TRACE_ID, 16), int(SPAN_ID, 16), is_remote=False,
                                        trace_flags=TraceFlags(TraceFlags.SAMPLED), trace_state=TraceState([("ibex", "1")])))
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        await _every_call(source, server)
    finally:
        otel_context.detach(token)
    logged = server.requests()
    assert [r.endpoint for r in logged] == ["hot", "search", "feedback"]
    assert {r.traceparent for r in logged} == {f"00-{TRACE_ID}-{SPAN_ID}-01"}
    assert {r.headers.get("tracestate") for r in logged} == {"ibex=1"}


async def test_without_a_trace_context_no_traceparent_is_invented(source: HttpMemorySource, server: MemoryServer) -> None:
    await _every_call(source, server)
    assert server.traceparents() == ("", "", "")
