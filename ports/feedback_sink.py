"""Port: where feedback on used memories is recorded."""

from __future__ import annotations

from abc import abstractmethod
from typing import Protocol

from domain.model.feedback import FeedbackItem, FeedbackResult


class FeedbackSink(Protocol):
    @abstractmethod
    async def record(self, item: FeedbackItem, *, timeout_s: float) -> FeedbackResult:
        """Apply one feedback write and return the memory's new usefulness figures.

        Writes carrying the same ``idempotency_key`` are applied at most once: a retry returns
        the figures of the first application.

        Raises:
            MemoryNotFoundError: no such memory for ``item.org_id``.
            MemorySourceDeniedError: the credentials were refused.
            MemorySourceTimeoutError: no answer within ``timeout_s`` seconds.
            MemorySourceUnavailableError: transport failure or an undecodable response.
        """
