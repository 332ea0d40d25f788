"""The HTTP JSON API: the three use cases in the proto3 JSON mapping, health, readiness, metrics.

Routes:
- ``POST /v1/context:assemble`` (AssembleContextRequest -> AssembleContextResponse)
- ``POST /v1/memories:search`` (SearchMemoriesRequest -> SearchMemoriesResponse)
- ``POST /v1/memories:feedback`` (RecordMemoryFeedbackRequest -> RecordMemoryFeedbackResponse)
- ``GET /healthz`` (200 ``{"status": "ok"}`` while the process serves)
- ``GET /readyz`` (200 ``{"status": "ready"}`` when ``readiness()`` is true, else 503 ``not_ready``)
- ``GET /metrics`` (Prometheus text format)

Errors are ``{"error": {"code", "message", "field"?, "requestId"}}`` (table in ``errors.py``);
unknown paths answer 404 ``NOT_FOUND``, wrong methods 405 ``METHOD_NOT_ALLOWED`` with ``Allow``
(those two carry no request id: no API call was made).
Every API call has one request id (``calls.py``): the caller's, else a generated UUID4; it is in
the answer (``requestId`` of AssembleContextResponse and of errors, the ``X-Request-ID`` header)
and in the call's ``http_request`` log line.
Every API call is counted (``observe_request("http", <RPC name>, <code>, seconds)``, ``in_flight``).
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
from entrypoints.http_api import schemas
from entrypoints.http_api.calls import DEFAULT_MAX_BODY_BYTES, ApiCall
from entrypoints.http_api.errors import METHOD_NOT_ALLOWED, NOT_FOUND, OK, ApiError, internal_error, translate
from entrypoints.observability.metrics import ServiceMetrics

SURFACE = "http"
Readiness = Callable[[], bool]
Authenticate = Callable[[Mapping[str, str]], VerifiedPrincipal | None]
Handler = Callable[[ApiCall], Awaitable[dict[str, Any]]]

_log = logging.getLogger("ibex_context.http")


def make_app(
    *,
    assemble: AssembleContext,
    search: SearchMemories,
    feedback: RecordMemoryFeedback,
    metrics: ServiceMetrics,
    readiness: Readiness,
    authenticate: Authenticate | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> Starlette:
    """Build the ASGI app.

    Args:
        assemble, search, feedback: the use cases (anything with ``async execute(request)``).
        metrics: the process's ServiceMetrics (shared with the gRPC edge).
        readiness: true when the application is open and not draining.
        authenticate: ``authenticate(headers)`` -> the verified principal, or None when no
            principal keys are configured; raises ``AuthError`` (401/403). With a principal, the
            request's org/agent ids must match it (``bind_request``). None: no caller auth.
        max_body_bytes: larger request bodies answer 413.
    """
    api = _Api(assemble, search, feedback, metrics, authenticate, max_body_bytes)
    routes = [
        Route("/v1/context:assemble", api.endpoint("AssembleContext", api.assemble), methods=["POST"]),
        Route("/v1/memories:search", api.endpoint("SearchMemories", api.search), methods=["POST"]),
        Route("/v1/memories:feedback", api.endpoint("RecordMemoryFeedback", api.feedback), methods=["POST"]),
        Route("/healthz", _healthz, methods=["GET"]),
        Route("/readyz", _readyz(readiness), methods=["GET"]),
        Route("/metrics", _metrics(metrics), methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: _routing_error})


class _Api:
    def __init__(self, assemble: AssembleContext, search: SearchMemories, feedback: RecordMemoryFeedback,
                 metrics: ServiceMetrics, authenticate: Authenticate | None, max_body_bytes: int) -> None:
        self._assemble, self._search, self._feedback = assemble, search, feedback
        self._metrics = metrics
        self._authenticate = authenticate
        self._max_body_bytes = max_body_bytes

    def endpoint(self, method: str, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            started = time.perf_counter()
            call = ApiCall(request, self._max_body_bytes)
            with self._metrics.in_flight(SURFACE):
                response, code = await _answer(call, method, handler)
            elapsed = time.perf_counter() - started
            self._metrics.observe_request(SURFACE, method, code, elapsed)
            _log.log(logging.DEBUG if code == OK else logging.INFO, "http_request", extra={
                "method": method, "code": code, "status": response.status_code, "latency_ms": round(elapsed * 1000, 3),
                "request_id": call.request_id, "trace_id": call.trace_id,
            })
            return response
        return serve

    async def assemble(self, call: ApiCall) -> dict[str, Any]:
        principal = self._principal(call)
        request = schemas.assemble_request_from_json(await call.read_json())
        request = attrs.evolve(request, request_id=call.correlate(request.request_id, request.trace_id))
        if principal is not None:
            tenant = self._bind(principal, org_id=request.org_id, agent_id=request.agent_id)
            request = attrs.evolve(request, org_id=tenant.org_id, agent_id=tenant.agent_id)
        result = await self._assemble.execute(request)
        self._metrics.observe_assembly(result)
        return schemas.assemble_response_to_json(result)

    async def search(self, call: ApiCall) -> dict[str, Any]:
        principal = self._principal(call)
        request = schemas.search_request_from_json(await call.read_json())
        request = attrs.evolve(request, request_id=call.correlate(request.request_id))
        if principal is not None:
            tenant = self._bind(principal, org_id=request.org_id, agent_id=request.agent_id)
            request = attrs.evolve(request, org_id=tenant.org_id, agent_id=tenant.agent_id)
        return schemas.search_response_to_json(await self._search.execute(request))

    async def feedback(self, call: ApiCall) -> dict[str, Any]:
        principal = self._principal(call)
        request = schemas.feedback_request_from_json(await call.read_json())
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
                "method": method, "request_id": call.request_id, "trace_id": call.trace_id})
            error = internal_error()
        return call.respond(error.status, error.body(call.request_id)), error.code


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


async def _routing_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        error = ApiError(405, METHOD_NOT_ALLOWED, f"{request.method} is not allowed on {request.url.path}")
    elif exc.status_code == 404:
        error = ApiError(404, NOT_FOUND, f"no route for {request.method} {request.url.path}")
    else:
        error = ApiError(exc.status_code, "HTTP_" + str(exc.status_code), str(exc.detail))
    return JSONResponse(error.body(), status_code=error.status, headers=dict(exc.headers or {}))
