"""ContextAssemblyServicer: translate, admit the caller, run the use case, translate back.

Every RPC runs inside ``_scope``: it counts the call in flight, refuses a call whose deadline has
already expired, maps failures through ``status.failure_for`` and records the final status code
(OK, CANCELLED when the caller went away, DEADLINE_EXCEEDED, or the error's code) in the metrics.
The caller's remaining deadline is passed to the use cases as ``deadline_s`` so that the retrieval
wall never waits past it.

Correlation: each call gets a ``call_id`` (a UUID4, quoted in INTERNAL messages) and a request id,
the caller's ``request_id`` or, when it sent none, the call id. The request id travels in the
domain request (downstream calls carry it; AssembleContextResponse echoes it) and in the call's
``grpc_request`` log line, so an answer always matches its log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import attrs
import grpc

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from domain.model.assembly import DEGRADATION_L0, AssemblyResult
from domain.model.operations import FeedbackOutcome
from domain.usecases.assemble_context import AssembleContext
from domain.usecases.record_feedback import RecordMemoryFeedback
from domain.usecases.search_memories import SearchMemories
from entrypoints.grpc_api import translate
from entrypoints.grpc_api.status import DeadlineExpiredError, failure_for
from entrypoints.observability.correlation import new_request_id
from entrypoints.observability.metrics import ServiceMetrics

SURFACE = "grpc"
_log = logging.getLogger("ibex_context.grpc")


class Admitted(Protocol):
    org_id: str
    agent_id: str


class CallerAuthenticator(Protocol):
    """The auth seam (``entrypoints.auth.grpc_auth.GrpcAuthenticator`` fits it).

    ``admit`` returns the ids the use case must act for, or aborts the call itself
    (UNAUTHENTICATED / PERMISSION_DENIED). ``agent_id`` None marks an org-scoped call.
    """

    async def admit(self, context: Any, *, org_id: str, agent_id: str | None = None) -> Admitted: ...


@attrs.frozen
class _Scope:
    deadline_s: float | None
    call_id: str
    request_id: str  # the caller's, else call_id


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
    ) -> None:
        self._assemble = assemble
        self._search = search
        self._feedback = feedback
        self._metrics = metrics
        self._authenticator = authenticator
        self._headroom_s = deadline_headroom_s

    async def AssembleContext(self, request: pb.AssembleContextRequest, context: grpc.aio.ServicerContext) -> pb.AssembleContextResponse:
        async with self._scope(context, "AssembleContext", request.request_id, request.trace_id) as scope:
            org_id, agent_id = await self._admit(context, request.org_id, request.agent_id)
            domain = translate.assemble_request_from_proto(
                request, scope.deadline_s, tenant=(org_id, agent_id), request_id=scope.request_id)
            result = await self._assemble.execute(domain)
            self._observe_assembly(result, scope)
            return translate.assembly_to_proto(result)

    async def SearchMemories(self, request: pb.SearchMemoriesRequest, context: grpc.aio.ServicerContext) -> pb.SearchMemoriesResponse:
        async with self._scope(context, "SearchMemories") as scope:
            org_id, agent_id = await self._admit(context, request.org_id, request.agent_id)
            domain = translate.search_request_from_proto(
                request, scope.deadline_s, tenant=(org_id, agent_id), request_id=scope.request_id)
            result = await self._search.execute(domain)
            return translate.search_to_proto(result)

    async def RecordMemoryFeedback(
        self, request: pb.RecordMemoryFeedbackRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecordMemoryFeedbackResponse:
        async with self._scope(context, "RecordMemoryFeedback", trace_id=request.trace_id) as scope:
            org_id, _ = await self._admit(context, request.org_id, None)
            domain = translate.feedback_request_from_proto(
                request, scope.deadline_s, org_id=org_id, request_id=scope.request_id)
            outcome = await self._feedback.execute(domain)
            self._observe_feedback(outcome)
            return translate.feedback_to_proto(outcome)

    async def _admit(self, context: grpc.aio.ServicerContext, org_id: str, agent_id: str | None) -> tuple[str, str]:
        if self._authenticator is None:
            return org_id, agent_id or ""
        tenant = await self._authenticator.admit(context, org_id=org_id, agent_id=agent_id)
        return tenant.org_id, (tenant.agent_id if agent_id is not None else "")

    @asynccontextmanager
    async def _scope(
        self, context: grpc.aio.ServicerContext, method: str, request_id: str = "", trace_id: str = ""
    ) -> AsyncIterator[_Scope]:
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        call_id = new_request_id()
        scope = _Scope(deadline_s=context.time_remaining(), call_id=call_id, request_id=request_id or call_id)
        with self._metrics.in_flight(SURFACE):
            try:
                if scope.deadline_s is not None and scope.deadline_s <= 0:
                    raise DeadlineExpiredError
                yield scope
                if _deadline_passed(context):
                    code = grpc.StatusCode.DEADLINE_EXCEEDED  # the answer can no longer reach the caller
            except asyncio.CancelledError:
                code = _cancel_code(context)
                raise
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN  # aborted by the authenticator
                raise
            except Exception as exc:
                failure = failure_for(
                    exc, remaining_s=context.time_remaining(), call_id=scope.call_id, headroom_s=self._headroom_s)
                code = failure.code
                if code == grpc.StatusCode.INTERNAL:
                    _log.exception("grpc_internal_error", extra={"method": method, "call_id": scope.call_id})
                await _abort(context, failure.code, failure.message)
            finally:
                elapsed = time.perf_counter() - started
                self._metrics.observe_request(SURFACE, method, code.name, elapsed)
                level = logging.DEBUG if code == grpc.StatusCode.OK else logging.INFO
                if _log.isEnabledFor(level):
                    _log.log(level, "grpc_request", extra={
                        "method": method, "code": code.name, "latency_ms": round(elapsed * 1000, 3),
                        "call_id": scope.call_id, "request_id": scope.request_id, "trace_id": trace_id})

    def _observe_assembly(self, result: AssemblyResult, scope: _Scope) -> None:
        self._metrics.observe_assembly(result)
        if result.degradation_level != DEGRADATION_L0:
            _log.info(
                "context_assembly_degraded",
                extra={
                    "level": result.degradation_level,
                    "branches": {b.name: f"{b.outcome}:{b.detail}" for b in result.branches},
                    "request_id": result.request_id,
                    "trace_id": result.trace_id,
                    "call_id": scope.call_id,
                },
            )

    def _observe_feedback(self, outcome: FeedbackOutcome) -> None:
        for update in outcome.updates:
            self._metrics.feedback_result(update.error.split(" ")[0].rstrip(":") if update.error else "applied")


async def _abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> None:
    """``context.abort``; when the call is already over (the caller left), only stop the handler."""
    try:
        await context.abort(code, message)
    except grpc.aio.AbortError:
        raise
    except Exception:  # grpc could not send the status: the RPC already ended on its side
        raise asyncio.CancelledError from None


def _deadline_passed(context: grpc.aio.ServicerContext) -> bool:
    remaining = context.time_remaining()
    return remaining is not None and remaining <= 0


def _cancel_code(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """CANCELLED when the caller went away, DEADLINE_EXCEEDED when its deadline ran out."""
    return grpc.StatusCode.DEADLINE_EXCEEDED if _deadline_passed(context) else grpc.StatusCode.CANCELLED
