"""Tracing: the edges' server spans, W3C trace context in and out, and the OpenTelemetry SDK.

In: a call's trace context comes from its gRPC metadata or HTTP headers, in the fields of the
configured propagators (``OTEL_PROPAGATORS``, by default W3C ``traceparent``/``tracestate`` and
``baggage``). It is the parent of the call's server span. The request's own ``trace_id`` /
``span_id`` fields (the reference's free-form correlation strings) are never read as a trace
context: they are echoed, ``trace_id`` is logged as ``request_trace_id``, and both are recorded on
the server span as ``ibex.request.trace_id`` / ``ibex.request.span_id``.

On (``Settings.tracing_enabled``: an OTLP endpoint is set): ``open_tracing`` builds an SDK
TracerProvider (sampler, resource) whose spans go through a bounded ``BatchSpanProcessor``
(``span_export.py``) to the OTLP exporter on a worker thread; a call only appends its ended spans
to the queue. ``EdgeTracing`` makes one SERVER span per RPC, current for the whole call, so the
use case's stage spans (``adapters.otel_tracing``) are its children and every log line written
meanwhile carries its ids (``logs.py``).

Off: the trace SDK is not even imported and no span is made. A call that brings a trace context still
has it attached while it runs, so the memory service's requests carry it on (``traceparent``
from ``adapters.memory_http``) and the call's log lines carry its trace id.

Server spans carry method, route and status attributes, the degradation level and token
counts of an assembly (``annotate_assembly``), never request or memory text.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from domain.model.assembly import AssemblyResult
from entrypoints.settings import Settings

SHUTDOWN_FLUSH_S = 3.0  # at most this long, at shutdown, for queued spans to leave (a dead collector never holds it up)
TRACER_NAME = "ibex_context"
_ID_CHARS = 256  # the validation bound of the request's ids: a longer one is refused anyway
# gRPC codes that make a server span an error (OpenTelemetry's semantic conventions for gRPC servers)
_GRPC_SERVER_ERRORS = frozenset({"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"})
_log = logging.getLogger("ibex_context.tracing")


class ServerSpan:
    """The server span of one call, as the edge sees it (a null one when nothing is recorded)."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def grpc_status(self, name: str, number: int) -> None:
        span = self.span
        if span.is_recording():
            span.set_attribute("rpc.grpc.status_code", number)
            if name in _GRPC_SERVER_ERRORS:
                span.set_status(Status(StatusCode.ERROR, name))

    def http_status(self, status: int, code: str) -> None:
        span = self.span
        if span.is_recording():
            span.set_attribute("http.response.status_code", status)
            if status >= 400:
                span.set_attribute("ibex.code", code)  # the JSON error code
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR, code))


_NO_SERVER_SPAN = ServerSpan(trace.INVALID_SPAN)


class _NoCall:
    """No trace context came and tracing is off: nothing to attach, nothing to record."""

    __slots__ = ()

    def __enter__(self) -> ServerSpan:
        return _NO_SERVER_SPAN

    def __exit__(self, *exc: object) -> None:
        return None


_NO_CALL = _NoCall()


class _Call:
    """One call's trace context, attached for the call; with a tracer, its SERVER span too."""

    __slots__ = ("_attributes", "_context", "_name", "_span", "_token", "_tracer")

    def __init__(self, tracer: trace.Tracer | None, name: str, parent: otel_context.Context | None,
                 attributes: dict[str, Any]) -> None:
        self._tracer = tracer
        self._name = name
        self._context = parent
        self._attributes = attributes
        self._span: trace.Span | None = None

    def __enter__(self) -> ServerSpan:
        if self._tracer is None:  # propagation only
            self._token = otel_context.attach(self._context)  # type: ignore[arg-type]
            return _NO_SERVER_SPAN
        span = self._tracer.start_span(self._name, context=self._context, kind=SpanKind.SERVER,
                                       attributes=self._attributes)
        self._span = span
        self._token = otel_context.attach(trace.set_span_in_context(span, self._context))
        return ServerSpan(span)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        otel_context.detach(self._token)
        span = self._span
        if span is None:
            return
        if kind is not None:  # only the type: a message may quote request text
            span.set_attribute("error.type", kind.__name__)
        span.end()


class EdgeTracing:
    """Server spans for the gRPC and HTTP edges; ``tracer`` None: tracing off (propagation only)."""

    def __init__(self, tracer: trace.Tracer | None = None) -> None:
        self.tracer = tracer

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    def grpc_call(self, service: str, method: str, metadata: Iterable[tuple[str, Any]] | None) -> _Call | _NoCall:
        """The server span of one gRPC call (its context from the call's metadata)."""
        fields = propagate.get_global_textmap().fields
        carrier = {key: value for key, value in metadata or () if key in fields}
        if not carrier and self.tracer is None:
            return _NO_CALL
        return _Call(self.tracer, f"{service}/{method}", propagate.extract(carrier) if carrier else None, {
            "rpc.system": "grpc", "rpc.service": service, "rpc.method": method})

    def http_call(self, method: str, http_method: str, route: str, headers: Mapping[str, str]) -> _Call | _NoCall:
        """The server span of one HTTP API call (its context from the request headers); ``method``
        is the RPC the route serves (not recorded: the route names it)."""
        carrier = {field: headers[field] for field in propagate.get_global_textmap().fields if field in headers}
        if not carrier and self.tracer is None:
            return _NO_CALL
        return _Call(self.tracer, f"{http_method} {route}", propagate.extract(carrier) if carrier else None, {
            "http.request.method": http_method, "http.route": route})


EDGE_OFF = EdgeTracing()


def annotate_assembly(result: AssemblyResult) -> None:
    """Describe an assembly on the current (server) span: level and counts, no text (the stages
    carry the rest: a few attributes, as each costs CPU on the call and again at export)."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    attributes: dict[str, str | int] = {
        "ibex.degradation_level": result.degradation_level, "ibex.memories_included": result.memories_included,
        "ibex.tokens_used": result.tokens_used, "ibex.score_schema": result.score_schema,
    }
    if result.span_id:
        attributes["ibex.request.span_id"] = result.span_id[:_ID_CHARS]
    span.set_attributes(attributes)


def annotate_request_ids(request_id: str, trace_id: str = "") -> None:
    """The call's request id and the request's own ``trace_id`` field on the current span."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    if request_id:
        span.set_attribute("ibex.request_id", request_id[:_ID_CHARS])
    if trace_id:
        span.set_attribute("ibex.request.trace_id", trace_id[:_ID_CHARS])


class Tracing:
    """The process's tracing: the edges' helper, the SDK's tracer when on, and a bounded close."""

    def __init__(self, tracer: trace.Tracer | None = None, provider: Any = None, processor: Any = None) -> None:
        self.edge = EdgeTracing(tracer)
        self.tracer = tracer
        self._provider = provider
        self.processor = processor  # span_export.CountingBatchSpanProcessor when on

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    async def close(self, timeout_s: float = SHUTDOWN_FLUSH_S) -> bool:
        """Flush and stop the SDK, waiting at most ``timeout_s``; True when it finished in time."""
        provider, self._provider = self._provider, None
        if provider is None:
            return True
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()

        def shut_down() -> None:
            try:
                provider.shutdown()
            except Exception:  # a failing exporter must not fail the shutdown
                _log.exception("tracing_shutdown_failed")
            finally:
                try:
                    loop.call_soon_threadsafe(lambda: finished.done() or finished.set_result(None))
                except RuntimeError:  # the loop is gone: nobody waits any more
                    pass

        # a daemon thread: an export stuck on a dead collector can never hold the process open
        threading.Thread(target=shut_down, name="ibex-otel-shutdown", daemon=True).start()
        try:
            await asyncio.wait_for(asyncio.shield(finished), timeout_s)
        except TimeoutError:
            _log.warning("tracing_shutdown_timed_out", extra={"timeout_s": timeout_s})
            return False
        return True


def open_tracing(settings: Settings, *, on_drop: Callable[[], None] | None = None,
                 on_export: Callable[[str, int], None] | None = None) -> Tracing:
    """The process's tracing from the settings: off (no SDK imported) unless an endpoint is set."""
    if not settings.tracing_enabled:
        return Tracing()
    from entrypoints.observability.span_export import build_provider  # the SDK is imported only when on

    provider, processor = build_provider(settings, on_drop=on_drop, on_export=on_export)
    return Tracing(provider.get_tracer(TRACER_NAME), provider, processor)


def describe(settings: Settings) -> str:
    """One line for ``ibex-context config``: whether tracing is on and where spans go."""
    if settings.tracing_enabled:
        sampler = settings.otel_traces_sampler
        if sampler.endswith("traceidratio"):
            sampler += f" {settings.otel_traces_sampler_arg:g}"
        return (f"on: OTLP {settings.otel_exporter_otlp_protocol} to {_shown(settings.otlp_traces_endpoint)}, "
                f"service {settings.otel_service_name}, sampler {sampler}, queue {settings.otel_bsp_max_queue_size} spans")
    if not settings.otlp_traces_endpoint:
        why = "no OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    elif settings.otel_sdk_disabled:
        why = "OTEL_SDK_DISABLED=true"
    else:
        why = "OTEL_TRACES_EXPORTER=none"
    return f"off ({why}); incoming trace context is still passed on to the memory service"


def _shown(url: str) -> str:
    """A URL with any userinfo masked."""
    scheme, sep, rest = url.partition("://")
    host, at, tail = rest.partition("@")
    if at and "/" not in host:
        return f"{scheme}{sep}***@{tail}"
    return url
