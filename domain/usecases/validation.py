"""Request bounds shared by every entrypoint; a violation names the field.

Every string and every repeated field of the three requests has a bound here (README
"Request bounds"); the edges size their transport limits from these constants (the gRPC receive
limit is the serialized size of the largest request they allow, ``grpc_api.wire``) and use
``check_items`` / ``check_chars`` to refuse an oversized repeated field or string with the same
message *before* they build domain objects from it. Values a caller sent are never echoed whole
in a message: at most ``MAX_ECHO_CHARS`` of them.
"""

from __future__ import annotations

import math
import uuid

import attrs

from domain.model.assembly import AssembleRequest
from domain.model.errors import InvalidRequestError
from domain.model.feedback import FEEDBACK_VALUES
from domain.model.operations import FeedbackRequest, SearchRequest

MAX_MODEL_CHARS = 256
MAX_QUERY_CHARS = 8192
MAX_MESSAGES = 100
MAX_ROLE_CHARS = 64
MAX_CONTENT_CHARS = 32768
MAX_MEMORIES_OPTION = 100
MAX_TOOL_SCHEMAS = 64
MAX_TOOL_SCHEMA_CHARS = 65536
MAX_TOOL_SCHEMAS_TOTAL_CHARS = 524_288  # all schemas together: ~130k tokens, more than fits any window
MAX_ID_CHARS = 256  # every id: org_id and agent_id (before UUID parsing), memory_ids, request/trace/span/session ids
MAX_SEARCH_LIMIT = 100
MAX_SEARCH_TAGS = 64  # a stored memory has at most 64 tags of 128 characters (adapters.embedded.validation)
MAX_TAG_CHARS = 128
MAX_SEARCH_CATEGORIES = 16  # five standard categories; room for a memory service's own
MAX_CATEGORY_CHARS = 64
MAX_FEEDBACK_IDS = 100
MAX_FEEDBACK_CHARS = 32  # "positive" | "negative" | "neutral", with room for spacing
MAX_NOTES_CHARS = 2000
MAX_PRINCIPAL_CONTEXT_BYTES = 8192  # gRPC AssembleContextRequest.principal_context (ignored), as big as a proof
MAX_ECHO_CHARS = 64


def check_items(count: int, limit: int, field: str) -> None:
    """InvalidRequestError naming ``field`` when a repeated field holds more than ``limit`` items."""
    if count > limit:
        raise InvalidRequestError(field, f"{field} exceeds {limit} items ({count})")


def check_chars(value: str, limit: int, field: str) -> None:
    """InvalidRequestError naming ``field`` when ``value`` is longer than ``limit`` characters."""
    if len(value) > limit:
        raise InvalidRequestError(field, f"{field} exceeds {limit} characters ({len(value)})")


def canonical_uuid(value: str, field: str) -> str:
    """Lowercase hyphenated form of a UUID string; InvalidRequestError naming ``field`` otherwise."""
    check_chars(value, MAX_ID_CHARS, field)  # before strip(): spaces around an id are bounded too
    text = value.strip()
    if not text:
        raise InvalidRequestError(field, f"{field} is required")
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise InvalidRequestError(field, f"{field} must be a UUID, got {text[:MAX_ECHO_CHARS]!r}") from None


def _unit_weight(value: float, field: str) -> None:
    if not math.isfinite(value) or value < 0:
        raise InvalidRequestError(field, f"{field} must be a finite number >= 0, got {value}")


def validate_assemble(request: AssembleRequest) -> AssembleRequest:
    """Check every bound of an assembly request; return it with canonical UUIDs and model."""
    org_id = canonical_uuid(request.org_id, "org_id")
    agent_id = canonical_uuid(request.agent_id, "agent_id")
    check_chars(request.model, MAX_MODEL_CHARS, "model")  # before strip(): padding is bounded too
    model = request.model.strip()
    if not model:
        raise InvalidRequestError("model", "model is required")
    check_chars(request.query, MAX_QUERY_CHARS, "query")
    check_items(len(request.recent_messages), MAX_MESSAGES, "recent_messages")
    for index, message in enumerate(request.recent_messages):
        check_chars(message.role, MAX_ROLE_CHARS, f"recent_messages[{index}].role")
        check_chars(message.content, MAX_CONTENT_CHARS, f"recent_messages[{index}].content")
    check_items(len(request.tool_schemas), MAX_TOOL_SCHEMAS, "tool_schemas")
    for index, schema in enumerate(request.tool_schemas):
        check_chars(schema, MAX_TOOL_SCHEMA_CHARS, f"tool_schemas[{index}]")
    total = sum(map(len, request.tool_schemas))
    if total > MAX_TOOL_SCHEMAS_TOTAL_CHARS:
        raise InvalidRequestError(
            "tool_schemas", f"tool_schemas exceed {MAX_TOOL_SCHEMAS_TOTAL_CHARS} characters together ({total})")
    options = request.options
    if not 0 <= options.max_memories <= MAX_MEMORIES_OPTION:
        raise InvalidRequestError(
            "options.max_memories", f"max_memories must be in 0..{MAX_MEMORIES_OPTION}, got {options.max_memories}"
        )
    for name in ("recency_weight", "relevance_weight", "usefulness_weight", "confidence_weight"):
        _unit_weight(getattr(options, name), f"options.{name}")
    if request.available_tokens < 0:
        raise InvalidRequestError("available_tokens", f"available_tokens must be >= 0, got {request.available_tokens}")
    for name in ("session_id", "directive_version_id", "request_id", "trace_id", "span_id"):
        check_chars(getattr(request, name), MAX_ID_CHARS, name)
    return attrs.evolve(request, org_id=org_id, agent_id=agent_id, model=model)


def validate_search(request: SearchRequest) -> SearchRequest:
    org_id = canonical_uuid(request.org_id, "org_id")
    agent_id = canonical_uuid(request.agent_id, "agent_id")
    check_chars(request.query, MAX_QUERY_CHARS, "query")
    if not request.query.strip():
        raise InvalidRequestError("query", "query is required")
    if not 0 <= request.limit <= MAX_SEARCH_LIMIT:
        raise InvalidRequestError("limit", f"limit must be in 0..{MAX_SEARCH_LIMIT} (0: default), got {request.limit}")
    if request.min_similarity is not None and not (
        math.isfinite(request.min_similarity) and 0.0 <= request.min_similarity <= 1.0
    ):
        raise InvalidRequestError("min_similarity", f"min_similarity must be in [0, 1], got {request.min_similarity}")
    _check_filter(request.categories, "categories", MAX_SEARCH_CATEGORIES, MAX_CATEGORY_CHARS)
    _check_filter(request.tags, "tags", MAX_SEARCH_TAGS, MAX_TAG_CHARS)
    for name in ("session_id", "request_id", "trace_id"):
        check_chars(getattr(request, name), MAX_ID_CHARS, name)
    return attrs.evolve(request, org_id=org_id, agent_id=agent_id)


def _check_filter(values: tuple[str, ...], field: str, max_items: int, max_chars: int) -> None:
    check_items(len(values), max_items, field)
    for index, value in enumerate(values):
        check_chars(value, max_chars, f"{field}[{index}]")
        if not value.strip():
            raise InvalidRequestError(f"{field}[{index}]", f"{field} must not contain blank values")


def validate_feedback(request: FeedbackRequest) -> FeedbackRequest:
    org_id = canonical_uuid(request.org_id, "org_id")
    if not request.memory_ids:
        raise InvalidRequestError("memory_ids", "memory_ids must name at least one memory")
    check_items(len(request.memory_ids), MAX_FEEDBACK_IDS, "memory_ids")
    ids = tuple(dict.fromkeys(canonical_uuid(v, f"memory_ids[{i}]") for i, v in enumerate(request.memory_ids)))
    check_chars(request.feedback, MAX_FEEDBACK_CHARS, "feedback")
    feedback = request.feedback.strip().lower()
    if feedback not in FEEDBACK_VALUES:
        raise InvalidRequestError(
            "feedback", f"feedback must be one of {', '.join(FEEDBACK_VALUES)}, got {request.feedback[:MAX_ECHO_CHARS]!r}")
    if request.notes is not None:
        check_chars(request.notes, MAX_NOTES_CHARS, "notes")
    for name in ("session_id", "trace_id", "request_id"):
        check_chars(getattr(request, name), MAX_ID_CHARS, name)
    return attrs.evolve(request, org_id=org_id, memory_ids=ids, feedback=feedback)
