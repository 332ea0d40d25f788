"""uvicorn's h11 protocol with the guards it lacks: a header deadline, a drain bound, a connection cap.

uvicorn bounds idle keep-alive connections (``timeout_keep_alive``) but not a request that
arrives slowly: any byte cancels its timer, so a client sending one byte a second held a
connection for as long as it liked. ``guarded_protocol(...)`` returns an ``H11Protocol``
subclass, passed to ``uvicorn.Config(http=...)``, that adds:

- **header deadline**: a request's line and headers must be complete within ``read_timeout_s`` of
  the connection opening or of the previous answer. Past it: a 408 ``REQUEST_TIMEOUT`` when part
  of a request had come (silence on an idle connection is just closed: a 408 there could be read
  as the answer to a request crossing it), then the connection is closed.
- **body deadline**: the application's body reader (``calls.py``) bounds the body to
  ``read_timeout_s`` once it starts reading and answers 408. A body the application answered
  without reading (a 404, a 413 from ``Content-Length``) is discarded for at most
  ``read_timeout_s`` and ``MAX_DRAIN_BYTES``, then the connection is closed.
- **connection cap**: a connection beyond ``max_connections`` open ones is answered at once with
  503 ``UNAVAILABLE`` and closed; it never reaches the application and does not count.
- **malformed requests**: uvicorn's plain-text 400 becomes the JSON error shape (431 for headers
  over ``h11_max_incomplete_event_size``).

Every one of these answers is ``{"error": {"code", "message", "requestId"}}`` with a fresh request
id (also in ``X-Request-ID``) and is reported through ``on_error(code, status)`` (the app counts it
under the method ``connection``).

Why uvicorn and not another server: it already serves the API on the service's loop (uvloop),
with the TLS options and the log handling the process root relies on; hypercorn, the other
well-kept asyncio server, has a ``read_timeout`` too but it is per read (a byte a second resets
it) and has no connection cap, so it would need the same guards. The protocol hooks used here
(``connection_made``, ``data_received``, ``on_response_complete``, ``send_400_response``) are the
ones uvicorn's own h11 protocol defines; ``tests/e2e/test_http_hostile.py`` exercises each guard.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol

from entrypoints.http_api.errors import INVALID_ARGUMENT, REQUEST_TIMEOUT, UNAVAILABLE, ApiError
from entrypoints.observability.correlation import new_request_id

DEFAULT_MAX_CONNECTIONS = 512
MAX_DRAIN_BYTES = 64 * 1024 * 1024
REFUSAL_LINGER_S = 1.0  # how long a refused connection is read (and discarded) so the answer is not lost to a reset
CONNECTION = "connection"  # the method these answers are counted and logged under
OnError = Callable[[str, int], None]
_log = logging.getLogger("ibex_context.http")

_IDLE, _HEADERS, _APP, _DRAIN, _REFUSED = "idle", "headers", "app", "drain", "refused"


def guarded_protocol(*, read_timeout_s: float, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                     on_error: OnError | None = None) -> type[H11Protocol]:
    """An ``H11Protocol`` class with the guards above, for ``uvicorn.Config(http=...)``."""
    if not read_timeout_s > 0:
        raise ValueError("read_timeout_s must be > 0")
    if max_connections < 1:
        raise ValueError("max_connections must be >= 1")
    settings = {"read_timeout_s": float(read_timeout_s), "max_connections": int(max_connections),
                "on_error": staticmethod(on_error or (lambda code, status: None))}
    return type("GuardedH11Protocol", (_GuardedH11Protocol,), settings)


class _GuardedH11Protocol(H11Protocol):
    read_timeout_s: float
    max_connections: int
    on_error: OnError

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = _IDLE
        self._deadline: asyncio.TimerHandle | None = None
        self._drained = 0

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._refuse()
            return
        self._track()

    def data_received(self, data: bytes) -> None:
        if self._phase == _REFUSED:
            return  # lingering: read and drop until the client closes or the linger ends
        if self._phase == _DRAIN:
            self._drained += len(data)
            if self._drained > MAX_DRAIN_BYTES:
                self._close()
                return
        super().data_received(data)
        self._track()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)

    # ------------------------------------------------------------ uvicorn hooks

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._track()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 cannot parse (called while handling the error)."""
        self._cancel()
        caught = sys.exc_info()[1]
        status = getattr(caught, "error_status_hint", 400)
        detail = f": {caught}" if caught is not None and str(caught) else ""
        error = ApiError(status, INVALID_ARGUMENT, f"the request is not valid HTTP/1.1{detail}")
        self._send_error(error, via_h11=True)

    # ------------------------------------------------------------ deadlines

    def _track(self) -> None:
        """Arm or cancel the deadline for what the connection waits for now."""
        phase = self._current_phase()
        if phase == self._phase:
            return
        self._cancel()
        self._phase = phase
        if phase == _DRAIN:
            self._drained = 0
        if phase in (_HEADERS, _DRAIN):
            self._deadline = self.loop.call_later(self.read_timeout_s, self._expired)

    def _current_phase(self) -> str:
        if self.transport.is_closing():
            return _IDLE
        client = self.conn.their_state
        if client is h11.IDLE:
            return _HEADERS
        if client is h11.SEND_BODY:
            return _DRAIN if self.cycle is not None and self.cycle.response_complete else _APP
        return _IDLE  # the request is in; the application (and its own deadlines) has it

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self._phase == _HEADERS and self.conn.trailing_data[0] and self.conn.our_state is h11.IDLE:
            error = ApiError(408, REQUEST_TIMEOUT, f"the request headers did not arrive within "
                             f"{self.read_timeout_s:g} s")
            self._send_error(error, via_h11=False)
            return
        self._close()

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    # ------------------------------------------------------------ answers

    def _refuse(self) -> None:
        self.connections.discard(self)
        self._phase = _REFUSED
        error = ApiError(503, UNAVAILABLE, f"the server has its maximum of {self.max_connections} HTTP connections "
                         "open; retry later")
        self._send_error(error, via_h11=False, linger=True)

    def _send_error(self, error: ApiError, *, via_h11: bool, linger: bool = False) -> None:
        request_id = new_request_id()
        body = json.dumps(error.body(request_id), separators=(",", ":")).encode("utf-8")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("ascii")),
                   (b"x-request-id", request_id.encode("ascii")), (b"connection", b"close")]
        if via_h11:  # h11 has seen (part of) a request and can frame the answer
            output = self.conn.send(h11.Response(status_code=error.status, headers=headers,
                                                 reason=STATUS_PHRASES[error.status]))
            output = (output or b"") + (self.conn.send(h11.Data(data=body)) or b"")
            output += self.conn.send(h11.EndOfMessage()) or b""
        else:  # no request to answer in h11's eyes: the bytes of a whole response, then close
            head = b"HTTP/1.1 %d %s\r\n" % (error.status, STATUS_PHRASES[error.status])
            output = head + b"".join(b"%s: %s\r\n" % pair for pair in headers) + b"\r\n" + body
        self.transport.write(output)
        self.on_error(error.code, error.status)
        _log.info("http_request", extra={"method": CONNECTION, "code": error.code, "status": error.status,
                                         "latency_ms": 0.0, "request_id": request_id, "detail": error.message})
        if linger and self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(REFUSAL_LINGER_S, self._close)
        else:
            self._close()

    def _close(self) -> None:
        self._cancel()
        if not self.transport.is_closing():
            self.transport.close()
