"""The HTTP JSON API: the three use cases in the proto3 JSON mapping, health, readiness, metrics.

Routes:
- ``POST /v1/context:assemble`` (AssembleContextRequest -> AssembleContextResponse)
- ``POST /v1/memories:search`` (SearchMemoriesRequest -> SearchMemoriesResponse)
- ``POST /v1/memories:feedback`` (RecordMemoryFeedbackRequest -> RecordMemoryFeedbackResponse)
- ``GET /healthz`` (200 ``{"status": "ok"}`` while the process serves)
- ``GET /readyz`` (200 ``{"status": "ready"}`` when ``readiness()`` is true, else 503 ``not_ready``)
- ``GET /metrics`` (Prometheus text format)

Errors are ``{"error": {"code", "message", "field"?, "requestId"}}`` (table in ``errors.py``);
unknown paths answer 404 ``NOT_FOUND``, wrong methods 405 ``METHOD_NOT_ALLOWED`` with ``Allow``,
anything that escapes a handler 500 ``INTERNAL``: every answer of the app, and every error the
HTTP/1.1 layer sends itself (``protocol.py``: malformed requests, slow headers, the connection
cap), is that JSON shape with a request id.
Every API call has one request id (``calls.py``): the caller's, else a generated UUID4; it is in
the answer (``requestId`` of AssembleContextResponse and of errors, the ``X-Request-ID`` header)
and in the call's ``http_request`` log line.
Every API call is counted (``observe_request("http", <RPC name>, <code>, seconds)``, ``in_flight``);
so are the other errors, under the method ``unrouted`` (404, 405), ``unhandled`` (500 outside a
handler) or ``connection`` (the HTTP/1.1 layer's own).
Bodies: each route reads at most its limit (``limits.py``) within ``read_timeout_s``; its
``BodyDecoder`` checks the body's shape at a bounded cost (``body_json.py``) and then builds the
generated request message with ``json_format`` (``proto_json.py``). The message is translated to
the use case's request and the result back to the response message by ``entrypoints.translation``,
as on the gRPC edge, and the response message is rendered with ``json_format`` (``proto_json.render``).
Tracing (``observability.tracing``): each API call is one SERVER span, current for the call and
its log line, child of the W3C ``traceparent``/``tracestate`` headers (with tracing off, that
context is only passed on downstream and logged); the body's ``traceId`` is logged as
``request_trace_id``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from contracts.ibex.context.v1 import context_pb2 as pb
from domain.usecases.assemble_context import AssembleContext
from domain.usecases.record_feedback import RecordMemoryFeedback
from domain.usecases.search_memories import SearchMemories
from entrypoints.admission import Admission
from entrypoints.auth.binding import Tenant
from entrypoints.auth.http_auth import HttpAuthenticator
from entrypoints.auth.principal import VerifiedPrincipal
from entrypoints import translation
from entrypoints.http_api.body_json import BodyDecoder
from entrypoints.http_api.calls import DEFAULT_READ_TIMEOUT_S, ApiCall
from entrypoints.http_api.errors import METHOD_NOT_ALLOWED, NOT_FOUND, OK, ApiError, echo, internal_error, translate
from entrypoints.http_api.limits import body_limit
from entrypoints.http_api.proto_json import render
from entrypoints.http_api.protocol import CONNECTION
from entrypoints.observability.metrics import ServiceMetrics
from entrypoints.observability.tracing import EDGE_OFF, EdgeTracing, annotate_assembly, annotate_request_ids

SURFACE = "http"
UNROUTED = "unrouted"
UNHANDLED = "unhandled"
Readiness = Callable[[], bool]
Handler = Callable[[ApiCall], Awaitable[dict[str, Any]]]
DECODERS = {"AssembleContext": BodyDecoder(pb.AssembleContextRequest),  # by RPC name
            "SearchMemories": BodyDecoder(pb.SearchMemoriesRequest),
            "RecordMemoryFeedback": BodyDecoder(pb.RecordMemoryFeedbackRequest)}

_log = logging.getLogger("ibex_context.http")


def make_app(
    *,
    assemble: AssembleContext,
    search: SearchMemories,
    feedback: RecordMemoryFeedback,
    metrics: ServiceMetrics,
    readiness: Readiness,
    authenticator: HttpAuthenticator | None = None,
    admission: Admission | None = None,
    max_body_bytes: int | None = None,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    tracing: EdgeTracing = EDGE_OFF,
) -> Starlette:
    """Build the ASGI app.

    Args:
        assemble, search, feedback: the use cases (anything with ``async execute(request)``).
        metrics: the process's ServiceMetrics (shared with the gRPC edge).
        readiness: true when the application is open and not draining.
        authenticator: verifies the caller's signed principal (``AuthError``: 401) and binds the
            request's org/agent ids to it (``AuthError``: 403), counting every refusal. None: no
            caller auth (the request's own ids).
        max_body_bytes: larger request bodies answer 413; None: each route's own limit (``limits.py``).
        read_timeout_s: a body that has not fully arrived this long after its handler started
            reading answers 408 (the HTTP/1.1 layer bounds the headers, ``protocol.py``).
        tracing: the edges' server spans (``observability.tracing``); off by default.
    """
    api = _Api(assemble, search, feedback, metrics, authenticator, max_body_bytes, read_timeout_s, tracing, admission)
    routes = [
        Route("/v1/context:assemble", api.endpoint("AssembleContext", api.assemble), methods=["POST"]),
        Route("/v1/memories:search", api.endpoint("SearchMemories", api.search), methods=["POST"]),
        Route("/v1/memories:feedback", api.endpoint("RecordMemoryFeedback", api.feedback), methods=["POST"]),
        Route("/healthz", _healthz, methods=["GET"]),
        Route("/readyz", _readyz(readiness), methods=["GET"]),
        Route("/metrics", _metrics(metrics), methods=["GET"]),
    ]
    fallback = _Fallback(metrics)
    return Starlette(routes=routes, exception_handlers={HTTPException: fallback.routing_error,
                                                        Exception: fallback.unhandled})


_ROUTES = {"AssembleContext": "/v1/context:assemble", "SearchMemories": "/v1/memories:search",
           "RecordMemoryFeedback": "/v1/memories:feedback"}  # the server spans' routes


class _Api:
    def __init__(self, assemble: AssembleContext, search: SearchMemories, feedback: RecordMemoryFeedback,
                 metrics: ServiceMetrics, authenticator: HttpAuthenticator | None, max_body_bytes: int | None,
                 read_timeout_s: float, tracing: EdgeTracing = EDGE_OFF, admission: Admission | None = None) -> None:
        self.tracing = tracing
        self._admission = admission
        self._assemble, self._search, self._feedback = assemble, search, feedback
        self._metrics = metrics
        self._authenticator = authenticator
        self._max_body_bytes = max_body_bytes
        self._read_timeout_s = read_timeout_s

    def endpoint(self, method: str, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        decoder = DECODERS[method]
        limit = self._max_body_bytes if self._max_body_bytes is not None else body_limit(decoder.descriptor)
        route = _ROUTES[method]

        async def serve(request: Request) -> Response:
            with self.tracing.http_call(method, "POST", route, request.headers) as span:
                started = time.perf_counter()
                call = ApiCall(request, limit, self._read_timeout_s)
                with self._metrics.in_flight(SURFACE):
                    response, code = await _answer(call, method, handler)
                elapsed = time.perf_counter() - started
                self._metrics.observe_request(SURFACE, method, code, elapsed)
                annotate_request_ids(call.request_id, call.trace_id)
                span.http_status(response.status_code, code)
                _log_request(method, code, response.status_code, elapsed, call)
                return response
        return serve

    async def assemble(self, call: ApiCall) -> dict[str, Any]:
        principal = self._principal(call)  # before the body is read
        message = await call.read_message(DECODERS["AssembleContext"])
        request_id = call.correlate(message.request_id, message.trace_id)
        tenant = self._tenant(principal, message.org_id, message.agent_id)
        domain = translation.assemble_request_from_proto(message, tenant=tenant, request_id=request_id)
        if self._admission is None:
            result = await self._assemble.execute(domain)
        else:
            async with self._admission.slot(SURFACE, None):  # HTTP callers send no deadline
                result = await self._assemble.execute(domain)
        self._metrics.observe_assembly(result)
        annotate_assembly(result)
        return render(translation.assembly_to_proto(result))

    async def search(self, call: ApiCall) -> dict[str, Any]:
        principal = self._principal(call)
        message = await call.read_message(DECODERS["SearchMemories"])
        request_id = call.correlate("")
        tenant = self._tenant(principal, message.org_id, message.agent_id)
        result = await self._search.execute(
            translation.search_request_from_proto(message, tenant=tenant, request_id=request_id))
        return render(translation.search_to_proto(result))

    async def feedback(self, call: ApiCall) -> dict[str, Any]:
        principal = self._principal(call)
        message = await call.read_message(DECODERS["RecordMemoryFeedback"])
        request_id = call.correlate("", message.trace_id)
        org_id = None if principal is None else self._bind(principal, org_id=message.org_id).org_id
        outcome = await self._feedback.execute(
            translation.feedback_request_from_proto(message, org_id=org_id, request_id=request_id))
        self._metrics.observe_feedback(outcome)
        return render(translation.feedback_to_proto(outcome))

    def _tenant(self, principal: VerifiedPrincipal | None, org_id: str, agent_id: str) -> tuple[str, str] | None:
        """The (org_id, agent_id) admitted for the call; None without caller auth (the request's own)."""
        if principal is None:
            return None
        tenant = self._bind(principal, org_id=org_id, agent_id=agent_id)
        return tenant.org_id, tenant.agent_id

    def _bind(self, principal: VerifiedPrincipal, *, org_id: str, agent_id: str | None = None) -> Tenant:
        """The authenticator's binding (a refusal is counted there, like every auth failure)."""
        assert self._authenticator is not None  # a principal only comes from it
        return self._authenticator.authorize(principal, org_id=org_id, agent_id=agent_id)

    def _principal(self, call: ApiCall) -> VerifiedPrincipal | None:
        return None if self._authenticator is None else self._authenticator.authenticate(call.request.headers)


async def _answer(call: ApiCall, method: str, handler: Handler) -> tuple[Response, str]:
    """Run one handler; every failure becomes the error shape (unexpected ones are logged)."""
    try:
        return call.respond(200, await handler(call)), OK
    except Exception as exc:
        error = translate(exc)
        if error is None:
            _log.exception("http_internal_error", extra={
                "method": method, "request_id": call.request_id, "request_trace_id": call.trace_id})
            error = internal_error()
        headers = {"connection": "close"} if error.close else {}
        if error.retry_after_s is not None:
            headers["retry-after"] = str(error.retry_after_s)
        return call.respond(error.status, error.body(call.request_id), headers), error.code


def count_connection_errors(metrics: ServiceMetrics) -> Callable[[str, int], None]:
    """``on_error`` for ``protocol.guarded_protocol``: the HTTP/1.1 layer's own answers, counted."""
    def count(code: str, _status: int) -> None:
        metrics.observe_request(SURFACE, CONNECTION, code, 0.0)
    return count


def _log_request(method: str, code: str, status: int, elapsed: float, call: ApiCall) -> None:
    _log.log(logging.DEBUG if code == OK else logging.INFO, "http_request", extra={
        "method": method, "code": code, "status": status, "latency_ms": round(elapsed * 1000, 3),
        "request_id": call.request_id, "request_trace_id": call.trace_id,
    })


async def _healthz(_request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def _readyz(readiness: Readiness) -> Callable[[Request], Awaitable[Response]]:
    async def readyz(_request: Request) -> Response:
        try:
            ready = bool(readiness())
        except Exception:
            _log.exception("readiness_check_failed")
            ready = False
        return JSONResponse({"status": "ready" if ready else "not_ready"}, status_code=200 if ready else 503)
    return readyz


def _metrics(metrics: ServiceMetrics) -> Callable[[Request], Awaitable[Response]]:
    async def render(_request: Request) -> Response:
        body, content_type = metrics.render()
        return Response(body, headers={"content-type": content_type})
    return render


class _Fallback:
    """Answers for requests no API handler answered: in the error shape, with a request id, counted."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self._metrics = metrics

    async def routing_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        path = echo(request.url.path)
        if exc.status_code == 405:
            error = ApiError(405, METHOD_NOT_ALLOWED, f"{echo(request.method)} is not allowed on {path}")
        elif exc.status_code == 404:
            error = ApiError(404, NOT_FOUND, f"no route for {echo(request.method)} {path}")
        else:
            error = ApiError(exc.status_code, "HTTP_" + str(exc.status_code), echo(str(exc.detail)))
        return self._answer(request, UNROUTED, error, dict(exc.headers or {}))

    async def unhandled(self, request: Request, exc: Exception) -> Response:
        call = ApiCall(request)
        _log.error("http_internal_error", exc_info=exc, extra={"method": UNHANDLED, "request_id": call.request_id})
        return self._answer(request, UNHANDLED, internal_error(), {}, call)

    def _answer(self, request: Request, method: str, error: ApiError, headers: dict[str, str],
                call: ApiCall | None = None) -> Response:
        call = call or ApiCall(request)
        response = call.respond(error.status, error.body(call.request_id), headers)
        self._metrics.observe_request(SURFACE, method, error.code, 0.0)
        _log_request(method, error.code, error.status, 0.0, call)
        return response
