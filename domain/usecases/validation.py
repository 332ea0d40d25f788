"""Request bounds shared by every entrypoint; a violation names the field."""

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
MAX_ID_CHARS = 256
MAX_SEARCH_LIMIT = 100
MAX_FEEDBACK_IDS = 100
MAX_NOTES_CHARS = 2000


def canonical_uuid(value: str, field: str) -> str:
    """Lowercase hyphenated form of a UUID string; InvalidRequestError naming ``field`` otherwise."""
    text = value.strip()
    if not text:
        raise InvalidRequestError(field, f"{field} is required")
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise InvalidRequestError(field, f"{field} must be a UUID, got {text[:64]!r}") from None


def _max_chars(value: str, limit: int, field: str) -> None:
    if len(value) > limit:
        raise InvalidRequestError(field, f"{field} exceeds {limit} characters ({len(value)})")


def _unit_weight(value: float, field: str) -> None:
    if not math.isfinite(value) or value < 0:
        raise InvalidRequestError(field, f"{field} must be a finite number >= 0, got {value}")


def validate_assemble(request: AssembleRequest) -> AssembleRequest:
    """Check every bound of an assembly request; return it with canonical UUIDs and model."""
    org_id = canonical_uuid(request.org_id, "org_id")
    agent_id = canonical_uuid(request.agent_id, "agent_id")
    model = request.model.strip()
    if not model:
        raise InvalidRequestError("model", "model is required")
    _max_chars(model, MAX_MODEL_CHARS, "model")
    _max_chars(request.query, MAX_QUERY_CHARS, "query")
    if len(request.recent_messages) > MAX_MESSAGES:
        raise InvalidRequestError("recent_messages", f"recent_messages exceeds {MAX_MESSAGES} items")
    for index, message in enumerate(request.recent_messages):
        _max_chars(message.role, MAX_ROLE_CHARS, f"recent_messages[{index}].role")
        _max_chars(message.content, MAX_CONTENT_CHARS, f"recent_messages[{index}].content")
    if len(request.tool_schemas) > MAX_TOOL_SCHEMAS:
        raise InvalidRequestError("tool_schemas", f"tool_schemas exceeds {MAX_TOOL_SCHEMAS} items")
    for index, schema in enumerate(request.tool_schemas):
        _max_chars(schema, MAX_TOOL_SCHEMA_CHARS, f"tool_schemas[{index}]")
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
        _max_chars(getattr(request, name), MAX_ID_CHARS, name)
    return attrs.evolve(request, org_id=org_id, agent_id=agent_id, model=model)


def validate_search(request: SearchRequest) -> SearchRequest:
    org_id = canonical_uuid(request.org_id, "org_id")
    agent_id = canonical_uuid(request.agent_id, "agent_id")
    if not request.query.strip():
        raise InvalidRequestError("query", "query is required")
    _max_chars(request.query, MAX_QUERY_CHARS, "query")
    if not 0 <= request.limit <= MAX_SEARCH_LIMIT:
        raise InvalidRequestError("limit", f"limit must be in 0..{MAX_SEARCH_LIMIT} (0: default), got {request.limit}")
    if request.min_similarity is not None and not (
        math.isfinite(request.min_similarity) and 0.0 <= request.min_similarity <= 1.0
    ):
        raise InvalidRequestError("min_similarity", f"min_similarity must be in [0, 1], got {request.min_similarity}")
    for index, value in enumerate(request.categories):
        if not value.strip():
            raise InvalidRequestError(f"categories[{index}]", "categories must not contain blank values")
    for index, value in enumerate(request.tags):
        if not value.strip():
            raise InvalidRequestError(f"tags[{index}]", "tags must not contain blank values")
    _max_chars(request.session_id, MAX_ID_CHARS, "session_id")
    return attrs.evolve(request, org_id=org_id, agent_id=agent_id)


def validate_feedback(request: FeedbackRequest) -> FeedbackRequest:
    org_id = canonical_uuid(request.org_id, "org_id")
    if not request.memory_ids:
        raise InvalidRequestError("memory_ids", "memory_ids must name at least one memory")
    if len(request.memory_ids) > MAX_FEEDBACK_IDS:
        raise InvalidRequestError("memory_ids", f"memory_ids exceeds {MAX_FEEDBACK_IDS} items")
    ids = tuple(dict.fromkeys(canonical_uuid(v, f"memory_ids[{i}]") for i, v in enumerate(request.memory_ids)))
    feedback = request.feedback.strip().lower()
    if feedback not in FEEDBACK_VALUES:
        raise InvalidRequestError("feedback", f"feedback must be one of {', '.join(FEEDBACK_VALUES)}, got {request.feedback!r}")
    if request.notes is not None:
        _max_chars(request.notes, MAX_NOTES_CHARS, "notes")
    for name in ("session_id", "trace_id", "request_id"):
        _max_chars(getattr(request, name), MAX_ID_CHARS, name)
    return attrs.evolve(request, org_id=org_id, memory_ids=ids, feedback=feedback)
