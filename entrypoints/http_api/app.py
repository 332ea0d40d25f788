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
Bodies: each route reads at most its limit (``limits.py``) within ``read_timeout_s`` and decodes
with its ``BodyDecoder`` (``body_json.py``).
Tracing (``observability.tracing``): each API call is one SERVER span, current for the call and
its log line, child of the W3C ``traceparent``/``tracestate`` headers (with tracing off, that
context is only passed on downstream and logged); the body's ``traceId`` is logged as
``request_trace_id``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from domain.model.operations import FeedbackOutcome
from domain.usecases.assemble_context import AssembleContext
from domain.usecases.record_feedback import RecordMemoryFeedback
from domain.usecases.search_memories import SearchMemories
from entrypoints.auth.binding import Tenant, bind_request
from entrypoints.auth.errors import AuthError
from entrypoints.auth.principal import VerifiedPrincipal
from entrypoints.http_api import messages, schemas
from entrypoints.http_api.body_json import BodyDecoder
from entrypoints.http_api.calls import DEFAULT_READ_TIMEOUT_S, ApiCall
from entrypoints.http_api.errors import METHOD_NOT_ALLOWED, NOT_FOUND, OK, ApiError, internal_error, translate
from entrypoints.http_api.json_mapping import echo
from entrypoints.http_api.limits import body_limit
from entrypoints.http_api.protocol import CONNECTION
from entrypoints.observability.metrics import ServiceMetrics
from entrypoints.observability.tracing import EDGE_OFF, EdgeTracing, annotate_assembly, annotate_request_ids

SURFACE = "http"
UNROUTED = "unrouted"
UNHANDLED = "unhandled"
Readiness = Callable[[], bool]
Authenticate = Callable[[Mapping[str, str]], VerifiedPrincipal | None]
Handler = Callable[[ApiCall], Awaitable[dict[str, Any]]]
DECODERS = {spec.name: BodyDecoder(spec) for spec in (
    messages.ASSEMBLE_CONTEXT_REQUEST, messages.SEARCH_MEMORIES_REQUEST, messages.RECORD_MEMORY_FEEDBACK_REQUEST)}

_log = logging.getLogger("ibex_context.http")


def make_app(
    *,
    assemble: AssembleContext,
    search: SearchMemories,
    feedback: RecordMemoryFeedback,
    metrics: ServiceMetrics,
    readiness: Readiness,
    authenticate: Authenticate | None = None,
    max_body_bytes: int | None = None,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    tracing: EdgeTracing = EDGE_OFF,
) -> Starlette:
    """Build the ASGI app.

    Args:
        assemble, search, feedback: the use cases (anything with ``async execute(request)``).
        metrics: the process's ServiceMetrics (shared with the gRPC edge).
        readiness: true when the application is open and not draining.
        authenticate: ``authenticate(headers)`` -> the verified principal, or None when no
            principal keys are configured; raises ``AuthError`` (401/403). With a principal, the
            request's org/agent ids must match it (``bind_request``). None: no caller auth.
        max_body_bytes: larger request bodies answer 413; None: each route's own limit (``limits.py``).
        read_timeout_s: a body that has not fully arrived this long after its handler started
            reading answers 408 (the HTTP/1.1 layer bounds the headers, ``protocol.py``).
        tracing: the edges' server spans (``observability.tracing``); off by default.
    """
    api = _Api(assemble, search, feedback, metrics, authenticate, max_body_bytes, read_timeout_s, tracing)
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


_SPECS = {"AssembleContext": messages.ASSEMBLE_CONTEXT_REQUEST, "SearchMemories": messages.SEARCH_MEMORIES_REQUEST,
          "RecordMemoryFeedback": messages.RECORD_MEMORY_FEEDBACK_REQUEST}
_ROUTES = {"AssembleContext": "/v1/context:assemble", "SearchMemories": "/v1/memories:search",
           "RecordMemoryFeedback": "/v1/memories:feedback"}  # the server spans' routes


class _Api:
    def __init__(self, assemble: AssembleContext, search: SearchMemories, feedback: RecordMemoryFeedback,
                 metrics: ServiceMetrics, authenticate: Authenticate | None, max_body_bytes: int | None,
                 read_timeout_s: float, tracing: EdgeTracing = EDGE_OFF) -> None:
        self.tracing = tracing
        self._assemble, self._search, self._feedback = assemble, search, feedback
        self._metrics = metrics
        self._authenticate = authenticate
        self._max_body_bytes = max_body_bytes
        self._read_timeout_s = read_timeout_s

    def endpoint(self, method: str, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        spec = _SPECS[method]
        limit = self._max_body_bytes if self._max_body_bytes is not None else body_limit(spec)
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
        principal = self._principal(call)
        request = await call.read_request(DECODERS["AssembleContextRequest"], schemas.assemble_request_from_json)
        request = attrs.evolve(request, request_id=call.correlate(request.request_id, request.trace_id))
        if principal is not None:
            tenant = self._bind(principal, org_id=request.org_id, agent_id=request.agent_id)
            request = attrs.evolve(request, org_id=tenant.org_id, agent_id=tenant.agent_id)
        result = await self._assemble.execute(request)
        self._metrics.observe_assembly(result)
        annotate_assembly(result)
        return schemas.assemble_response_to_json(result)

    async def search(self, call: ApiCall) -> dict[str, Any]:
        principal = self._principal(call)
        request = await call.read_request(DECODERS["SearchMemoriesRequest"], schemas.search_request_from_json)
        request = attrs.evolve(request, request_id=call.correlate(request.request_id))
        if principal is not None:
            tenant = self._bind(principal, org_id=request.org_id, agent_id=request.agent_id)
            request = attrs.evolve(request, org_id=tenant.org_id, agent_id=tenant.agent_id)
        return schemas.search_response_to_json(await self._search.execute(request))

    async def feedback(self, call: ApiCall) -> dict[str, Any]:
        principal = self._principal(call)
        request = await call.read_request(DECODERS["RecordMemoryFeedbackRequest"], schemas.feedback_request_from_json)
        request = attrs.evolve(request, request_id=call.correlate(request.request_id, request.trace_id))
        if principal is not None:
            request = attrs.evolve(request, org_id=self._bind(principal, org_id=request.org_id).org_id)
        outcome = await self._feedback.execute(request)
        self._count_feedback(outcome)
        return schemas.feedback_response_to_json(outcome)

    def _bind(self, principal: VerifiedPrincipal, *, org_id: str, agent_id: str | None = None) -> Tenant:
        """``bind_request``, counting a refusal in the auth-failure metric like every other."""
        try:
            return bind_request(principal, org_id=org_id, agent_id=agent_id)
        except AuthError as exc:
            self._metrics.auth_failure(exc.reason)
            raise

    def _principal(self, call: ApiCall) -> VerifiedPrincipal | None:
        return None if self._authenticate is None else self._authenticate(call.request.headers)

    def _count_feedback(self, outcome: FeedbackOutcome) -> None:
        for update in outcome.updates:
            label = update.error.split(" ", 1)[0].split(":", 1)[0] if update.error else "applied"
            self._metrics.feedback_result(label)


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
        headers = {"connection": "close"} if error.close else None
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
