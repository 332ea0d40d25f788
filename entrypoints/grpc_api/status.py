"""The gRPC edge's error table: which status code and message each failure becomes.

| failure                                   | status                                         |
|-------------------------------------------|------------------------------------------------|
| AuthError (caller authentication)         | UNAUTHENTICATED / PERMISSION_DENIED,           |
|                                           | "<reason>: <description>"                      |
| InvalidRequestError (also undecodable     | INVALID_ARGUMENT, message names the field      |
| bytes: field ``request``)                 |                                                |
| UnknownModelError                         | INVALID_ARGUMENT, message names the model and  |
|                                           | lists the known ones                           |
| memory source timed out (SearchMemories)  | DEADLINE_EXCEEDED when the caller's own        |
|                                           | deadline is (nearly) spent, else UNAVAILABLE   |
| memory source refused our credentials     | FAILED_PRECONDITION: the service is            |
|                                           | misconfigured; the caller is not the one       |
|                                           | denied and a retry cannot help                 |
| memory source unreachable / 5xx / closed  | UNAVAILABLE (retryable)                        |
| directive store failure (never expected:  | UNAVAILABLE                                    |
| the assembly degrades instead)            |                                                |
| caller cancelled                          | CANCELLED (recorded; the caller is gone)       |
| deadline expired before the call started  | DEADLINE_EXCEEDED                              |
| anything else                             | INTERNAL "internal error (call_id=...)";      |
|                                           | the stack trace goes to the logs only          |
"""

from __future__ import annotations

import attrs
import grpc

from domain.model.errors import InvalidRequestError, UnknownModelError
from entrypoints.admission import Shed
from entrypoints.auth.errors import AuthError
from entrypoints.auth.grpc_auth import grpc_status
from ports.errors import (
    DirectiveStoreError,
    MemorySourceDeniedError,
    MemorySourceError,
    MemorySourceTimeoutError,
)

# A source timeout with at most (headroom + this) of the caller's time left is the caller's deadline at work.
CALLER_DEADLINE_SLACK_S = 0.005


class DeadlineExpiredError(Exception):
    """The caller's deadline had already passed when the call reached the servicer."""


@attrs.frozen
class Failure:
    code: grpc.StatusCode
    message: str


def failure_for(exc: Exception, *, remaining_s: float | None, call_id: str, headroom_s: float = 0.005) -> Failure:
    """The status a failed call answers with (see the module table).

    Args:
        exc: what the use case raised.
        remaining_s: the caller's remaining time when the failure was seen (None: no deadline).
        headroom_s: what the use cases keep back from the caller's deadline (their timeouts end there).
        call_id: this call's id, echoed in INTERNAL messages so a caller's report can be matched to the logs.
    """
    if isinstance(exc, AuthError):
        return Failure(grpc_status(exc), exc.detail)
    if isinstance(exc, Shed):
        return Failure(grpc.StatusCode.RESOURCE_EXHAUSTED, f"not started ({exc.reason}): {exc}")
    if isinstance(exc, DeadlineExpiredError):
        return Failure(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline expired before the call started")
    if isinstance(exc, InvalidRequestError):
        message = str(exc)
        return Failure(grpc.StatusCode.INVALID_ARGUMENT, message if exc.field in message else f"{exc.field}: {message}")
    if isinstance(exc, UnknownModelError):
        return Failure(grpc.StatusCode.INVALID_ARGUMENT, f"model: {exc}")
    if isinstance(exc, MemorySourceTimeoutError):
        if remaining_s is not None and remaining_s <= headroom_s + CALLER_DEADLINE_SLACK_S:
            return Failure(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded while searching memories")
        return Failure(grpc.StatusCode.UNAVAILABLE, f"memory source timed out: {exc}")
    if isinstance(exc, MemorySourceDeniedError):
        return Failure(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the memory service refused this service's credentials (HTTP {exc.status_code or '?'}); "
            "check IBEX_CONTEXT_MEMORY_API_TOKEN",
        )
    if isinstance(exc, (MemorySourceError, DirectiveStoreError)):
        return Failure(grpc.StatusCode.UNAVAILABLE, f"backend unavailable: {exc}")
    return Failure(grpc.StatusCode.INTERNAL, f"internal error (call_id={call_id})")
