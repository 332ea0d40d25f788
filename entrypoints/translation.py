"""Pure proto <-> domain mapping for the three RPCs, shared by both edges; the only place the two sets meet.

The gRPC edge (``grpc_api.servicer``) gets the messages from the wire, the HTTP edge
(``http_api.app``) from ``json_format`` over a bounded JSON body: both then translate here, so a
request means the same and a response carries the same values whichever edge answered it.

Requests are copied field by field (the use cases validate and name the field), except that the
length of every repeated field is checked on the proto message *before* any element is copied
into a domain object (``validation.check_items``: the same bounds and messages), and the ignored
``principal_context`` is bounded in bytes. ``request_id``, when given, is the call's request id
(the caller's, or one the edge generated) and replaces the message's own. Responses fill every
field, including the additive ones; durations become whole milliseconds with ``max(0, round(ms))``
integers are clamped to the int32 range and ``created_at`` is RFC 3339 (``Z`` for UTC).
"""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.ibex.context.v1 import context_pb2 as pb
from domain.model.assembly import AssembleRequest, AssemblyMetrics, AssemblyOptions, AssemblyResult, BranchStatus
from domain.model.errors import InvalidRequestError
from domain.model.messages import Message
from domain.model.operations import FeedbackOutcome, FeedbackRequest, FoundMemory, SearchRequest, SearchResult
from domain.usecases import validation

_INT32_MAX = 2**31 - 1


def whole_ms(ms: float) -> int:
    """Milliseconds as a non-negative int32: ``max(0, round(ms))``."""
    return _int32(max(0, round(ms)))


def rfc3339(moment: datetime | None) -> str:
    """RFC 3339 text (``Z`` for UTC); "" for None. A naive datetime is taken as UTC."""
    if moment is None:
        return ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _int32(value: int) -> int:
    if -_INT32_MAX - 1 <= value <= _INT32_MAX:
        return int(value)
    return _INT32_MAX if value > 0 else -_INT32_MAX - 1


# ------------------------------------------------------------------ requests
def assemble_request_from_proto(
    msg: pb.AssembleContextRequest, deadline_s: float | None = None, *, tenant: tuple[str, str] | None = None,
    request_id: str | None = None,
) -> AssembleRequest:
    """The domain request; ``deadline_s`` is the caller's remaining time (None: no deadline) and
    ``tenant`` the (org_id, agent_id) admitted for the call (None: the request's own)."""
    validation.check_items(len(msg.recent_messages), validation.MAX_MESSAGES, "recent_messages")
    validation.check_items(len(msg.tool_schemas), validation.MAX_TOOL_SCHEMAS, "tool_schemas")
    if msg.HasField("principal_context"):
        size = msg.principal_context.ByteSize()
        if size > validation.MAX_PRINCIPAL_CONTEXT_BYTES:
            raise InvalidRequestError("principal_context", (
                f"principal_context exceeds {validation.MAX_PRINCIPAL_CONTEXT_BYTES} bytes ({size})"))
    options = msg.options
    org_id, agent_id = tenant or (msg.org_id, msg.agent_id)
    return AssembleRequest(
        org_id=org_id,
        agent_id=agent_id,
        model=msg.model,
        query=msg.query,
        recent_messages=tuple(Message(role=m.role, content=m.content) for m in msg.recent_messages),
        tool_schemas=tuple(msg.tool_schemas),
        options=AssemblyOptions(
            skip_cold_memories=options.skip_cold_memories,
            skip_hot_memories=options.skip_hot_memories,
            recency_weight=options.recency_weight,
            relevance_weight=options.relevance_weight,
            usefulness_weight=options.usefulness_weight,
            confidence_weight=options.confidence_weight,
            max_memories=options.max_memories,
        ),
        available_tokens=msg.available_tokens,
        session_id=msg.session_id,
        directive_version_id=msg.directive_version_id,
        request_id=msg.request_id if request_id is None else request_id,
        trace_id=msg.trace_id,
        span_id=msg.span_id,
        deadline_s=deadline_s,
    )


def search_request_from_proto(
    msg: pb.SearchMemoriesRequest, deadline_s: float | None = None, *, tenant: tuple[str, str] | None = None,
    request_id: str = "",
) -> SearchRequest:
    """``limit`` 0 and ``min_similarity`` 0 mean "the default" (proto3 cannot tell unset from 0);
    ``tenant`` is the (org_id, agent_id) admitted for the call (None: the request's own)."""
    validation.check_items(len(msg.categories), validation.MAX_SEARCH_CATEGORIES, "categories")
    validation.check_items(len(msg.tags), validation.MAX_SEARCH_TAGS, "tags")
    org_id, agent_id = tenant or (msg.org_id, msg.agent_id)
    return SearchRequest(
        org_id=org_id,
        agent_id=agent_id,
        query=msg.query,
        limit=msg.limit,
        min_similarity=msg.min_similarity or None,
        categories=tuple(msg.categories),
        tags=tuple(msg.tags),
        session_id=msg.session_id,
        request_id=request_id,
        deadline_s=deadline_s,
    )


def feedback_request_from_proto(
    msg: pb.RecordMemoryFeedbackRequest, deadline_s: float | None = None, *, org_id: str | None = None,
    request_id: str = "",
) -> FeedbackRequest:
    """``org_id`` is the org admitted for the call (None: the request's own)."""
    validation.check_items(len(msg.memory_ids), validation.MAX_FEEDBACK_IDS, "memory_ids")
    return FeedbackRequest(
        org_id=msg.org_id if org_id is None else org_id,
        memory_ids=tuple(msg.memory_ids),
        feedback=msg.feedback,
        session_id=msg.session_id,
        trace_id=msg.trace_id,
        request_id=request_id,
        deadline_s=deadline_s,
    )


# ------------------------------------------------------------------ responses
def assembly_to_proto(result: AssemblyResult) -> pb.AssembleContextResponse:
    response = pb.AssembleContextResponse(
        assembled_context=result.assembled_context,
        tokens_used=_int32(result.tokens_used),
        memories_included=_int32(result.memories_included),
        directive_tokens=_int32(result.directive_tokens),
        history_tokens=_int32(result.history_tokens),
        memory_tokens=_int32(result.memory_tokens),
        metrics=metrics_to_proto(result.metrics),
        request_id=result.request_id,
        trace_id=result.trace_id,
        span_id=result.span_id,
        score_schema=result.score_schema,
        degradation_level=result.degradation_level,
        branches=[branch_to_proto(b) for b in result.branches],
        usable_budget=_int32(result.usable_budget),
        estimate_kind=result.estimate_kind,
    )
    add = response.memories_used.add  # in place: ~1/3 cheaper than building and copying each message
    for r in result.memories_used:  # spelled out, not via a dict: this loop runs ~70 times per call
        add(memory_id=r.memory_id, composite_score=r.composite_score, relevance_score=r.relevance_score,
            recency_score=r.recency_score, usefulness_score=r.usefulness_score, rank=_int32(r.rank),
            category=r.category, exclusion=r.exclusion, similarity=r.similarity, confidence=r.confidence,
            token_estimate=_int32(r.token_estimate), detail=r.detail)
    return response


def metrics_to_proto(metrics: AssemblyMetrics) -> pb.AssemblyMetrics:
    return pb.AssemblyMetrics(
        budget_calculation_ms=whole_ms(metrics.budget_calculation_ms),
        directive_load_ms=whole_ms(metrics.directive_load_ms),
        hot_memory_retrieval_ms=whole_ms(metrics.hot_memory_retrieval_ms),
        cold_memory_retrieval_ms=whole_ms(metrics.cold_memory_retrieval_ms),
        ranking_ms=whole_ms(metrics.ranking_ms),
        packing_ms=whole_ms(metrics.packing_ms),
        formatting_ms=whole_ms(metrics.formatting_ms),
        total_ms=whole_ms(metrics.total_ms),
        candidates_evaluated=_int32(metrics.candidates_evaluated),
    )


def branch_to_proto(branch: BranchStatus) -> pb.BranchStatus:
    return pb.BranchStatus(
        name=branch.name, outcome=branch.outcome, latency_ms=whole_ms(branch.latency_ms), detail=branch.detail
    )


def search_to_proto(result: SearchResult) -> pb.SearchMemoriesResponse:
    return pb.SearchMemoriesResponse(
        memories=[found_memory_to_proto(m) for m in result.memories],
        total_candidates=_int32(result.total_candidates),
        search_time_ms=whole_ms(result.search_time_ms),
    )


def found_memory_to_proto(memory: FoundMemory) -> pb.Memory:
    return pb.Memory(
        id=memory.memory_id,
        content=memory.content,
        category=memory.category,
        confidence=memory.confidence,
        composite_score=memory.composite_score,
        retrieval_count=_int32(memory.retrieval_count),
        created_at=rfc3339(memory.created_at),
    )


def feedback_to_proto(outcome: FeedbackOutcome) -> pb.RecordMemoryFeedbackResponse:
    return pb.RecordMemoryFeedbackResponse(
        success=outcome.success,
        updates=[
            pb.MemoryScoreUpdate(
                memory_id=u.memory_id, previous_score=u.previous_score, new_score=u.new_score, error=u.error
            )
            for u in outcome.updates
        ],
    )
