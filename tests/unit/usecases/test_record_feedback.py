from __future__ import annotations

import pytest

from domain.model.errors import InvalidRequestError
from domain.model.feedback import FeedbackResult
from domain.model.operations import FeedbackRequest
from domain.usecases.record_feedback import FeedbackConfig, RecordMemoryFeedback, idempotency_key
from ports.errors import MemoryNotFoundError, MemorySourceDeniedError, MemorySourceTimeoutError, MemorySourceUnavailableError
from tests.fakes.nonce_source import FixedNonceSource
from tests.unit.usecases.scripted import ORG, RealTimeClock, ScriptedFeedbackSink

A = "00000000-0000-4000-8000-00000000000a"
B = "00000000-0000-4000-8000-00000000000b"
C = "00000000-0000-4000-8000-00000000000c"
FAST = FeedbackConfig(attempt_timeout_s=0.1, max_attempts=3, backoff_s=0.001)


def ok(memory_id: str, score: float = 0.6) -> FeedbackResult:
    return FeedbackResult(memory_id, "positive", score, 1, 0, previous_usefulness_score=0.5)


def use_case(sink: ScriptedFeedbackSink) -> RecordMemoryFeedback:
    return RecordMemoryFeedback(sink=sink, clock=RealTimeClock(), nonces=FixedNonceSource("n0nce"), config=FAST)


async def test_every_id_gets_an_update_or_an_explicit_failure() -> None:
    sink = ScriptedFeedbackSink({A: [ok(A)], B: [MemoryNotFoundError("no such memory", 404)], C: [MemorySourceDeniedError("no", 403)]})
    outcome = await use_case(sink).execute(FeedbackRequest(ORG, (A, B, C), "positive", trace_id="t-1"))
    assert outcome.success is False
    by_id = {u.memory_id: u for u in outcome.updates}
    assert (by_id[A].error, by_id[A].previous_score, by_id[A].new_score) == ("", 0.5, 0.6)
    assert by_id[B].error == "not_found" and by_id[C].error == "denied"


async def test_transient_failures_are_retried_with_the_same_idempotency_key() -> None:
    sink = ScriptedFeedbackSink({A: [MemorySourceTimeoutError("slow"), MemorySourceUnavailableError("503", 503), ok(A)]})
    outcome = await use_case(sink).execute(FeedbackRequest(ORG, (A,), "positive", trace_id="trace-9"))
    assert outcome.success is True
    keys = {call.idempotency_key for call in sink.calls}
    assert len(sink.calls) == 3 and keys == {idempotency_key("trace-9", A, "positive")}


async def test_retries_are_bounded() -> None:
    sink = ScriptedFeedbackSink({A: [MemorySourceUnavailableError("down")] * 5})
    outcome = await use_case(sink).execute(FeedbackRequest(ORG, (A,), "negative"))
    assert len(sink.calls) == 3
    assert outcome.success is False and outcome.updates[0].error == "unavailable after 3 attempts"


def test_idempotency_key_depends_on_trace_memory_and_feedback() -> None:
    base = idempotency_key("t", A, "positive")
    assert base == idempotency_key("t", A, "positive")
    assert len({base, idempotency_key("t2", A, "positive"), idempotency_key("t", B, "positive"), idempotency_key("t", A, "negative")}) == 4


async def test_invalid_requests_are_rejected_before_any_write() -> None:
    sink = ScriptedFeedbackSink({})
    with pytest.raises(InvalidRequestError):
        await use_case(sink).execute(FeedbackRequest(ORG, (A,), "meh"))
    assert sink.calls == []


async def test_no_attempt_starts_past_the_caller_deadline() -> None:
    sink = ScriptedFeedbackSink({A: [MemorySourceTimeoutError("slow")] * 5})
    outcome = await use_case(sink).execute(FeedbackRequest(ORG, (A,), "positive", deadline_s=0.0))
    assert sink.calls == []
    assert outcome.success is False and "caller deadline" in outcome.updates[0].error
