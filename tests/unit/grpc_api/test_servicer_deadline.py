"""How the servicer treats a caller deadline that has passed (a scripted ServicerContext: grpc
decides by itself whether such a call reaches a real server at all)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from contracts.ibex.context.v1 import context_pb2 as pb
from entrypoints.grpc_api.servicer import ContextAssemblyServicer
from entrypoints.observability.metrics import ServiceMetrics


class ScriptedContext:
    """time_remaining() answers from a script; the status set is recorded; abort() must not be used."""

    def __init__(self, *remaining: float) -> None:
        self._remaining = list(remaining)
        self.status: grpc.StatusCode | None = None
        self.details = ""

    def time_remaining(self) -> float:
        return self._remaining.pop(0) if len(self._remaining) > 1 else self._remaining[0]

    def set_code(self, code: grpc.StatusCode) -> None:
        self.status = code

    def set_details(self, details: str) -> None:
        self.details = details

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise AssertionError("a failed call sets its status and returns; it never aborts")

    def code(self) -> grpc.StatusCode | None:
        return self.status

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()


class CountingAssemble:
    def __init__(self) -> None:
        self.calls = 0

    async def execute(self, request: object) -> object:
        self.calls += 1
        raise AssertionError("the use case must not run for an expired deadline")


def servicer(assemble: object, metrics: ServiceMetrics) -> ContextAssemblyServicer:
    return ContextAssemblyServicer(assemble=assemble, search=object(), feedback=object(), metrics=metrics)  # type: ignore[arg-type]


def seen(metrics: ServiceMetrics, code: str) -> float:
    value = metrics.registry.get_sample_value(
        "ibex_context_requests_total", {"surface": "grpc", "method": "RecordMemoryFeedback", "code": code})
    return value or 0.0


async def test_an_expired_deadline_never_reaches_the_use_case() -> None:
    metrics, assemble, context = ServiceMetrics(), CountingAssemble(), ScriptedContext(-0.001)
    response = await servicer(assemble, metrics).AssembleContext(pb.AssembleContextRequest(), context)  # type: ignore[arg-type]
    assert response == pb.AssembleContextResponse()
    assert assemble.calls == 0
    assert (context.status, context.details) == (grpc.StatusCode.DEADLINE_EXCEEDED, "deadline expired before the call started")


async def test_an_answer_finished_after_the_deadline_is_not_counted_ok() -> None:
    class Feedback:
        async def execute(self, request: object) -> object:
            from domain.model.operations import FeedbackOutcome

            return FeedbackOutcome(success=True, updates=())

    metrics = ServiceMetrics()
    service = ContextAssemblyServicer(assemble=object(), search=object(), feedback=Feedback(), metrics=metrics)  # type: ignore[arg-type]
    request = pb.RecordMemoryFeedbackRequest(org_id="7f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f",
                                             memory_ids=["00000000-0000-4000-8000-00000000000a"], feedback="positive")
    with pytest.raises(asyncio.CancelledError):  # the late answer is dropped, never sent
        await service.RecordMemoryFeedback(request, ScriptedContext(0.5, -0.01))  # type: ignore[arg-type]
    assert seen(metrics, "DEADLINE_EXCEEDED") == 1 and seen(metrics, "OK") == 0
