"""JSON <-> domain for the three operations, in the proto3 JSON mapping of ``ibex.context.v1``.

Requests: ``*_from_json(data)`` takes a decoded JSON object (camelCase or snake_case names) and
returns the domain request; every malformed field raises ``InvalidRequestError`` naming it. The
domain's bounds (UUIDs, lengths, ranges) are checked by the use cases, with the same field names.
``*_to_json`` is the inverse (used by clients, the CLI and round-trip tests).

Responses: ``*_response_to_json(result)`` renders every field, additive ones included; durations
are whole milliseconds (``max(0, round(ms))``), ``created_at`` is RFC 3339 (``Z`` for UTC).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import attrs

from domain.model.assembly import AssembleRequest, AssemblyMetrics, AssemblyOptions, AssemblyResult
from domain.model.messages import Message
from domain.model.operations import FeedbackOutcome, FeedbackRequest, SearchRequest, SearchResult
from entrypoints.http_api import messages as m
from entrypoints.http_api.json_mapping import parse_message, render_message

# ---------------------------------------------------------------- AssembleContext


def assemble_request_from_json(data: object) -> AssembleRequest:
    v = parse_message(data, m.ASSEMBLE_CONTEXT_REQUEST)
    return AssembleRequest(
        org_id=v["org_id"], agent_id=v["agent_id"], model=v["model"], query=v["query"],
        recent_messages=tuple(Message(role=x["role"], content=x["content"]) for x in v["recent_messages"]),
        tool_schemas=v["tool_schemas"],
        options=AssemblyOptions(**v["options"]) if v["options"] is not None else AssemblyOptions(),
        available_tokens=v["available_tokens"], session_id=v["session_id"],
        directive_version_id=v["directive_version_id"], request_id=v["request_id"],
        trace_id=v["trace_id"], span_id=v["span_id"],
    )


def assemble_request_to_json(request: AssembleRequest) -> dict[str, Any]:
    values = _fields(request, exclude=("deadline_s",))
    values["recent_messages"] = [attrs.asdict(x) for x in request.recent_messages]
    values["options"] = attrs.asdict(request.options)
    return render_message(values, m.ASSEMBLE_CONTEXT_REQUEST)


def assemble_response_to_json(result: AssemblyResult) -> dict[str, Any]:
    values = _fields(result, exclude=("packing_path", "nonce"))
    values["memories_used"] = [_fields(x, exclude=("source",)) for x in result.memories_used]
    values["metrics"] = _metrics(result.metrics)
    values["branches"] = [{**attrs.asdict(b), "latency_ms": whole_ms(b.latency_ms)} for b in result.branches]
    return render_message(values, m.ASSEMBLE_CONTEXT_RESPONSE)


def _metrics(metrics: AssemblyMetrics) -> dict[str, int]:
    values = {name: whole_ms(value) for name, value in attrs.asdict(metrics).items()}
    values["candidates_evaluated"] = metrics.candidates_evaluated
    return values


# ---------------------------------------------------------------- SearchMemories


def search_request_from_json(data: object) -> SearchRequest:
    v = parse_message(data, m.SEARCH_MEMORIES_REQUEST)
    return SearchRequest(
        org_id=v["org_id"], agent_id=v["agent_id"], query=v["query"], limit=v["limit"],
        min_similarity=v["min_similarity"] or None, categories=v["categories"], tags=v["tags"],
        session_id=v["session_id"],
    )


def search_request_to_json(request: SearchRequest) -> dict[str, Any]:
    values = _fields(request, exclude=("request_id", "trace_id", "deadline_s"))
    values["min_similarity"] = request.min_similarity or 0.0
    return render_message(values, m.SEARCH_MEMORIES_REQUEST)


def search_response_to_json(result: SearchResult) -> dict[str, Any]:
    memories = [
        {**_fields(x, exclude=("memory_id", "created_at")), "id": x.memory_id, "created_at": rfc3339(x.created_at)}
        for x in result.memories
    ]
    values = {"memories": memories, "total_candidates": result.total_candidates,
              "search_time_ms": whole_ms(result.search_time_ms)}
    return render_message(values, m.SEARCH_MEMORIES_RESPONSE)


# ---------------------------------------------------------------- RecordMemoryFeedback


def feedback_request_from_json(data: object) -> FeedbackRequest:
    v = parse_message(data, m.RECORD_MEMORY_FEEDBACK_REQUEST)
    return FeedbackRequest(
        org_id=v["org_id"], memory_ids=v["memory_ids"], feedback=v["feedback"],
        session_id=v["session_id"], trace_id=v["trace_id"],
    )


def feedback_request_to_json(request: FeedbackRequest) -> dict[str, Any]:
    values = _fields(request, exclude=("request_id", "notes", "deadline_s"))
    return render_message(values, m.RECORD_MEMORY_FEEDBACK_REQUEST)


def feedback_response_to_json(outcome: FeedbackOutcome) -> dict[str, Any]:
    values = {"success": outcome.success, "updates": [attrs.asdict(u) for u in outcome.updates]}
    return render_message(values, m.RECORD_MEMORY_FEEDBACK_RESPONSE)


# ---------------------------------------------------------------- helpers


def whole_ms(ms: float) -> int:
    """Milliseconds on the wire: ``max(0, round(ms))`` (the reference's rule)."""
    return max(0, round(ms))


def rfc3339(moment: datetime | None) -> str:
    """RFC 3339 text (``Z`` for UTC); "" for None. A naive datetime is taken as UTC."""
    if moment is None:
        return ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _fields(value: object, *, exclude: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in attrs.asdict(value, recurse=False).items() if k not in exclude}

