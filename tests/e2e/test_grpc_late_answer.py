"""An answer that is ready only after the caller's deadline, or that grpc-core cannot send, over real gRPC on loopback.

The condition is made by the test: the use case works (synchronously, as an assembly's CPU-bound
part does) for longer than what is left of the caller's deadline when it starts, so grpc cannot cancel it on the way and
its answer is ready only once the deadline has passed. The caller sees DEADLINE_EXCEEDED, the
service counts the call DEADLINE_EXCEEDED (never OK), and nothing is logged as an error. (The
servicer drops such an answer instead of sending it: when grpc-core has ended the call but the
event loop has not yet heard of it, a send fails and grpc logs an ERROR with a traceback. That
ordering is grpc's and no test can force it; this one pins what the caller and the metrics see.)
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc
import pytest

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from domain.model.operations import FeedbackOutcome, FeedbackRequest, ScoreUpdate
from entrypoints.grpc_api.server import build_server
from entrypoints.grpc_api.servicer import ContextAssemblyServicer
from entrypoints.observability.metrics import ServiceMetrics
from tests.e2e.tenant import ORG_ID
from tests.support.polling import until

pytestmark = pytest.mark.e2e


# The deadline is long enough that the call reaches the use case on any machine (a call seen with
# its deadline already spent never starts). The work then lasts what was left of the deadline when
# the call started, and a little more, so its answer is late however late the call started.
DEADLINE_S = 2.0
PAST_DEADLINE_S = 0.2


class SlowFeedback:
    def __init__(self) -> None:
        self.answered = 0

    async def execute(self, request: FeedbackRequest) -> FeedbackOutcome:
        assert request.deadline_s is not None  # the servicer passes the caller's remaining deadline
        # Holds the event loop: no cancellation can reach this call before it returns.
        time.sleep(request.deadline_s + PAST_DEADLINE_S)
        self.answered += 1
        return FeedbackOutcome(success=True, updates=())


def requests_seen(metrics: ServiceMetrics, code: str) -> float:
    value = metrics.registry.get_sample_value(
        "ibex_context_requests_total", {"surface": "grpc", "method": "RecordMemoryFeedback", "code": code})
    return value or 0.0


async def test_an_answer_ready_after_the_deadline_is_dropped_and_counted_deadline_exceeded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics, feedback = ServiceMetrics(), SlowFeedback()
    servicer = ContextAssemblyServicer(assemble=object(), search=object(), feedback=feedback,  # type: ignore[arg-type]
                                       metrics=metrics)
    server, port = build_server(servicer, "127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ContextAssemblyServiceStub(channel)
            request = pb.RecordMemoryFeedbackRequest(org_id=ORG_ID, memory_ids=["00000000-0000-4000-8000-00000000000a"],
                                                     feedback="positive")
            with caplog.at_level(logging.DEBUG, logger="grpc"):
                with pytest.raises(grpc.aio.AioRpcError) as error:
                    await stub.RecordMemoryFeedback(request, timeout=DEADLINE_S)
                assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                await until(lambda: requests_seen(metrics, "DEADLINE_EXCEEDED") == 1, "the late call counted")
                await asyncio.sleep(0)  # grpc's own handling of the handler's end has run
        assert feedback.answered == 1 and requests_seen(metrics, "OK") == 0
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    finally:
        await server.drain(0)


class FeedbackWithALongAnswer:
    """Answers at once, with more bytes than the test's server may send."""

    async def execute(self, request: FeedbackRequest) -> FeedbackOutcome:
        return FeedbackOutcome(success=True, updates=tuple(
            ScoreUpdate(memory_id, previous_score=0.5, new_score=0.6) for memory_id in request.memory_ids))


def answers_not_sent(metrics: ServiceMetrics, counted_code: str) -> float:
    value = metrics.registry.get_sample_value("ibex_context_answers_not_sent_total", {
        "surface": "grpc", "method": "RecordMemoryFeedback", "counted_code": counted_code})
    return value or 0.0


async def test_an_answer_grpc_core_cannot_send_is_counted_and_logged_as_not_sent_not_as_a_grpc_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The condition is forced: the server may send at most 64 bytes, the answer is longer, so grpc-core
    # fails the send while grpc.aio still believes the call open. That is the path a deadline firing in
    # core between the servicer's deadline check and the send takes (see the module docstring).
    metrics = ServiceMetrics()
    servicer = ContextAssemblyServicer(assemble=object(), search=object(), feedback=FeedbackWithALongAnswer(),  # type: ignore[arg-type]
                                       metrics=metrics)
    server, port = build_server(servicer, "127.0.0.1:0", extra_options=[("grpc.max_send_message_length", 64)])
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ContextAssemblyServiceStub(channel)
            ids = [f"00000000-0000-4000-8000-00000000000{i}" for i in range(4)]
            request = pb.RecordMemoryFeedbackRequest(org_id=ORG_ID, memory_ids=ids, feedback="positive")
            with caplog.at_level(logging.DEBUG):
                with pytest.raises(grpc.aio.AioRpcError) as error:
                    await stub.RecordMemoryFeedback(request, timeout=DEADLINE_S)
                assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # what core told the caller
                await until(lambda: answers_not_sent(metrics, "OK") == 1, "the answer counted as not sent")
        assert requests_seen(metrics, "OK") == 1  # what the servicer produced, as counted when it returned
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
        warnings = [r for r in caplog.records if r.getMessage() == "grpc_answer_not_sent"]
        assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
        assert warnings[0].method == "RecordMemoryFeedback" and warnings[0].counted_code == "OK"  # type: ignore[attr-defined]
        assert warnings[0].call_id  # type: ignore[attr-defined]
    finally:
        await server.drain(0)
