"""OpenTelemetry end to end: a W3C trace context in over real gRPC and HTTP, the spans out over
OTLP/HTTP to a real receiver on loopback, the context on to the memory stand-in, the ids in the
logs; and a broken or absent collector that never fails an answer.

Real Redis, the loopback memory service, the real service (``start_service``), a real OTLP
receiver (``tests.support.otlp_receiver``) decoding the exporter's protobuf requests.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager

import grpc
import httpx
import pytest

from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from entrypoints.cli.service import RunningService, start_service
from entrypoints.observability.logs import JsonFormatter
from entrypoints.settings import Settings
from tests.e2e.tenant import AGENT_ID, DIRECTIVE, MEMORIES, ORG_ID, assemble_request
from tests.support.memory_server import MemoryServer
from tests.support.otlp_receiver import OtlpGrpcReceiver, OtlpReceiver, ReceivedSpan
from tests.support.redis_server import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
TRACESTATE = "ibex=e2e"
SERVER, INTERNAL = 2, 1  # opentelemetry.proto.trace.v1.Span.SpanKind
GRPC_SPAN = "ibex.context.v1.ContextAssemblyService/AssembleContext"
HTTP_SPAN = "POST /v1/context:assemble"
STAGES = {"budget", "scoring_and_packing", "formatting", "final_count"}
BRANCHES = {"directive", "hot", "cold"}
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "20"}  # ms: spans leave quickly, so the test waits little


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver.running() as running:
        yield running


Start = Callable[..., Awaitable[RunningService]]


@pytest.fixture
async def start(service_env: dict[str, str], directive: str) -> AsyncIterator[Start]:
    started: list[RunningService] = []

    async def run(**env: str) -> RunningService:
        settings = Settings.from_env({**service_env, "IBEX_CONTEXT_HTTP_ADDR": "127.0.0.1:0", **FAST_EXPORT, **env})
        service = await start_service(settings, with_http=True)
        started.append(service)
        return service

    yield run
    for service in started:
        await service.shutdown(grace_s=0)


async def assemble_grpc(service: RunningService, metadata: tuple[tuple[str, str], ...] = (), **changes: object):  # type: ignore[no-untyped-def]
    async with grpc.aio.insecure_channel(service.grpc_address) as channel:
        stub = pb_grpc.ContextAssemblyServiceStub(channel)
        return await stub.AssembleContext(assemble_request(**changes), metadata=metadata, timeout=10)


def _assemble_json(**extra: object) -> dict[str, object]:
    return {"orgId": ORG_ID, "agentId": AGENT_ID, "model": "gpt-4o", "query": "dark theme",
            "recentMessages": [{"role": "user", "content": "Which theme do I like?"}],
            "requestId": "req-http-1", "traceId": "trace-http-1", "spanId": "span-http-1", **extra}


def _call_spans(spans: list[ReceivedSpan], server_name: str) -> tuple[ReceivedSpan, list[ReceivedSpan]]:
    """The server span named ``server_name`` and its children."""
    server = next(s for s in spans if s.name == server_name and s.kind == SERVER)
    return server, [s for s in spans if s.parent_span_id == server.span_id]


def _complete(server_name: str) -> Callable[[list[ReceivedSpan]], bool]:
    """True once a server span and all its stage children have arrived."""
    def done(spans: list[ReceivedSpan]) -> bool:
        servers = [s for s in spans if s.name == server_name and s.kind == SERVER]
        if not servers:
            return False
        names = {s.name for s in spans if s.parent_span_id == servers[0].span_id}
        return STAGES | {f"retrieval.{b}" for b in BRANCHES} <= names
    return done


def _traceparent_parts(value: str) -> tuple[str, str, str, str]:
    version, trace_id, parent_id, flags = value.split("-")
    return version, trace_id, parent_id, flags


def _assert_no_text(spans: list[ReceivedSpan]) -> None:
    """No memory content, query, message or directive text anywhere in a span."""
    texts = [DIRECTIVE, "dark theme", "Which theme do I like?", *(content for content, _ in MEMORIES)]
    for span in spans:
        for value in span.strings():
            assert not any(text in value for text in texts), (span.name, value)


def _assert_call_tree(spans: list[ReceivedSpan], server_name: str, branches: dict[str, str],
                      service_name: str = "ibex-context") -> tuple[ReceivedSpan, dict[str, ReceivedSpan]]:
    server, children = _call_spans(spans, server_name)
    assert (server.trace_id, server.parent_span_id) == (TRACE_ID, PARENT_ID)
    assert all(child.trace_id == TRACE_ID and child.kind == INTERNAL for child in children)
    per_branch = {c.name.removeprefix("retrieval."): c for c in children if c.name.startswith("retrieval.")}
    assert len([c for c in children if c.name.startswith("retrieval.")]) == 3  # one child per branch
    assert {name: span.attributes["ibex.branch.outcome"] for name, span in per_branch.items()} == branches
    for branch in per_branch.values():
        assert branch.attributes["ibex.branch.latency_ms"] >= 0  # type: ignore[operator]
        assert branch.attributes["ibex.branch.timeout_ms"] == 10_000.0
    assert STAGES <= {c.name for c in children}
    assert server.service_name == service_name
    _assert_no_text(spans)
    return server, per_branch


def _assert_memory_calls_joined(memory_server: MemoryServer, branches: dict[str, ReceivedSpan]) -> None:
    """The stand-in saw our trace id, each request's parent being its branch's span."""
    for endpoint, branch in (("hot", "hot"), ("search", "cold")):
        seen = memory_server.traceparents(endpoint)
        assert len(seen) == 1, seen
        version, trace_id, parent_id, flags = _traceparent_parts(seen[0])
        assert (version, trace_id, parent_id, flags) == ("00", TRACE_ID, branches[branch].span_id, "01")
        assert memory_server.requests(endpoint)[0].headers.get("tracestate") == TRACESTATE


# ------------------------------------------------------------------ traced calls
async def test_a_grpc_call_with_a_traceparent_is_one_trace_from_the_caller_to_the_memory_service(
    start: Start, receiver: OtlpReceiver, memory_server: MemoryServer,
) -> None:
    service = await start(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
    memory_server.clear_log()
    response = await assemble_grpc(service, (("traceparent", TRACEPARENT), ("tracestate", TRACESTATE)))

    spans = receiver.wait_for(_complete(GRPC_SPAN))
    server, branches = _assert_call_tree(spans, GRPC_SPAN, {b.name: b.outcome for b in response.branches})
    assert server.attributes["rpc.system"] == "grpc" and server.attributes["rpc.method"] == "AssembleContext"
    assert server.attributes["rpc.grpc.status_code"] == 0 and server.status_code == 0
    assert server.attributes["ibex.degradation_level"] == response.degradation_level == "L0"
    assert server.attributes["ibex.memories_included"] == response.memories_included
    assert server.attributes["ibex.tokens_used"] == response.tokens_used
    assert branches["hot"].attributes["ibex.branch.candidates"] == len(MEMORIES)
    assert branches["directive"].attributes["ibex.branch.candidates"] == 1
    packing = next(s for s in spans if s.name == "scoring_and_packing" and s.parent_span_id == server.span_id)
    assert packing.attributes["ibex.packing.included"] == response.memories_included
    assert packing.attributes["ibex.packing.evaluated"] == response.metrics.candidates_evaluated
    assert packing.attributes["ibex.packing.path"]
    count = next(s for s in spans if s.name == "final_count")
    assert count.attributes["ibex.count.tokens_used"] == response.tokens_used
    _assert_memory_calls_joined(memory_server, branches)


async def test_an_http_call_with_a_traceparent_is_one_trace_too(
    start: Start, receiver: OtlpReceiver, memory_server: MemoryServer,
) -> None:
    service = await start(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
    assert service.http is not None
    memory_server.clear_log()
    async with httpx.AsyncClient(base_url=service.http.url, timeout=10) as client:
        answer = await client.post("/v1/context:assemble", json=_assemble_json(),
                                   headers={"traceparent": TRACEPARENT, "tracestate": TRACESTATE})
    assert answer.status_code == 200, answer.text
    body = answer.json()

    spans = receiver.wait_for(_complete(HTTP_SPAN))
    server, branches = _assert_call_tree(spans, HTTP_SPAN, {b["name"]: b["outcome"] for b in body["branches"]})
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["http.route"] == "/v1/context:assemble"
    assert server.attributes["ibex.request_id"] == "req-http-1"
    assert server.attributes["ibex.request.trace_id"] == "trace-http-1"
    _assert_memory_calls_joined(memory_server, branches)


async def test_spans_can_go_to_an_otlp_grpc_collector_too(start: Start, memory_server: MemoryServer) -> None:
    with OtlpGrpcReceiver.running() as collector:
        service = await start(OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
                              OTEL_SERVICE_NAME="ibex-context-grpc-export")
        response = await assemble_grpc(service, (("traceparent", TRACEPARENT),))
        spans = collector.wait_for(_complete(GRPC_SPAN))
    server, _ = _assert_call_tree(spans, GRPC_SPAN, {b.name: b.outcome for b in response.branches},
                                  service_name="ibex-context-grpc-export")
    assert server.attributes["rpc.grpc.status_code"] == 0


async def test_the_request_trace_id_field_is_an_attribute_never_the_parent(
    start: Start, receiver: OtlpReceiver, memory_server: MemoryServer,
) -> None:
    """The reference's ``trace_id``/``span_id`` fields are the caller's own strings: echoed and
    recorded, while the trace follows the W3C header (and without one, starts at our span)."""
    service = await start(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
    memory_server.clear_log()  # the warm-up calls carry no context
    w3c_looking = uuid.uuid4().hex  # 32 hex digits: still not a trace context
    response = await assemble_grpc(service, trace_id=w3c_looking, span_id="b7ad6b7169203331")
    assert (response.trace_id, response.span_id) == (w3c_looking, "b7ad6b7169203331")  # echoed unchanged

    server, _ = _call_spans(receiver.wait_for(_complete(GRPC_SPAN)), GRPC_SPAN)
    assert server.parent_span_id == "" and server.trace_id != w3c_looking  # a new root
    assert server.attributes["ibex.request.trace_id"] == w3c_looking
    assert server.attributes["ibex.request.span_id"] == "b7ad6b7169203331"
    assert {_traceparent_parts(t)[1] for t in memory_server.traceparents()} == {server.trace_id}

    receiver_spans = len(receiver.spans())
    await assemble_grpc(service, (("traceparent", TRACEPARENT),), trace_id=w3c_looking)
    spans = receiver.wait_for(lambda s: len(s) > receiver_spans and _complete(GRPC_SPAN)(s[receiver_spans:]))
    header_led, _ = _call_spans(spans[receiver_spans:], GRPC_SPAN)
    assert (header_led.trace_id, header_led.parent_span_id) == (TRACE_ID, PARENT_ID)
    assert header_led.attributes["ibex.request.trace_id"] == w3c_looking


async def test_an_unsampled_caller_is_not_recorded_but_its_context_is_passed_on(
    start: Start, receiver: OtlpReceiver, memory_server: MemoryServer,
) -> None:
    service = await start(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
    memory_server.clear_log()
    unsampled = f"00-{TRACE_ID}-{PARENT_ID}-00"
    response = await assemble_grpc(service, (("traceparent", unsampled),))
    assert response.degradation_level == "L0"
    sent = [_traceparent_parts(t) for t in memory_server.traceparents()]
    assert sent and all(trace_id == TRACE_ID and flags == "00" for _, trace_id, _, flags in sent)
    await assemble_grpc(service, (("traceparent", TRACEPARENT),))  # a sampled call after it
    spans = receiver.wait_for(_complete(GRPC_SPAN))
    assert len([s for s in spans if s.kind == SERVER]) == 1  # only the sampled call was exported


async def test_with_tracing_off_a_callers_context_still_reaches_the_memory_service(
    start: Start, memory_server: MemoryServer,
) -> None:
    service = await start()  # no OTEL endpoint: off, no SDK
    assert not service.app.tracing.enabled
    memory_server.clear_log()
    await assemble_grpc(service, (("traceparent", TRACEPARENT),))
    assert [_traceparent_parts(t) for t in memory_server.traceparents()] == [("00", TRACE_ID, PARENT_ID, "01")] * 2
    memory_server.clear_log()
    await assemble_grpc(service)  # no context came: none is invented
    assert memory_server.traceparents() == ("", "")


# ------------------------------------------------------------------ logs and traces agree
@contextmanager
def json_log_lines() -> Iterator[list[dict[str, object]]]:
    """The service's log lines (its ``ibex_context.*`` loggers at DEBUG), as the JSON formatter writes them."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("ibex_context")
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    lines: list[dict[str, object]] = []
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
        lines.extend(json.loads(line) for line in stream.getvalue().splitlines())


@pytest.mark.parametrize("traced", [True, False], ids=["tracing-on", "tracing-off"])
async def test_every_log_line_of_a_traced_call_carries_its_trace_and_span_ids(
    start: Start, receiver: OtlpReceiver, memory_server: MemoryServer, traced: bool,
) -> None:
    service = await start(**({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint} if traced else {}))
    memory_server.force_status("hot", 503)  # a degraded answer: one more log line inside the call
    with json_log_lines() as lines:
        response = await assemble_grpc(service, (("traceparent", TRACEPARENT),))
        assert service.http is not None
        async with httpx.AsyncClient(base_url=service.http.url, timeout=10) as client:
            await client.post("/v1/context:assemble", json=_assemble_json(), headers={"traceparent": TRACEPARENT})
    assert response.degradation_level == "L1"

    events = [line["event"] for line in lines]
    assert events.count("context_assembly_degraded") == 1 and "grpc_request" in events and "http_request" in events
    if traced:
        spans = receiver.wait_for(lambda s: _complete(GRPC_SPAN)(s) and _complete(HTTP_SPAN)(s))
        ours = {s.span_id for s in spans}
        server_ids = {_call_spans(spans, name)[0].span_id for name in (GRPC_SPAN, HTTP_SPAN)}
    else:
        ours = server_ids = {PARENT_ID}  # no span of ours: the caller's context is the current one
    for line in lines:
        assert line["trace_id"] == TRACE_ID, line
        assert line["span_id"] in ours, line
    assert {line["span_id"] for line in lines if line["event"] in ("grpc_request", "http_request")} <= server_ids
    assert {line["request_trace_id"] for line in lines if line["event"] == "grpc_request"} == {"trace-e2e-1"}


# ------------------------------------------------------------------ a broken collector
@pytest.mark.parametrize("collector", ["hang", "fail", "absent"])
async def test_a_broken_or_absent_collector_never_fails_an_answer(
    start: Start, memory_server: MemoryServer, collector: str,
) -> None:
    with OtlpReceiver.running(mode="ok" if collector == "absent" else collector) as broken:
        endpoint = f"http://127.0.0.1:{free_port()}" if collector == "absent" else broken.endpoint
        service = await start(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_BSP_MAX_QUEUE_SIZE="8",
                              OTEL_BSP_MAX_EXPORT_BATCH_SIZE="8")
        responses = [await assemble_grpc(service, (("traceparent", TRACEPARENT),)) for _ in range(5)]
        assert all(r.degradation_level == "L0" and r.memories_included >= 1 for r in responses)
        if collector != "absent":
            assert broken.exports >= 1  # the exporter did try: it was slow or refused, off the request path
        metrics = service.app.metrics.registry
        assert metrics.get_sample_value("ibex_context_requests_total", {
            "surface": "grpc", "method": "AssembleContext", "code": "OK"}) == 5
        # 5 calls x 8 spans through a queue of 8 whose worker is stuck or failing: drops, counted
        processor = service.app.tracing.processor
        assert processor is not None
        assert metrics.get_sample_value("ibex_context_trace_spans_dropped_total") == processor.dropped
        await service.shutdown(grace_s=0)  # bounded: the flush gives up on a collector that never answers
