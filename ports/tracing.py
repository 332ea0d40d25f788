"""Port: stage spans around the use case's own stages (retrieval branches, budget, packing...).

The use case opens a span per stage with ``with tracer.stage(name) as span:`` and describes the
stage once with ``span.set_attributes({...})``: counts, outcomes, paths and timings only, never a
memory's content, the query or the directive (an implementation may export every attribute).
One call per stage, few attributes: with tracing on, each attribute costs CPU on the request
path and again when the span is encoded for export.
A stage opened inside another stage, or inside the edge's server span, is its child; a stage is
the current span while its block runs, so downstream calls made inside it (a memory-service
request) carry it as their parent.

``NO_TRACER`` is the null implementation: what the use case gets when tracing is off. Its spans
are one shared object whose methods do nothing.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol

AttributeValue = str | bool | int | float


class StageSpan(Protocol):
    @abstractmethod
    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Describe the stage (an OpenTelemetry span satisfies this as it is)."""


class Tracer(Protocol):
    @abstractmethod
    def stage(self, name: str) -> AbstractContextManager[StageSpan]:
        """A span named ``name`` for the block; it ends when the block does, raising or not."""


class _NoSpan:
    """A span that records nothing: its own context manager, shared by every stage."""

    __slots__ = ()

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        return None

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _NoTracer:
    __slots__ = ()

    def stage(self, name: str) -> _NoSpan:
        return NO_SPAN


NO_SPAN = _NoSpan()
NO_TRACER: Tracer = _NoTracer()
