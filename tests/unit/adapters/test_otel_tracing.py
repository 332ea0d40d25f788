"""adapters.otel_tracing: stage spans as children of the current span, current for their block;
nothing when the call is not recorded; failures by type only."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from adapters.otel_tracing import OpenTelemetryStages
from ports.tracing import NO_SPAN


def recording(sampler: object = None) -> tuple[trace.Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()  # type: ignore[arg-type]
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def test_a_stage_is_a_child_of_the_current_span_and_current_while_it_runs() -> None:
    tracer, exporter = recording()
    stages = OpenTelemetryStages(tracer)
    with tracer.start_as_current_span("server") as server:
        with stages.stage("packing") as span:
            span.set_attributes({"ibex.packing.included": 3})
            inside = trace.get_current_span()
        after = trace.get_current_span()
    packing, parent = exporter.get_finished_spans()
    assert packing.name == "packing" and packing.parent.span_id == server.get_span_context().span_id
    assert packing.attributes["ibex.packing.included"] == 3
    assert inside.get_span_context().span_id == packing.context.span_id
    assert after.get_span_context().span_id == parent.context.span_id  # restored when the block ends


def test_outside_a_recorded_call_a_stage_is_the_null_span() -> None:
    tracer, exporter = recording()
    assert OpenTelemetryStages(tracer).stage("budget") is NO_SPAN  # no current span at all
    unsampled, _ = recording(ALWAYS_OFF)
    with unsampled.start_as_current_span("server"):  # a call the sampler left out
        assert OpenTelemetryStages(unsampled).stage("budget") is NO_SPAN
    assert exporter.get_finished_spans() == ()


def test_a_failing_stage_records_the_error_type_only() -> None:
    tracer, exporter = recording()
    with tracer.start_as_current_span("server", record_exception=False, set_status_on_exception=False):
        with pytest.raises(ValueError), OpenTelemetryStages(tracer).stage("formatting"):
            raise ValueError("the secret query text")
    formatting = exporter.get_finished_spans()[0]
    assert formatting.attributes["error.type"] == "ValueError"
    assert formatting.status.status_code == trace.StatusCode.ERROR and formatting.status.description == "ValueError"
    assert formatting.events == ()  # no exception event: its message could quote the request
