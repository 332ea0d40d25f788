"""ContextAssemblyServicer: authenticate, read the request, bind it, run the use case, translate back.

Every RPC runs through ``_serve``: it counts the call in flight, refuses a call whose deadline has
already expired, refuses an assembly that admission control would not start for its deadline
(``Admission.check_start``: before anything is read, so that shedding costs as little as it can;
the refusal says nothing about any tenant), authenticates the caller from the metadata alone, reads and decodes the request
(``wire.decode``: repeated fields counted on the bytes first), binds the request's ids to the
principal, runs the use case, and records the final status code (OK, CANCELLED when the caller
went away, DEADLINE_EXCEEDED, or the error's code) in the metrics. An answer ready only after the
caller's deadline is dropped, not sent (DEADLINE_EXCEEDED): the caller's own timer has fired. An answer
grpc-core could not send (the call ended between that check and the send) is counted again in
``ibex_context_answers_not_sent_total`` and logged as ``grpc_answer_not_sent`` (``undelivered``). The caller's remaining
deadline is passed to the use cases as ``deadline_s`` so that the retrieval wall never waits past it.

Failures never ``context.abort``: the status is set (``set_code`` / ``set_details``, the code and
message from ``status.failure_for``) and an empty response returned, which grpc discards. An abort
leaves its AbortError on grpc's call state, and the error's traceback holds the handler frames,
which hold the call state and the request: a reference cycle that kept every failed request
alive until a full garbage collection (twelve 14 MB unauthenticated calls: +0.5 GB of RSS).

Handlers (``method_handlers``, what ``server.build_server`` registers): each RPC is served as a
stream-unary handler with no deserializer. On the wire it is the same unary method, but the
servicer reads the request bytes itself, and only after the caller is authenticated: an
unauthenticated call is refused before its body is read, let alone decoded. Bytes that are not
the request message end INVALID_ARGUMENT naming ``request`` (with a request deserializer, grpc
answers its exceptions UNKNOWN "Unexpected <class ...>"; a deserializer cannot choose the status).
The ``AssembleContext`` / ``SearchMemories`` / ``RecordMemoryFeedback`` methods take decoded
messages, for a server built with the generated ``add_..._to_server`` and for tests.

Correlation: each call gets a ``call_id`` (a UUID4, quoted in INTERNAL messages) and a request id,
the caller's ``request_id`` or, when it sent none, the call id. The request id travels in the
domain request (downstream calls carry it; AssembleContextResponse echoes it) and in the call's
``grpc_request`` log line, so an answer always matches its log.

Tracing (``observability.tracing``): each call is one SERVER span, current for the whole call
(authentication, reading, the use case, the log line), child of the trace context in the call's
metadata (W3C ``traceparent``/``tracestate``); with tracing off, that context is only attached so
that it is passed on downstream and logged. The request's ``trace_id`` field is logged as
``request_trace_id``: ``trace_id``/``span_id`` in a log line are the current span's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import attrs
import grpc

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from domain.model.assembly import DegradationLevel, AssemblyResult
from domain.model.errors import InvalidRequestError
from domain.usecases.assemble_context import AssembleContext
from domain.usecases.record_feedback import RecordMemoryFeedback
from domain.usecases.search_memories import SearchMemories
from domain.usecases.validation import MAX_ID_CHARS
from entrypoints import translation as translate
from entrypoints.admission import Admission
from entrypoints.grpc_api import wire
from entrypoints.grpc_api.status import DeadlineExpiredError, failure_for
from entrypoints.grpc_api.undelivered import watch_call
from entrypoints.observability.correlation import new_request_id
from entrypoints.observability.metrics import ServiceMetrics
from entrypoints.observability.tracing import EDGE_OFF, EdgeTracing, ServerSpan, annotate_assembly, annotate_request_ids

SURFACE = "grpc"
SERVICE = pb.DESCRIPTOR.services_by_name["ContextAssemblyService"].full_name
_log = logging.getLogger("ibex_context.grpc")


class Admitted(Protocol):
    org_id: str
    agent_id: str


class CallerAuthenticator(Protocol):
    """The auth seam (``entrypoints.auth.grpc_auth.GrpcAuthenticator`` fits it).

    ``authenticate`` reads only the call's metadata and returns the verified principal (None when
    no signed-principal mode is on); ``authorize`` binds the request's ids to it and returns the
    ids the use case must act for (``agent_id`` None marks an org-scoped call). Both raise
    ``entrypoints.auth.errors.AuthError`` (UNAUTHENTICATED / PERMISSION_DENIED).
    """

    def authenticate(self, invocation_metadata: Iterable[Any] | None) -> Any: ...

    def authorize(self, principal: Any, *, org_id: str, agent_id: str | None = None) -> Admitted: ...


@attrs.define
class _Scope:
    deadline_s: float | None
    call_id: str
    request_id: str  # the caller's, else call_id
    trace_id: str = ""
    code: str = "OK"  # the code the call was counted with, once it ended


@attrs.frozen
class _Rpc:
    name: str
    shape: wire.RequestShape
    response_type: Any
    run: str  # the servicer method that serves a decoded request
    ids: Callable[[Any], tuple[str, str]]  # (the caller's request_id, trace_id) of a request
    admitted: bool = False  # runs under admission control (an assembly)


_ASSEMBLE = _Rpc("AssembleContext", wire.ASSEMBLE_SHAPE, pb.AssembleContextResponse, "_assemble_call",
                 lambda request: (request.request_id, request.trace_id), admitted=True)
_SEARCH = _Rpc("SearchMemories", wire.SEARCH_SHAPE, pb.SearchMemoriesResponse, "_search_call",
               lambda request: ("", ""))
_FEEDBACK = _Rpc("RecordMemoryFeedback", wire.FEEDBACK_SHAPE, pb.RecordMemoryFeedbackResponse, "_feedback_call",
                 lambda request: ("", request.trace_id))
RPCS = (_ASSEMBLE, _SEARCH, _FEEDBACK)


class ContextAssemblyServicer(pb_grpc.ContextAssemblyServiceServicer):
    def __init__(
        self,
        *,
        assemble: AssembleContext,
        search: SearchMemories,
        feedback: RecordMemoryFeedback,
        metrics: ServiceMetrics,
        authenticator: CallerAuthenticator | None = None,
        deadline_headroom_s: float = 0.005,
        tracing: EdgeTracing = EDGE_OFF,
        admission: Admission | None = None,
    ) -> None:
        self._tracing = tracing
        self._admission = admission
        self._assemble = assemble
        self._search = search
        self._feedback = feedback
        self._metrics = metrics
        self._authenticator = authenticator
        self._headroom_s = deadline_headroom_s

    # ------------------------------------------------------------------ grpc entry points
    def method_handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        """The service's handlers by method name: raw bytes in, read after authentication."""
        return {rpc.name: self._raw_handler(rpc) for rpc in RPCS}

    def _raw_handler(self, rpc: _Rpc) -> grpc.RpcMethodHandler:
        async def handle(requests: object, context: grpc.aio.ServicerContext) -> Any:
            del requests  # the request is read through context.read(), once the caller is authenticated
            return await self._serve(rpc, context, None)

        return grpc.stream_unary_rpc_method_handler(
            handle, request_deserializer=None, response_serializer=rpc.response_type.SerializeToString)

    async def AssembleContext(self, request: pb.AssembleContextRequest, context: grpc.aio.ServicerContext) -> pb.AssembleContextResponse:
        return await self._serve(_ASSEMBLE, context, request)

    async def SearchMemories(self, request: pb.SearchMemoriesRequest, context: grpc.aio.ServicerContext) -> pb.SearchMemoriesResponse:
        return await self._serve(_SEARCH, context, request)

    async def RecordMemoryFeedback(
        self, request: pb.RecordMemoryFeedbackRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecordMemoryFeedbackResponse:
        return await self._serve(_FEEDBACK, context, request)

    # ------------------------------------------------------------------ the three calls
    async def _assemble_call(self, request: pb.AssembleContextRequest, principal: Any, scope: _Scope) -> pb.AssembleContextResponse:
        org_id, agent_id = self._bind(principal, request.org_id, request.agent_id)
        domain = translate.assemble_request_from_proto(
            request, scope.deadline_s, tenant=(org_id, agent_id), request_id=scope.request_id)
        if self._admission is None:
            result = await self._assemble.execute(domain)
        else:
            async with self._admission.slot(SURFACE, scope.deadline_s):
                result = await self._assemble.execute(domain)
        self._observe_assembly(result, scope)
        return translate.assembly_to_proto(result)

    async def _search_call(self, request: pb.SearchMemoriesRequest, principal: Any, scope: _Scope) -> pb.SearchMemoriesResponse:
        org_id, agent_id = self._bind(principal, request.org_id, request.agent_id)
        domain = translate.search_request_from_proto(
            request, scope.deadline_s, tenant=(org_id, agent_id), request_id=scope.request_id)
        result = await self._search.execute(domain)
        return translate.search_to_proto(result)

    async def _feedback_call(
        self, request: pb.RecordMemoryFeedbackRequest, principal: Any, scope: _Scope
    ) -> pb.RecordMemoryFeedbackResponse:
        org_id, _ = self._bind(principal, request.org_id, None)
        domain = translate.feedback_request_from_proto(
            request, scope.deadline_s, org_id=org_id, request_id=scope.request_id)
        outcome = await self._feedback.execute(domain)
        self._metrics.observe_feedback(outcome)
        return translate.feedback_to_proto(outcome)

    # ------------------------------------------------------------------ every call
    def _authenticate(self, context: grpc.aio.ServicerContext) -> Any:
        """The verified principal from the metadata (None without an authenticator); raises AuthError."""
        if self._authenticator is None:
            return None
        return self._authenticator.authenticate(context.invocation_metadata())

    def _bind(self, principal: Any, org_id: str, agent_id: str | None) -> tuple[str, str]:
        if self._authenticator is None:
            return org_id, agent_id or ""
        tenant = self._authenticator.authorize(principal, org_id=org_id, agent_id=agent_id)
        return tenant.org_id, (tenant.agent_id if agent_id is not None else "")

    async def _serve(self, rpc: _Rpc, context: grpc.aio.ServicerContext, request: Any) -> Any:
        """Serve one call inside its server span; ``request`` None: read and decode it from the call."""
        with self._tracing.grpc_call(SERVICE, rpc.name, context.invocation_metadata()) as span:
            return await self._serve_in_span(rpc, context, request, span)

    async def _serve_in_span(self, rpc: _Rpc, context: grpc.aio.ServicerContext, request: Any, span: ServerSpan) -> Any:
        """Serve one call; ``request`` None: read and decode it from the call (after authentication)."""
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        call_id = new_request_id()
        scope = _Scope(deadline_s=context.time_remaining(), call_id=call_id, request_id=call_id)
        watch_call(lambda: self._answer_not_sent(rpc, scope))
        with self._metrics.in_flight(SURFACE):
            try:
                if scope.deadline_s is not None and scope.deadline_s <= 0:
                    raise DeadlineExpiredError
                if rpc.admitted and self._admission is not None:
                    self._admission.check_start(SURFACE, scope.deadline_s)  # before any reading
                principal = self._authenticate(context)
                if request is None:
                    request = await _read_request(context, rpc.shape)
                request_id, scope.trace_id = rpc.ids(request)
                scope.request_id = request_id or call_id
                annotate_request_ids(scope.request_id, scope.trace_id)
                response = await getattr(self, rpc.run)(request, principal, scope)
                if _deadline_passed(context):
                    # Too late for the caller, whose deadline has fired: the answer is dropped, not
                    # sent (grpc-core may have ended the call already, and a send would then fail
                    # with an ERROR logged by grpc). Counted below as DEADLINE_EXCEEDED.
                    raise asyncio.CancelledError
                return response
            except asyncio.CancelledError:
                code = _cancel_code(context)
                raise
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN  # aborted by code we called
                raise
            except Exception as exc:
                failure = failure_for(
                    exc, remaining_s=context.time_remaining(), call_id=scope.call_id, headroom_s=self._headroom_s)
                code = failure.code
                if code == grpc.StatusCode.INTERNAL:
                    _log.exception("grpc_internal_error", extra={"method": rpc.name, "call_id": scope.call_id})
                context.set_code(code)  # not context.abort: see the module docstring
                context.set_details(failure.message)
                return rpc.response_type()
            finally:
                elapsed = time.perf_counter() - started
                scope.code = code.name
                self._metrics.observe_request(SURFACE, rpc.name, code.name, elapsed)
                span.grpc_status(code.name, code.value[0])
                level = logging.DEBUG if code == grpc.StatusCode.OK else logging.INFO
                if _log.isEnabledFor(level):
                    _log.log(level, "grpc_request", extra={  # ids cut to their bound: an over-long one is refused anyway
                        "method": rpc.name, "code": code.name, "latency_ms": round(elapsed * 1000, 3),
                        "call_id": scope.call_id, "request_id": scope.request_id[:MAX_ID_CHARS],
                        "request_trace_id": scope.trace_id[:MAX_ID_CHARS]})

    def _answer_not_sent(self, rpc: _Rpc, scope: _Scope) -> None:
        """grpc-core could not send this call's answer: it had ended first (``undelivered``)."""
        self._metrics.answer_not_sent(SURFACE, rpc.name, scope.code)
        _log.warning("grpc_answer_not_sent", extra={
            "method": rpc.name, "counted_code": scope.code, "call_id": scope.call_id,
            "request_id": scope.request_id[:MAX_ID_CHARS],
            "detail": "the call had ended in grpc-core (its deadline, a cancel, the connection, or the send limit) "
                      "before its answer was sent"})

    def _observe_assembly(self, result: AssemblyResult, scope: _Scope) -> None:
        self._metrics.observe_assembly(result)
        annotate_assembly(result)
        if result.degradation_level != DegradationLevel.L0:
            _log.info(
                "context_assembly_degraded",
                extra={
                    "level": result.degradation_level,
                    "branches": {b.name: f"{b.outcome}:{b.detail}" for b in result.branches},
                    "request_id": result.request_id,
                    "request_trace_id": result.trace_id,
                    "call_id": scope.call_id,
                },
            )


async def _read_request(context: grpc.aio.ServicerContext, shape: wire.RequestShape) -> Any:
    """The call's one request message, decoded (``wire.decode``); InvalidRequestError when none came.

    grpc reports a message over the receive limit as no message: the transport has then already
    answered the caller RESOURCE_EXHAUSTED, and this status (and the metrics' code for the call,
    INVALID_ARGUMENT or CANCELLED) only says that no request arrived.
    """
    raw = await context.read()
    if raw is grpc.aio.EOF:
        raise InvalidRequestError(wire.REQUEST_FIELD, (
            f"{wire.REQUEST_FIELD}: no {shape.full_name} arrived (none was sent, or it exceeded the "
            f"{wire.MAX_RECEIVE_BYTES}-byte receive limit)"))
    return wire.decode(raw, shape)


def _deadline_passed(context: grpc.aio.ServicerContext) -> bool:
    remaining = context.time_remaining()
    return remaining is not None and remaining <= 0


def _cancel_code(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """CANCELLED when the caller went away, DEADLINE_EXCEEDED when its deadline ran out."""
    return grpc.StatusCode.DEADLINE_EXCEEDED if _deadline_passed(context) else grpc.StatusCode.CANCELLED
