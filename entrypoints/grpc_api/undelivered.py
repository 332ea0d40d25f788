"""Answers grpc-core could not send: counted, and logged as what they are instead of as a crash.

The servicer checks the caller's deadline once the use case returns and drops an answer that is
too late (``servicer``). A deadline can still fire in grpc-core between that check and the send,
and a caller can cancel or its connection drop there too. grpc.aio then fails the send batch and,
when it has not yet heard that the call ended, logs ``ExecuteBatchError raised in core by servicer
method [...]`` at ERROR with a traceback through its own internals: it reads as a server bug, and
the call was counted with the code the servicer produced, usually OK.

``AnswerNotSentFilter`` sits on grpc's ``grpc._cython.cygrpc`` logger. It drops that one record
and, for the call it belongs to, runs the callback the servicer registered for the call
(``watch_call``): the servicer counts the call in ``ibex_context_answers_not_sent_total`` and
logs a WARNING ``grpc_answer_not_sent`` with the call's ids and the code it had counted. grpc logs
the record in the call's own task, after the handler returned, so the call's context (a
``ContextVar``) still holds the callback. A record with no such call, and every other record,
passes as grpc wrote it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar

GRPC_LOGGER = "grpc._cython.cygrpc"
SEND_FAILED_PREFIX = "ExecuteBatchError raised in core by servicer method"

_on_not_sent: ContextVar[Callable[[], None] | None] = ContextVar("ibex_grpc_answer_not_sent", default=None)


def watch_call(on_not_sent: Callable[[], None]) -> None:
    """Run ``on_not_sent`` if grpc fails to send the current call's answer (set in the call's task)."""
    _on_not_sent.set(on_not_sent)


class AnswerNotSentFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.msg, str) or not record.msg.startswith(SEND_FAILED_PREFIX):
            return True
        callback = _on_not_sent.get()
        if callback is None:
            return True  # not one of our calls (or no servicer watching): grpc's record as it is
        _on_not_sent.set(None)  # once per call
        callback()
        return False


def install() -> None:
    """Put the filter on grpc's logger once per process (idempotent)."""
    logger = logging.getLogger(GRPC_LOGGER)
    if not any(isinstance(f, AnswerNotSentFilter) for f in logger.filters):
        logger.addFilter(AnswerNotSentFilter())
