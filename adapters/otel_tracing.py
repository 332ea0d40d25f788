"""OpenTelemetryStages: the tracing port (``ports.tracing.Tracer``) over an OpenTelemetry tracer.

A stage is a child of the current span (the edge's server span, or an enclosing stage) and is
made current for its block, so a memory-service call inside it carries it as its parent. When
the current span is not recording (tracing on, but this call not sampled) a stage costs one
context lookup and records nothing: the port's null span is returned.

Failures: an exception leaving a stage sets ``error.type`` to its class name and, for an
``Exception``, the span status to ERROR with that name only. The message is left out on purpose
(it may quote request text), and so is the SDK's exception event with its stack trace.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from ports.tracing import NO_SPAN, StageSpan, Tracer


class OpenTelemetryStages(Tracer):
    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def stage(self, name: str) -> AbstractContextManager[StageSpan]:
        if not trace.get_current_span().is_recording():
            return NO_SPAN
        return _Stage(self._tracer, name)


class _Stage:
    __slots__ = ("_name", "_span", "_token", "_tracer")

    def __init__(self, tracer: trace.Tracer, name: str) -> None:
        self._tracer = tracer
        self._name = name

    def __enter__(self) -> StageSpan:
        span = self._tracer.start_span(self._name)
        self._span = span
        self._token = otel_context.attach(trace.set_span_in_context(span))
        return span

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        span = self._span
        otel_context.detach(self._token)
        if kind is not None:
            span.set_attribute("error.type", kind.__name__)
            if issubclass(kind, Exception):
                span.set_status(Status(StatusCode.ERROR, kind.__name__))
        span.end()
