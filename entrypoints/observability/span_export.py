"""The OpenTelemetry SDK as the service runs it: sampler, resource, bounded batch export over OTLP.

Imported only when tracing is on (``tracing.open_tracing``), so a service without an endpoint
never loads the SDK.

Export is off the request path: a call's ended span is appended to the ``BatchSpanProcessor``'s
queue (bounded by ``OTEL_BSP_MAX_QUEUE_SIZE``) and the processor's worker thread encodes and sends
batches. A full queue drops the span (counted: ``on_drop``, the metric
``ibex_context_trace_spans_dropped_total``); a slow, failing or absent collector only ever delays
that worker, never an answer. Export results are counted too (``on_export``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from entrypoints.settings import Settings


class HashedResource(Resource):
    """A Resource that computes its hash once. The OTLP encoder groups every span by its resource
    in a dict, and ``Resource.__hash__`` serialises the attributes to JSON each time: a sixth of
    the encoding CPU per span. A Resource is immutable, so the cached hash stays right."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = Resource.__hash__(self)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return Resource.__eq__(self, other)


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """A BatchSpanProcessor that reports each span it drops because its queue is full.

    The SDK's processor drops the oldest queued span when a new one arrives at a full queue (and
    logs it, at most once in 20 s); this one also calls ``on_drop`` for each, so drops are counted.
    """

    def __init__(self, exporter: SpanExporter, *, on_drop: Callable[[], None] | None = None, **options: float) -> None:
        super().__init__(exporter, **options)  # type: ignore[arg-type]
        self._on_drop = on_drop
        self.dropped = 0
        batch = self._batch_processor
        self._queue, self._capacity = batch._queue, batch._max_queue_size  # noqa: SLF001 - the SDK's own queue

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None or not span.context.trace_flags.sampled:
            return
        if len(self._queue) >= self._capacity:
            self.dropped += 1
            if self._on_drop is not None:
                self._on_drop()
        super().on_end(span)

    @property
    def queued(self) -> int:
        """Spans waiting in the queue."""
        return len(self._queue)


class CountingExporter(SpanExporter):
    """The OTLP exporter, with each export's result and span count reported to ``on_export``."""

    def __init__(self, exporter: SpanExporter, on_export: Callable[[str, int], None] | None) -> None:
        self._exporter = exporter
        self._on_export = on_export

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._exporter.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        if self._on_export is not None:
            self._on_export("success" if result is SpanExportResult.SUCCESS else "failure", len(spans))
        return result

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._exporter.force_flush(timeout_millis)


def sampler(name: str, ratio: float) -> sampling.Sampler:
    """The ``OTEL_TRACES_SAMPLER`` sampler (``ratio``: ``OTEL_TRACES_SAMPLER_ARG``, ratio samplers only)."""
    root = {"always_on": sampling.ALWAYS_ON, "always_off": sampling.ALWAYS_OFF,
            "traceidratio": sampling.TraceIdRatioBased(ratio)}[name.removeprefix("parentbased_")]
    return sampling.ParentBased(root) if name.startswith("parentbased_") else root


def otlp_exporter(settings: Settings) -> SpanExporter:
    """The OTLP span exporter for the protocol; headers, TLS files, timeout and compression are read
    by the exporter from the process environment (``settings.OTEL_READ_BY_SDK``)."""
    if settings.otel_exporter_otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        return GrpcSpanExporter(endpoint=settings.otlp_traces_endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

    return HttpSpanExporter(endpoint=settings.otlp_traces_endpoint)


def build_provider(
    settings: Settings, *, on_drop: Callable[[], None] | None = None,
    on_export: Callable[[str, int], None] | None = None, exporter: SpanExporter | None = None,
) -> tuple[TracerProvider, CountingBatchSpanProcessor]:
    """A TracerProvider (not the global one) exporting through a bounded batch processor.

    ``shutdown_on_exit`` is off: the service closes it with a bounded wait (``Tracing.close``),
    where the SDK's own exit hook could wait on a dead collector for its whole export timeout.
    """
    provider = TracerProvider(
        sampler=sampler(settings.otel_traces_sampler, settings.otel_traces_sampler_arg),
        resource=HashedResource(Resource.create({SERVICE_NAME: settings.otel_service_name})),
        shutdown_on_exit=False,
    )
    processor = CountingBatchSpanProcessor(
        CountingExporter(exporter or otlp_exporter(settings), on_export), on_drop=on_drop,
        max_queue_size=settings.otel_bsp_max_queue_size,
        max_export_batch_size=settings.otel_bsp_max_export_batch_size,
        schedule_delay_millis=settings.otel_bsp_schedule_delay_ms,
        export_timeout_millis=settings.otel_bsp_export_timeout_ms,
    )
    provider.add_span_processor(processor)
    return provider, processor
