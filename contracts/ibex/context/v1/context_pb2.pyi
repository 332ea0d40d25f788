from contracts.ibex.auth.v1 import principal_context_pb2 as _principal_context_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AssembleContextRequest(_message.Message):
    __slots__ = ("agent_id", "org_id", "session_id", "query", "model", "directive_version_id", "available_tokens", "recent_messages", "options", "request_id", "trace_id", "span_id", "principal_context", "tool_schemas")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ORG_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DIRECTIVE_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RECENT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_SCHEMAS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    org_id: str
    session_id: str
    query: str
    model: str
    directive_version_id: str
    available_tokens: int
    recent_messages: _containers.RepeatedCompositeFieldContainer[Message]
    options: AssemblyOptions
    request_id: str
    trace_id: str
    span_id: str
    principal_context: _principal_context_pb2.PrincipalContext
    tool_schemas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, agent_id: _Optional[str] = ..., org_id: _Optional[str] = ..., session_id: _Optional[str] = ..., query: _Optional[str] = ..., model: _Optional[str] = ..., directive_version_id: _Optional[str] = ..., available_tokens: _Optional[int] = ..., recent_messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., options: _Optional[_Union[AssemblyOptions, _Mapping]] = ..., request_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., span_id: _Optional[str] = ..., principal_context: _Optional[_Union[_principal_context_pb2.PrincipalContext, _Mapping]] = ..., tool_schemas: _Optional[_Iterable[str]] = ...) -> None: ...

class AssemblyOptions(_message.Message):
    __slots__ = ("skip_cold_memories", "skip_hot_memories", "recency_weight", "relevance_weight", "usefulness_weight", "confidence_weight", "max_memories")
    SKIP_COLD_MEMORIES_FIELD_NUMBER: _ClassVar[int]
    SKIP_HOT_MEMORIES_FIELD_NUMBER: _ClassVar[int]
    RECENCY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    USEFULNESS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_MEMORIES_FIELD_NUMBER: _ClassVar[int]
    skip_cold_memories: bool
    skip_hot_memories: bool
    recency_weight: float
    relevance_weight: float
    usefulness_weight: float
    confidence_weight: float
    max_memories: int
    def __init__(self, skip_cold_memories: _Optional[bool] = ..., skip_hot_memories: _Optional[bool] = ..., recency_weight: _Optional[float] = ..., relevance_weight: _Optional[float] = ..., usefulness_weight: _Optional[float] = ..., confidence_weight: _Optional[float] = ..., max_memories: _Optional[int] = ...) -> None: ...

class AssembleContextResponse(_message.Message):
    __slots__ = ("assembled_context", "tokens_used", "memories_included", "memories_used", "directive_tokens", "history_tokens", "memory_tokens", "metrics", "request_id", "trace_id", "span_id", "score_schema", "degradation_level", "branches", "usable_budget", "estimate_kind")
    ASSEMBLED_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_USED_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_INCLUDED_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_USED_FIELD_NUMBER: _ClassVar[int]
    DIRECTIVE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    SCORE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    DEGRADATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    BRANCHES_FIELD_NUMBER: _ClassVar[int]
    USABLE_BUDGET_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_KIND_FIELD_NUMBER: _ClassVar[int]
    assembled_context: str
    tokens_used: int
    memories_included: int
    memories_used: _containers.RepeatedCompositeFieldContainer[MemoryUsed]
    directive_tokens: int
    history_tokens: int
    memory_tokens: int
    metrics: AssemblyMetrics
    request_id: str
    trace_id: str
    span_id: str
    score_schema: str
    degradation_level: str
    branches: _containers.RepeatedCompositeFieldContainer[BranchStatus]
    usable_budget: int
    estimate_kind: str
    def __init__(self, assembled_context: _Optional[str] = ..., tokens_used: _Optional[int] = ..., memories_included: _Optional[int] = ..., memories_used: _Optional[_Iterable[_Union[MemoryUsed, _Mapping]]] = ..., directive_tokens: _Optional[int] = ..., history_tokens: _Optional[int] = ..., memory_tokens: _Optional[int] = ..., metrics: _Optional[_Union[AssemblyMetrics, _Mapping]] = ..., request_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., span_id: _Optional[str] = ..., score_schema: _Optional[str] = ..., degradation_level: _Optional[str] = ..., branches: _Optional[_Iterable[_Union[BranchStatus, _Mapping]]] = ..., usable_budget: _Optional[int] = ..., estimate_kind: _Optional[str] = ...) -> None: ...

class BranchStatus(_message.Message):
    __slots__ = ("name", "outcome", "latency_ms", "detail")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    name: str
    outcome: str
    latency_ms: int
    detail: str
    def __init__(self, name: _Optional[str] = ..., outcome: _Optional[str] = ..., latency_ms: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class AssemblyMetrics(_message.Message):
    __slots__ = ("budget_calculation_ms", "directive_load_ms", "hot_memory_retrieval_ms", "cold_memory_retrieval_ms", "ranking_ms", "packing_ms", "formatting_ms", "total_ms", "candidates_evaluated")
    BUDGET_CALCULATION_MS_FIELD_NUMBER: _ClassVar[int]
    DIRECTIVE_LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    HOT_MEMORY_RETRIEVAL_MS_FIELD_NUMBER: _ClassVar[int]
    COLD_MEMORY_RETRIEVAL_MS_FIELD_NUMBER: _ClassVar[int]
    RANKING_MS_FIELD_NUMBER: _ClassVar[int]
    PACKING_MS_FIELD_NUMBER: _ClassVar[int]
    FORMATTING_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_EVALUATED_FIELD_NUMBER: _ClassVar[int]
    budget_calculation_ms: int
    directive_load_ms: int
    hot_memory_retrieval_ms: int
    cold_memory_retrieval_ms: int
    ranking_ms: int
    packing_ms: int
    formatting_ms: int
    total_ms: int
    candidates_evaluated: int
    def __init__(self, budget_calculation_ms: _Optional[int] = ..., directive_load_ms: _Optional[int] = ..., hot_memory_retrieval_ms: _Optional[int] = ..., cold_memory_retrieval_ms: _Optional[int] = ..., ranking_ms: _Optional[int] = ..., packing_ms: _Optional[int] = ..., formatting_ms: _Optional[int] = ..., total_ms: _Optional[int] = ..., candidates_evaluated: _Optional[int] = ...) -> None: ...

class MemoryUsed(_message.Message):
    __slots__ = ("memory_id", "composite_score", "relevance_score", "recency_score", "usefulness_score", "rank", "category", "exclusion", "similarity", "confidence", "token_estimate", "detail")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    COMPOSITE_SCORE_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    RECENCY_SCORE_FIELD_NUMBER: _ClassVar[int]
    USEFULNESS_SCORE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    EXCLUSION_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    composite_score: float
    relevance_score: float
    recency_score: float
    usefulness_score: float
    rank: int
    category: str
    exclusion: str
    similarity: float
    confidence: float
    token_estimate: int
    detail: str
    def __init__(self, memory_id: _Optional[str] = ..., composite_score: _Optional[float] = ..., relevance_score: _Optional[float] = ..., recency_score: _Optional[float] = ..., usefulness_score: _Optional[float] = ..., rank: _Optional[int] = ..., category: _Optional[str] = ..., exclusion: _Optional[str] = ..., similarity: _Optional[float] = ..., confidence: _Optional[float] = ..., token_estimate: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class SearchMemoriesRequest(_message.Message):
    __slots__ = ("agent_id", "org_id", "query", "limit", "min_similarity", "categories", "tags", "session_id")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ORG_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    MIN_SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    org_id: str
    query: str
    limit: int
    min_similarity: float
    categories: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    session_id: str
    def __init__(self, agent_id: _Optional[str] = ..., org_id: _Optional[str] = ..., query: _Optional[str] = ..., limit: _Optional[int] = ..., min_similarity: _Optional[float] = ..., categories: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., session_id: _Optional[str] = ...) -> None: ...

class SearchMemoriesResponse(_message.Message):
    __slots__ = ("memories", "total_candidates", "search_time_ms")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    SEARCH_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    total_candidates: int
    search_time_ms: int
    def __init__(self, memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ..., total_candidates: _Optional[int] = ..., search_time_ms: _Optional[int] = ...) -> None: ...

class Memory(_message.Message):
    __slots__ = ("id", "content", "category", "confidence", "composite_score", "retrieval_count", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    COMPOSITE_SCORE_FIELD_NUMBER: _ClassVar[int]
    RETRIEVAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    content: str
    category: str
    confidence: float
    composite_score: float
    retrieval_count: int
    created_at: str
    def __init__(self, id: _Optional[str] = ..., content: _Optional[str] = ..., category: _Optional[str] = ..., confidence: _Optional[float] = ..., composite_score: _Optional[float] = ..., retrieval_count: _Optional[int] = ..., created_at: _Optional[str] = ...) -> None: ...

class RecordMemoryFeedbackRequest(_message.Message):
    __slots__ = ("memory_ids", "session_id", "trace_id", "org_id", "feedback")
    MEMORY_IDS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    ORG_ID_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    memory_ids: _containers.RepeatedScalarFieldContainer[str]
    session_id: str
    trace_id: str
    org_id: str
    feedback: str
    def __init__(self, memory_ids: _Optional[_Iterable[str]] = ..., session_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., org_id: _Optional[str] = ..., feedback: _Optional[str] = ...) -> None: ...

class RecordMemoryFeedbackResponse(_message.Message):
    __slots__ = ("success", "updates")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    success: bool
    updates: _containers.RepeatedCompositeFieldContainer[MemoryScoreUpdate]
    def __init__(self, success: _Optional[bool] = ..., updates: _Optional[_Iterable[_Union[MemoryScoreUpdate, _Mapping]]] = ...) -> None: ...

class MemoryScoreUpdate(_message.Message):
    __slots__ = ("memory_id", "previous_score", "new_score", "error")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_SCORE_FIELD_NUMBER: _ClassVar[int]
    NEW_SCORE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    previous_score: float
    new_score: float
    error: str
    def __init__(self, memory_id: _Optional[str] = ..., previous_score: _Optional[float] = ..., new_score: _Optional[float] = ..., error: _Optional[str] = ...) -> None: ...
