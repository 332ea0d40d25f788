"""One table from failures to HTTP answers: ``{"error": {"code", "message", "field"?, "requestId"?}}``.

| failure                                   | status | code                |
|-------------------------------------------|--------|---------------------|
| InvalidRequestError (bad JSON, fields)    | 400    | INVALID_ARGUMENT    |
| malformed HTTP (``protocol.py``)          | 400/431| INVALID_ARGUMENT    |
| no such path / method                     | 404/405| NOT_FOUND / METHOD_NOT_ALLOWED |
| request headers or body too slow          | 408    | REQUEST_TIMEOUT (connection closed) |
| body over the route's limit               | 413    | PAYLOAD_TOO_LARGE   |
| not application/json                      | 415    | UNSUPPORTED_MEDIA_TYPE |
| client gone before its body came          | 499    | CANCELLED (never delivered; counted) |
| connection cap reached (``protocol.py``)  | 503    | UNAVAILABLE         |
| UnknownModelError                         | 400    | INVALID_ARGUMENT    |
| AuthError unauthenticated / denied        | 401/403| UNAUTHENTICATED / PERMISSION_DENIED |
| MemorySourceDeniedError (upstream 401/403)| 403    | PERMISSION_DENIED   |
| MemorySourceTimeoutError, TimeoutError    | 504    | DEADLINE_EXCEEDED   |
| any other PortError (source failures)     | 503    | UNAVAILABLE         |
| anything else                             | 500    | INTERNAL (request id, no detail; logged) |
"""

from __future__ import annotations

from typing import Any

import attrs

from domain.model.errors import InvalidRequestError, UnknownModelError
from entrypoints.admission import Shed
from entrypoints.auth.errors import PERMISSION_DENIED, AuthError
from ports.errors import MemorySourceDeniedError, MemorySourceTimeoutError, PortError

INVALID_ARGUMENT = "INVALID_ARGUMENT"
NOT_FOUND = "NOT_FOUND"
METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
UNAVAILABLE = "UNAVAILABLE"
RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
REQUEST_TIMEOUT = "REQUEST_TIMEOUT"
CANCELLED = "CANCELLED"
INTERNAL = "INTERNAL"
OK = "OK"
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a request its client abandoned
MAX_ECHO_CHARS = 64


def echo(text: str) -> str:
    """``text`` as an error may quote it: at most MAX_ECHO_CHARS characters, lone surrogates written as
    backslash escapes (so every error renders as UTF-8 JSON)."""
    short = text if len(text) <= MAX_ECHO_CHARS else text[:MAX_ECHO_CHARS] + "..."
    return short.encode("utf-8", "backslashreplace").decode("utf-8")


@attrs.frozen
class ApiError(Exception):
    """A failure already translated for the caller."""

    status: int
    code: str
    message: str
    field: str | None = None
    close: bool = attrs.field(default=False, kw_only=True)  # answer with Connection: close (the body was not read)
    retry_after_s: int | None = attrs.field(default=None, kw_only=True)  # a Retry-After header, seconds

    def body(self, request_id: str = "") -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        if request_id:
            error["requestId"] = request_id
        return {"error": error}


def translate(exc: BaseException) -> ApiError | None:
    """The caller-facing error for a known failure; None for an unexpected one (answer INTERNAL)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, Shed):
        return ApiError(503, RESOURCE_EXHAUSTED, f"not started ({exc.reason}): {exc}", retry_after_s=1)
    if isinstance(exc, InvalidRequestError):
        return ApiError(400, INVALID_ARGUMENT, str(exc), exc.field)
    if isinstance(exc, UnknownModelError):
        return ApiError(400, INVALID_ARGUMENT, str(exc), "model")
    if isinstance(exc, AuthError):
        denied = exc.code == PERMISSION_DENIED
        return ApiError(403 if denied else 401, exc.code.upper(), exc.detail)
    if isinstance(exc, MemorySourceDeniedError):
        # our own credentials were refused upstream: not the caller's fault, and a retry cannot help
        return ApiError(502, "FAILED_PRECONDITION", f"the memory service refused this service's credentials: {exc}")
    if isinstance(exc, MemorySourceTimeoutError | TimeoutError):
        return ApiError(504, "DEADLINE_EXCEEDED", "the memory service did not answer in time")
    if isinstance(exc, PortError):
        return ApiError(503, UNAVAILABLE, f"a backing service is unavailable: {type(exc).__name__}")
    return None


def internal_error() -> ApiError:
    return ApiError(500, INTERNAL, "internal error; quote the request id when reporting it")
