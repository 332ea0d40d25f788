"""The AssembleContext use case's input and output values."""

from __future__ import annotations

import enum

import attrs

from domain.model.messages import Message


class ScoreSchema(enum.StrEnum):
    INTERIM = "interim_v1"
    WEIGHTED = "weighted_v1"  # chosen by the request: any weight > 0
    RELEVANCE = "relevance_v1"


SCORE_POLICIES = (ScoreSchema.RELEVANCE, ScoreSchema.INTERIM)  # selectable when no request weight is > 0


class DegradationLevel(enum.StrEnum):
    L0 = "L0"  # both memory sides usable
    L1 = "L1"  # one side unusable
    L2 = "L2"  # neither: directive only


class Branch(enum.StrEnum):
    DIRECTIVE = "directive"
    HOT = "hot"
    COLD = "cold"


class BranchOutcome(enum.StrEnum):
    SUCCESS = "success"
    TIMEOUT = "timeout"
    ERROR = "error"
    DENIED = "denied"
    SKIPPED = "skipped"


class Exclusion(enum.StrEnum):
    INCLUDED = "included"
    BUDGET = "budget"
    FILTER = "filter"


class ExclusionDetail(enum.StrEnum):
    """Why a candidate was left out (a source's own reason for a malformed item is free text)."""

    NONE = ""  # included
    BUDGET = "budget"
    MAX_MEMORIES = "max_memories"
    TENANT_MISMATCH = "tenant_mismatch"
    DUPLICATE = "duplicate"
    BELOW_RELEVANCE_FLOOR = "below_relevance_floor"
    NEAR_DUPLICATE = "near_duplicate"
    HOT_BOUND = "hot_bound"


@attrs.frozen
class AssemblyOptions:
    skip_cold_memories: bool = False
    skip_hot_memories: bool = False
    recency_weight: float = 0.0
    relevance_weight: float = 0.0
    usefulness_weight: float = 0.0
    confidence_weight: float = 0.0
    max_memories: int = 0

    @property
    def uses_weights(self) -> bool:
        return any(
            w > 0
            for w in (
                self.recency_weight,
                self.relevance_weight,
                self.usefulness_weight,
                self.confidence_weight,
            )
        )


@attrs.frozen
class AssembleRequest:
    org_id: str
    agent_id: str
    model: str
    query: str = ""
    recent_messages: tuple[Message, ...] = attrs.field(default=(), converter=tuple)
    tool_schemas: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    options: AssemblyOptions = AssemblyOptions()
    available_tokens: int = 0
    session_id: str = ""
    directive_version_id: str = ""
    request_id: str = ""
    trace_id: str = ""
    span_id: str = ""
    deadline_s: float | None = None  # caller's remaining time budget, seconds (None: no caller deadline)


@attrs.frozen
class BranchStatus:
    name: Branch
    outcome: BranchOutcome
    latency_ms: float
    detail: str = ""


@attrs.frozen
class MemoryUsed:
    """The explain record of one candidate that reached scoring."""

    memory_id: str
    exclusion: Exclusion
    detail: str  # an ExclusionDetail, or a source's reason for a malformed item
    composite_score: float
    relevance_score: float
    recency_score: float
    usefulness_score: float
    rank: int
    category: str
    similarity: float
    confidence: float
    token_estimate: int  # the cost the packer charged (wrapped element + separator)
    source: str = ""


@attrs.frozen
class AssemblyMetrics:
    budget_calculation_ms: float = 0.0
    directive_load_ms: float = 0.0
    hot_memory_retrieval_ms: float = 0.0
    cold_memory_retrieval_ms: float = 0.0
    ranking_ms: float = 0.0
    packing_ms: float = 0.0
    formatting_ms: float = 0.0
    total_ms: float = 0.0
    candidates_evaluated: int = 0


@attrs.frozen
class AssemblyResult:
    assembled_context: str
    tokens_used: int
    memories_included: int
    memories_used: tuple[MemoryUsed, ...]
    directive_tokens: int
    history_tokens: int
    memory_tokens: int
    metrics: AssemblyMetrics
    score_schema: ScoreSchema
    degradation_level: DegradationLevel
    branches: tuple[BranchStatus, ...]
    usable_budget: int
    estimate_kind: str
    packing_path: str  # a domain.packer.PackingPath (the model does not depend on the packer)
    nonce: str
    request_id: str = ""
    trace_id: str = ""
    span_id: str = ""
