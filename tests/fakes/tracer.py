"""A recording tracing port: every stage in the order it ended, with its parent and attributes."""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from types import TracebackType

import attrs

from ports.tracing import AttributeValue

_CURRENT: contextvars.ContextVar[RecordedStage | None] = contextvars.ContextVar("recorded_stage", default=None)


@attrs.define(eq=False)
class RecordedStage:
    name: str
    parent: RecordedStage | None
    attributes: dict[str, AttributeValue] = attrs.field(factory=dict)
    error: str = ""
    ended: bool = False

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        self.attributes.update(attributes)


class RecordingTracer:
    """``ports.tracing.Tracer``; a stage's parent is the stage current where it was opened (per task)."""

    def __init__(self) -> None:
        self.stages: list[RecordedStage] = []

    def stage(self, name: str) -> _Open:
        return _Open(self, name)

    def named(self, name: str) -> list[RecordedStage]:
        return [stage for stage in self.stages if stage.name == name]


class _Open:
    def __init__(self, tracer: RecordingTracer, name: str) -> None:
        self._tracer, self._name = tracer, name

    def __enter__(self) -> RecordedStage:
        self._stage = RecordedStage(self._name, _CURRENT.get())
        self._token = _CURRENT.set(self._stage)
        return self._stage

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        _CURRENT.reset(self._token)
        self._stage.error = kind.__name__ if kind else ""
        self._stage.ended = True
        self._tracer.stages.append(self._stage)
