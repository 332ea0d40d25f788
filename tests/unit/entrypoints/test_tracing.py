"""Tracing at the edges: the OTEL_* settings, the export mechanism (off the request path, a
bounded queue, drops counted), the samplers, W3C context in, the ids in the log lines."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from entrypoints.cli import main as cli_main
from entrypoints.observability.logs import JsonFormatter
from entrypoints.observability.span_export import CountingExporter, build_provider, sampler
from entrypoints.observability.tracing import EdgeTracing, Tracing, describe, open_tracing
from entrypoints.settings import OTEL_READ_BY_SDK, Settings, SettingsError

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
REPO = Path(__file__).resolve().parents[3]
HANG_GUARD_S = 30.0  # only so that a broken mechanism fails instead of hanging


# ------------------------------------------------------------------ settings
def test_tracing_is_off_without_an_endpoint_and_on_with_one() -> None:
    assert not Settings.from_env({}).tracing_enabled
    on = Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert on.tracing_enabled and on.otlp_traces_endpoint == "http://collector:4318/v1/traces"
    assert (on.otel_service_name, on.otel_traces_sampler, on.otel_traces_sampler_arg) == (
        "ibex-context", "parentbased_always_on", 1.0)
    specific = Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
                                  "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/custom"})
    assert specific.otlp_traces_endpoint == "http://b:4318/custom"  # used as given
    grpc_base = Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert grpc_base.otlp_traces_endpoint == "http://a:4317"  # gRPC: no path
    for off in ({"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}):
        assert not Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", **off}).tracing_enabled


def test_the_traces_protocol_overrides_the_general_one() -> None:
    settings = Settings.from_env({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"})
    assert settings.otel_exporter_otlp_protocol == "http/protobuf"


@pytest.mark.parametrize(("env", "named"), [
    ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER"),
    ({"OTEL_TRACES_SAMPLER_ARG": "1.5"}, "OTEL_TRACES_SAMPLER_ARG"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "0"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "8", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "9"}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
    ({"OTEL_SDK_DISABLED": "maybe"}, "OTEL_SDK_DISABLED"),
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
])
def test_a_bad_otel_value_stops_start_up_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=f"^{named}: "):
        Settings.from_env(env)


def test_the_readme_lists_every_otel_variable_honoured() -> None:
    readme = (REPO / "README.md").read_text()
    settings_source = (REPO / "entrypoints" / "settings.py").read_text()
    read_here = set(re.findall(r'"(OTEL_[A-Z_]+)"', settings_source))
    assert {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER", "OTEL_SERVICE_NAME"} <= read_here
    missing = sorted(name for name in read_here | set(OTEL_READ_BY_SDK) if f"`{name}`" not in readme)
    assert not missing, missing


def test_config_says_whether_tracing_is_on_and_where_to(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in [n for n in os.environ if n.startswith(("OTEL_", "IBEX_CONTEXT_"))]:
        monkeypatch.delenv(name)
    assert cli_main(["config"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("tracing = off (no OTEL_EXPORTER_OTLP_ENDPOINT")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://user:secret@collector.example:4318")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.01")
    assert cli_main(["config"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == ("tracing = on: OTLP http/protobuf to https://***@collector.example:4318/v1/traces, "
                                    "service ibex-context, sampler parentbased_traceidratio 0.01, queue 2048 spans")
    assert "secret" not in out


def test_describe_names_why_tracing_is_off() -> None:
    assert describe(Settings(otel_exporter_otlp_endpoint="http://a:4318", otel_sdk_disabled=True)).startswith(
        "off (OTEL_SDK_DISABLED=true)")
    assert describe(Settings(otel_exporter_otlp_endpoint="http://a:4318", otel_traces_exporter="none")).startswith(
        "off (OTEL_TRACES_EXPORTER=none)")


def test_with_tracing_off_the_trace_sdk_and_exporters_are_never_imported() -> None:
    """(redis-py imports ``opentelemetry.sdk.metrics`` by itself when the SDK is installed; it stays
    unused unless an application initialises redis-py's own observability, which we never do.)"""
    code = ("import sys; from entrypoints.observability.tracing import open_tracing; from entrypoints.settings import Settings; "
            "import entrypoints.containers, entrypoints.cli.service; "
            "t = open_tracing(Settings()); assert t.tracer is None and not t.edge.enabled; "
            "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk.trace', 'opentelemetry.exporter'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


# ------------------------------------------------------------------ the export mechanism
class BlockedExporter(SpanExporter):
    """An exporter stuck like one talking to a collector that never answers, until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: set[int] = set()
        self.exported: list[str] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.threads.add(threading.get_ident())
        self.entered.set()
        self.release.wait(HANG_GUARD_S)
        self.exported.extend(span.name for span in spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def _settings(**changes: object) -> Settings:
    base: dict[str, object] = {"otel_exporter_otlp_endpoint": "http://127.0.0.1:9", "otel_bsp_max_queue_size": 4,
                               "otel_bsp_max_export_batch_size": 4, "otel_bsp_schedule_delay_ms": 60_000.0}
    base.update(changes)
    return Settings(**base)  # type: ignore[arg-type]


def test_spans_are_exported_off_the_calling_thread_through_a_bounded_queue_and_drops_are_counted() -> None:
    exporter = BlockedExporter()
    drops: list[int] = []
    provider, processor = build_provider(_settings(), exporter=exporter, on_drop=lambda: drops.append(1))
    tracer = provider.get_tracer("test")
    try:
        for index in range(4):  # a full batch: the worker takes it and blocks in export
            tracer.start_span(f"first-{index}").end()
        assert exporter.entered.wait(HANG_GUARD_S)
        assert threading.get_ident() not in exporter.threads  # export runs on the processor's worker
        for index in range(4):  # the worker is stuck: these fill the queue (bound 4)...
            tracer.start_span(f"queued-{index}").end()
        assert processor.queued == 4 and drops == [] and processor.dropped == 0
        for index in range(3):  # ...and these arrive at a full queue: each drops one, counted
            tracer.start_span(f"dropped-{index}").end()  # returns at once although the exporter is stuck
        assert processor.queued == 4
        assert processor.dropped == 3 and len(drops) == 3
    finally:
        exporter.release.set()
        provider.shutdown()
    assert len(exporter.exported) == 4 + 4  # the first batch and the queue as it was at the end
    assert {name for name in exporter.exported if name.startswith("first")} == {f"first-{i}" for i in range(4)}


def test_an_unsampled_span_is_never_queued() -> None:
    exporter = BlockedExporter()
    provider, processor = build_provider(_settings(otel_traces_sampler="always_off"), exporter=exporter)
    try:
        for _ in range(10):
            provider.get_tracer("test").start_span("unsampled").end()
        assert processor.queued == 0 and processor.dropped == 0
    finally:
        exporter.release.set()
        provider.shutdown()


def test_export_results_are_counted() -> None:
    class Failing(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            raise ConnectionError("collector gone")

        def shutdown(self) -> None:
            return None

    counted: list[tuple[str, int]] = []
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(CountingExporter(memory, lambda r, n: counted.append((r, n)))))
    provider.add_span_processor(SimpleSpanProcessor(CountingExporter(Failing(), lambda r, n: counted.append((r, n)))))
    provider.get_tracer("test").start_span("one").end()
    assert sorted(counted) == [("failure", 1), ("success", 1)]


async def test_close_waits_a_bounded_time_for_a_stuck_exporter() -> None:
    exporter = BlockedExporter()
    provider, processor = build_provider(_settings(), exporter=exporter)
    tracing = Tracing(provider.get_tracer("test"), provider, processor)
    for index in range(4):
        tracing.tracer.start_span(f"s-{index}").end()  # type: ignore[union-attr]
    assert exporter.entered.wait(HANG_GUARD_S)
    assert await tracing.close(timeout_s=0.05) is False  # gave up waiting; the export is still stuck
    assert await tracing.close() is True  # idempotent
    exporter.release.set()


@pytest.mark.parametrize(("name", "root_sampled", "child_of_sampled"), [
    ("always_on", True, True), ("always_off", False, False), ("traceidratio", False, False),
    ("parentbased_always_on", True, True), ("parentbased_always_off", False, True),
    ("parentbased_traceidratio", False, True),
])
def test_samplers(name: str, root_sampled: bool, child_of_sampled: bool) -> None:
    chosen = sampler(name, 0.0)
    parent = trace.set_span_in_context(NonRecordingSpan(SpanContext(
        int(TRACE_ID, 16), int(PARENT_ID, 16), is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))))
    assert chosen.should_sample(None, int(TRACE_ID, 16), "x").decision.is_sampled() is root_sampled
    assert chosen.should_sample(parent, int(TRACE_ID, 16), "x").decision.is_sampled() is child_of_sampled
    assert sampler("traceidratio", 0.01).get_description() == "TraceIdRatioBased{0.01}"


# ------------------------------------------------------------------ context in, at the edges
def _recording() -> tuple[EdgeTracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return EdgeTracing(provider.get_tracer("test")), exporter


def test_a_grpc_server_span_is_the_child_of_the_metadata_traceparent() -> None:
    edge, exporter = _recording()
    metadata = (("user-agent", "grpc-go"), ("traceparent", TRACEPARENT), ("tracestate", "a=1"))
    with edge.grpc_call("ibex.context.v1.ContextAssemblyService", "AssembleContext", metadata) as call:
        current = trace.get_current_span().get_span_context()
        call.grpc_status("INTERNAL", 13)
    (span,) = exporter.get_finished_spans()
    assert span.name == "ibex.context.v1.ContextAssemblyService/AssembleContext" and span.kind == trace.SpanKind.SERVER
    assert (trace.format_trace_id(span.context.trace_id), trace.format_span_id(span.parent.span_id)) == (TRACE_ID, PARENT_ID)
    assert current.span_id == span.context.span_id  # current for the whole call
    assert span.context.trace_state.get("a") == "1"
    assert span.attributes["rpc.grpc.status_code"] == 13 and span.status.status_code == trace.StatusCode.ERROR
    assert not trace.get_current_span().get_span_context().is_valid  # detached after the call


def test_an_http_server_span_is_the_child_of_the_traceparent_header() -> None:
    edge, exporter = _recording()
    with edge.http_call("AssembleContext", "POST", "/v1/context:assemble", {"traceparent": TRACEPARENT}) as call:
        call.http_status(200, "OK")
    (span,) = exporter.get_finished_spans()
    assert span.name == "POST /v1/context:assemble" and trace.format_span_id(span.parent.span_id) == PARENT_ID
    assert span.attributes["http.response.status_code"] == 200 and span.status.status_code == trace.StatusCode.UNSET


def test_without_a_traceparent_the_server_span_is_a_root_and_bad_ones_are_ignored() -> None:
    edge, exporter = _recording()
    for metadata in ((), (("traceparent", "00-zz-yy-01"),), (("traceparent", f"00-{'0' * 32}-{PARENT_ID}-01"),)):
        with edge.grpc_call("S", "M", metadata):
            pass
    assert [span.parent for span in exporter.get_finished_spans()] == [None, None, None]


def test_with_tracing_off_the_callers_context_is_attached_and_nothing_recorded() -> None:
    edge = EdgeTracing(None)
    with edge.grpc_call("S", "M", (("traceparent", TRACEPARENT),)) as call:
        current = trace.get_current_span().get_span_context()
        call.grpc_status("OK", 0)
    assert (trace.format_trace_id(current.trace_id), trace.format_span_id(current.span_id)) == (TRACE_ID, PARENT_ID)
    with edge.grpc_call("S", "M", (("user-agent", "x"),)):
        assert not trace.get_current_span().get_span_context().is_valid


async def test_a_call_context_does_not_leak_into_concurrent_calls() -> None:
    edge, _ = _recording()

    async def call(traceparent: str) -> str:
        with edge.grpc_call("S", "M", (("traceparent", traceparent),)):
            await asyncio.sleep(0.01)
            return trace.format_trace_id(trace.get_current_span().get_span_context().trace_id)

    other = "0af7651916cd43dd8448eb211c80319c"
    seen = await asyncio.gather(call(TRACEPARENT), call(f"00-{other}-{PARENT_ID}-01"))
    assert seen == [TRACE_ID, other]


# ------------------------------------------------------------------ ids in the logs
def _line(record: logging.LogRecord) -> dict[str, object]:
    return json.loads(JsonFormatter().format(record))


def test_log_lines_carry_the_current_spans_ids_and_only_then() -> None:
    logger = logging.getLogger("ibex_context.test_tracing")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.info("outside")
        parent = SpanContext(int(TRACE_ID, 16), int(PARENT_ID, 16), is_remote=True, trace_flags=TraceFlags(1))
        token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(parent)))
        try:
            logger.info("inside", extra={"trace_id": "the request's own", "request_trace_id": "the request's own"})
        finally:
            otel_context.detach(token)
    finally:
        logger.removeHandler(handler)
    outside, inside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert "trace_id" not in outside and "span_id" not in outside
    assert (inside["trace_id"], inside["span_id"]) == (TRACE_ID, PARENT_ID)
    assert inside["request_trace_id"] == "the request's own"


def test_the_resource_hash_is_computed_once_and_equal_to_the_plain_one() -> None:
    from opentelemetry.sdk.resources import Resource

    from entrypoints.observability.span_export import HashedResource

    plain = Resource.create({"service.name": "ibex-context"})
    hashed = HashedResource(plain)
    assert hash(hashed) == hash(plain) and hashed == plain and {plain: 1}[hashed] == 1


def test_open_tracing_with_an_endpoint_builds_a_private_provider() -> None:
    tracing = open_tracing(_settings())
    try:
        assert tracing.enabled and tracing.edge.enabled and tracing.processor is not None
        assert trace.get_tracer_provider().__class__.__name__ == "ProxyTracerProvider"  # the global one untouched
    finally:
        asyncio.run(tracing.close())
