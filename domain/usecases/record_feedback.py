"""RecordMemoryFeedback: every id gets an update or an explicit failure; nothing is lost silently.

Rules: ids are deduplicated; each id is written independently (bounded concurrency) with bounded
retries on timeouts and unavailability, every attempt carrying the same idempotency key derived
from (trace id, memory id, feedback) so a retried write cannot count twice (with no trace id, the
request id, else a fresh per-call nonce, stands in). Not-found and denied are final; no attempt
starts past the caller's deadline. ``success`` is False when any id failed.
"""

from __future__ import annotations

import asyncio
import hashlib

import attrs

from domain.model.feedback import FeedbackItem
from domain.model.operations import FeedbackFailure, FeedbackOutcome, FeedbackRequest, ScoreUpdate
from domain.usecases.validation import validate_feedback
from ports.clock import Clock
from ports.errors import (
    MemoryNotFoundError,
    MemorySourceDeniedError,
    MemorySourceError,
    MemorySourceTimeoutError,
    MemorySourceUnavailableError,
)
from ports.feedback_sink import FeedbackSink
from ports.nonce_source import NonceSource


@attrs.frozen
class FeedbackConfig:
    attempt_timeout_s: float = 0.5
    max_attempts: int = 3
    backoff_s: float = 0.02
    concurrency: int = 8


def idempotency_key(correlation: str, memory_id: str, feedback: str) -> str:
    digest = hashlib.sha256(f"{correlation}\x1f{memory_id}\x1f{feedback}".encode()).hexdigest()
    return f"ibex-fb-{digest[:48]}"


class RecordMemoryFeedback:
    def __init__(
        self, *, sink: FeedbackSink, clock: Clock, nonces: NonceSource, config: FeedbackConfig = FeedbackConfig()
    ) -> None:
        self._sink = sink
        self._clock = clock
        self._nonces = nonces
        self._config = config

    async def execute(self, request: FeedbackRequest) -> FeedbackOutcome:
        request = validate_feedback(request)
        correlation = request.trace_id or request.request_id or self._nonces.new_nonce(16)
        limit = asyncio.Semaphore(max(1, self._config.concurrency))

        deadline = None if request.deadline_s is None else self._clock.monotonic() + request.deadline_s

        async def one(memory_id: str) -> ScoreUpdate:
            async with limit:
                key = idempotency_key(correlation, memory_id, request.feedback)
                return await self._write(request, memory_id, key, deadline)

        updates = await asyncio.gather(*(one(memory_id) for memory_id in request.memory_ids))
        return FeedbackOutcome(success=all(not u.error for u in updates), updates=tuple(updates))

    def _attempt_timeout(self, deadline: float | None) -> float:
        if deadline is None:
            return self._config.attempt_timeout_s
        return min(self._config.attempt_timeout_s, deadline - self._clock.monotonic())

    async def _write(self, request: FeedbackRequest, memory_id: str, key: str, deadline: float | None) -> ScoreUpdate:
        item = FeedbackItem(
            org_id=request.org_id, memory_id=memory_id, feedback=request.feedback, idempotency_key=key,
            session_id=request.session_id or None, trace_id=request.trace_id or None, notes=request.notes,
        )
        error = FeedbackFailure.UNAVAILABLE
        for attempt in range(self._config.max_attempts):
            timeout_s = self._attempt_timeout(deadline)
            if timeout_s <= 0:
                return ScoreUpdate.failed(memory_id, error, f"; caller deadline reached after {attempt} attempts")
            try:
                result = await self._sink.record(item, timeout_s=timeout_s)
            except MemoryNotFoundError:
                return ScoreUpdate.failed(memory_id, FeedbackFailure.NOT_FOUND)
            except MemorySourceDeniedError:
                return ScoreUpdate.failed(memory_id, FeedbackFailure.DENIED)
            except (MemorySourceTimeoutError, TimeoutError):
                error = FeedbackFailure.TIMEOUT
            except MemorySourceUnavailableError:
                error = FeedbackFailure.UNAVAILABLE
            except MemorySourceError as exc:
                return ScoreUpdate.failed(memory_id, FeedbackFailure.FAILED, f": {exc}")
            else:
                previous = result.previous_usefulness_score
                return ScoreUpdate(memory_id, 0.0 if previous is None else previous, result.new_usefulness_score)
            if attempt + 1 < self._config.max_attempts:
                await asyncio.sleep(self._config.backoff_s * (2**attempt))
        return ScoreUpdate.failed(memory_id, error, f" after {self._config.max_attempts} attempts")
