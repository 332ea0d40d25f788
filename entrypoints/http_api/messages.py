"""The ``ibex.context.v1`` messages as the HTTP edge's JSON mapping sees them (names and types).

Field names and kinds mirror ``contracts/ibex/context/v1/context.proto`` (the generated code may
not be imported here: the HTTP edge is independent of the gRPC contract stubs); a unit test
compares these descriptions with the proto descriptor so they cannot drift.
"""

from __future__ import annotations

from entrypoints.http_api.json_mapping import BOOL, FLOAT, INT32, MESSAGE, STRING, Field, MessageSpec

PRINCIPAL_CONTEXT_REFUSAL = (
    "principal_context is not accepted over HTTP; send a signed proof in the X-Ibex-Principal-Proof header"
)


def _strings(*names: str) -> tuple[Field, ...]:
    return tuple(Field(name, STRING) for name in names)


MESSAGE_SPEC = MessageSpec("Message", _strings("role", "content"))

ASSEMBLY_OPTIONS = MessageSpec("AssemblyOptions", (
    Field("skip_cold_memories", BOOL),
    Field("skip_hot_memories", BOOL),
    Field("recency_weight", FLOAT),
    Field("relevance_weight", FLOAT),
    Field("usefulness_weight", FLOAT),
    Field("confidence_weight", FLOAT),
    Field("max_memories", INT32),
))

ASSEMBLE_CONTEXT_REQUEST = MessageSpec("AssembleContextRequest", (
    *_strings("agent_id", "org_id", "session_id", "query", "model", "directive_version_id"),
    Field("available_tokens", INT32),
    Field("recent_messages", MESSAGE, repeated=True, message=MESSAGE_SPEC),
    Field("options", MESSAGE, message=ASSEMBLY_OPTIONS),
    *_strings("request_id", "trace_id", "span_id"),
    Field("principal_context", MESSAGE, refusal=PRINCIPAL_CONTEXT_REFUSAL),
    Field("tool_schemas", STRING, repeated=True),
))

BRANCH_STATUS = MessageSpec("BranchStatus", (
    *_strings("name", "outcome"),
    Field("latency_ms", INT32),
    Field("detail", STRING),
))

ASSEMBLY_METRICS = MessageSpec("AssemblyMetrics", tuple(
    Field(name, INT32)
    for name in (
        "budget_calculation_ms", "directive_load_ms", "hot_memory_retrieval_ms", "cold_memory_retrieval_ms",
        "ranking_ms", "packing_ms", "formatting_ms", "total_ms", "candidates_evaluated",
    )
))

MEMORY_USED = MessageSpec("MemoryUsed", (
    Field("memory_id", STRING),
    *(Field(name, FLOAT) for name in ("composite_score", "relevance_score", "recency_score", "usefulness_score")),
    Field("rank", INT32),
    *_strings("category", "exclusion"),
    Field("similarity", FLOAT),
    Field("confidence", FLOAT),
    Field("token_estimate", INT32),
    Field("detail", STRING),
))

ASSEMBLE_CONTEXT_RESPONSE = MessageSpec("AssembleContextResponse", (
    Field("assembled_context", STRING),
    Field("tokens_used", INT32),
    Field("memories_included", INT32),
    Field("memories_used", MESSAGE, repeated=True, message=MEMORY_USED),
    *(Field(name, INT32) for name in ("directive_tokens", "history_tokens", "memory_tokens")),
    Field("metrics", MESSAGE, message=ASSEMBLY_METRICS),
    *_strings("request_id", "trace_id", "span_id", "score_schema", "degradation_level"),
    Field("branches", MESSAGE, repeated=True, message=BRANCH_STATUS),
    Field("usable_budget", INT32),
    Field("estimate_kind", STRING),
))

SEARCH_MEMORIES_REQUEST = MessageSpec("SearchMemoriesRequest", (
    *_strings("agent_id", "org_id", "query"),
    Field("limit", INT32),
    Field("min_similarity", FLOAT),
    Field("categories", STRING, repeated=True),
    Field("tags", STRING, repeated=True),
    Field("session_id", STRING),
))

MEMORY = MessageSpec("Memory", (
    *_strings("id", "content", "category"),
    Field("confidence", FLOAT),
    Field("composite_score", FLOAT),
    Field("retrieval_count", INT32),
    Field("created_at", STRING),
))

SEARCH_MEMORIES_RESPONSE = MessageSpec("SearchMemoriesResponse", (
    Field("memories", MESSAGE, repeated=True, message=MEMORY),
    Field("total_candidates", INT32),
    Field("search_time_ms", INT32),
))

RECORD_MEMORY_FEEDBACK_REQUEST = MessageSpec("RecordMemoryFeedbackRequest", (
    Field("memory_ids", STRING, repeated=True),
    *_strings("session_id", "trace_id", "org_id", "feedback"),
))

MEMORY_SCORE_UPDATE = MessageSpec("MemoryScoreUpdate", (
    Field("memory_id", STRING),
    Field("previous_score", FLOAT),
    Field("new_score", FLOAT),
    Field("error", STRING),
))

RECORD_MEMORY_FEEDBACK_RESPONSE = MessageSpec("RecordMemoryFeedbackResponse", (
    Field("success", BOOL),
    Field("updates", MESSAGE, repeated=True, message=MEMORY_SCORE_UPDATE),
))

ALL_MESSAGES = (
    MESSAGE_SPEC, ASSEMBLY_OPTIONS, ASSEMBLE_CONTEXT_REQUEST, BRANCH_STATUS, ASSEMBLY_METRICS, MEMORY_USED,
    ASSEMBLE_CONTEXT_RESPONSE, SEARCH_MEMORIES_REQUEST, MEMORY, SEARCH_MEMORIES_RESPONSE,
    RECORD_MEMORY_FEEDBACK_REQUEST, MEMORY_SCORE_UPDATE, RECORD_MEMORY_FEEDBACK_RESPONSE,
)
