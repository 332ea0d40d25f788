"""From retrieved hits to ranked candidates, with an explain record for everything dropped.

Order of the gates: tenant fence (hits of another org/agent never reach scoring), dropped
(malformed) items, scoring, dedupe hot+cold by id, then the best ``max_memories``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import attrs

from domain.model.assembly import EXCLUSION_BUDGET, EXCLUSION_FILTER, EXCLUSION_INCLUDED, AssemblyOptions, MemoryUsed
from domain.model.memory import DroppedItem, MemoryHit
from domain.scoring import ScoredCandidate, dedupe, keep_best, score_hits

DETAIL_TENANT_MISMATCH = "tenant_mismatch"
DETAIL_DUPLICATE = "duplicate"
DETAIL_MAX_MEMORIES = "max_memories"
DETAIL_BUDGET = "budget"


@attrs.frozen
class CandidatePool:
    ranked: tuple[ScoredCandidate, ...]  # what the packer sees, canonical order
    explained: tuple[MemoryUsed, ...]  # records of candidates dropped before packing
    fenced: int  # hits dropped by the tenant fence
    malformed: int  # items dropped by the sources


def build_pool(
    *,
    org_id: str,
    agent_id: str,
    hits: Sequence[MemoryHit],
    dropped: Sequence[DroppedItem],
    options: AssemblyOptions,
    now: datetime,
) -> CandidatePool:
    own = [hit for hit in hits if hit.org_id == org_id and hit.agent_id == agent_id]
    foreign = [hit for hit in hits if not (hit.org_id == org_id and hit.agent_id == agent_id)]
    kept, duplicates = dedupe(score_hits(own, options, now))
    ranked, over_cap = keep_best(kept, options.max_memories)
    explained = (
        *(_hit_record(hit, DETAIL_TENANT_MISMATCH) for hit in foreign),
        *(_dropped_record(item) for item in dropped),
        *(record(c, EXCLUSION_FILTER, DETAIL_DUPLICATE, 0) for c in duplicates),
        *(record(c, EXCLUSION_FILTER, DETAIL_MAX_MEMORIES, 0) for c in over_cap),
    )
    return CandidatePool(ranked=ranked, explained=explained, fenced=len(foreign), malformed=len(dropped))


def record(candidate: ScoredCandidate, exclusion: str, detail: str, cost: int) -> MemoryUsed:
    hit = candidate.hit
    return MemoryUsed(
        memory_id=hit.memory_id,
        exclusion=exclusion,
        detail=detail,
        composite_score=candidate.score,
        relevance_score=candidate.relevance,
        recency_score=candidate.recency,
        usefulness_score=candidate.usefulness,
        rank=hit.rank,
        category=hit.category,
        similarity=hit.similarity,
        confidence=hit.confidence,
        token_estimate=cost,
        source=hit.source,
    )


def packed_records(
    ranked: Sequence[ScoredCandidate], costs: Sequence[int], included: Iterable[str]
) -> tuple[MemoryUsed, ...]:
    chosen = set(included)
    return tuple(
        record(c, EXCLUSION_INCLUDED, "", cost) if c.memory_id in chosen else record(c, EXCLUSION_BUDGET, DETAIL_BUDGET, cost)
        for c, cost in zip(ranked, costs, strict=True)
    )


def _hit_record(hit: MemoryHit, detail: str) -> MemoryUsed:
    return MemoryUsed(
        memory_id=hit.memory_id, exclusion=EXCLUSION_FILTER, detail=detail, composite_score=0.0,
        relevance_score=0.0, recency_score=0.0, usefulness_score=0.0, rank=hit.rank,
        category=hit.category, similarity=hit.similarity, confidence=hit.confidence,
        token_estimate=0, source=hit.source,
    )


def _dropped_record(item: DroppedItem) -> MemoryUsed:
    return MemoryUsed(
        memory_id=item.memory_id, exclusion=EXCLUSION_FILTER, detail=item.reason, composite_score=0.0,
        relevance_score=0.0, recency_score=0.0, usefulness_score=0.0, rank=0, category="",
        similarity=0.0, confidence=0.0, token_estimate=0,
    )
