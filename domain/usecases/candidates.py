"""From retrieved hits to ranked candidates, with an explain record for everything dropped.

Order of the gates: tenant fence (hits of another org/agent never reach scoring), dropped
(malformed) items, scoring, then the schema's own screening, then the best ``max_memories``:

* ``relevance_v1`` (``domain.relevance_policy``): one per id (``duplicate``), relevance floor,
  near duplicates and the hot bound;
* ``interim_v1`` and ``weighted_v1`` (the reference's): dedupe hot+cold by id (``duplicate``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import attrs

from domain.model.assembly import AssemblyOptions, Exclusion, ExclusionDetail, MemoryUsed, ScoreSchema
from domain.model.memory import DroppedItem, MemoryHit
from domain.relevance_policy import RelevancePolicy, UncachedTextProfiles, screen
from domain.scoring import ScoredCandidate, dedupe, keep_best, score_hits
from ports.text_profiles import TextProfiles


@attrs.frozen
class CandidatePool:
    ranked: tuple[ScoredCandidate, ...]  # what the packer sees, canonical order
    explained: tuple[MemoryUsed, ...]  # records of candidates dropped before packing
    fenced: int  # hits dropped by the tenant fence
    malformed: int  # items dropped by the sources


@attrs.frozen
class PoolRequest:
    org_id: str
    agent_id: str
    hot: tuple[MemoryHit, ...]
    found: tuple[MemoryHit, ...]  # search hits
    dropped: tuple[DroppedItem, ...]
    options: AssemblyOptions
    schema: str  # the score schema that applies (``domain.scoring.score_schema``)
    query_text: str  # what relevance is measured against: the query and the last user message
    now: datetime
    relevance: RelevancePolicy


def build_pool(request: PoolRequest, profiles: TextProfiles = UncachedTextProfiles()) -> CandidatePool:
    def own(hit: MemoryHit) -> bool:
        return hit.org_id == request.org_id and hit.agent_id == request.agent_id

    hits = request.hot + request.found
    foreign = [hit for hit in hits if not own(hit)]
    if request.schema == ScoreSchema.RELEVANCE:
        hot, found = [h for h in request.hot if own(h)], [h for h in request.found if own(h)]
        screened = screen(hot, found, request.query_text, request.relevance, request.now, profiles)
        kept, screened_out = screened.kept, screened.excluded
    else:
        kept, duplicates = dedupe(score_hits([h for h in hits if own(h)], request.options, request.now))
        screened_out = tuple((c, ExclusionDetail.DUPLICATE) for c in duplicates)
    ranked, over_cap = keep_best(kept, request.options.max_memories)
    explained = (
        *(_hit_record(hit, ExclusionDetail.TENANT_MISMATCH) for hit in foreign),
        *(_dropped_record(item) for item in request.dropped),
        *(record(c, Exclusion.FILTER, detail, 0) for c, detail in screened_out),
        *(record(c, Exclusion.FILTER, ExclusionDetail.MAX_MEMORIES, 0) for c in over_cap),
    )
    return CandidatePool(ranked=ranked, explained=explained, fenced=len(foreign), malformed=len(request.dropped))


def record(candidate: ScoredCandidate, exclusion: str, detail: str, cost: int) -> MemoryUsed:
    hit = candidate.hit
    # Positional, in MemoryUsed's field order: a class called with keywords builds a dict of
    # them per call, and this runs once for every candidate of every assembly.
    return MemoryUsed(
        hit.memory_id,  # memory_id
        exclusion,
        detail,
        candidate.score,  # composite_score
        candidate.relevance,  # relevance_score
        candidate.recency,  # recency_score
        candidate.usefulness,  # usefulness_score
        hit.rank,
        hit.category,
        hit.similarity,
        hit.confidence,
        cost,  # token_estimate
        hit.source,
    )


def packed_records(
    ranked: Sequence[ScoredCandidate], costs: Sequence[int], included: Iterable[str]
) -> tuple[MemoryUsed, ...]:
    chosen = set(included)
    return tuple(
        record(c, Exclusion.INCLUDED, "", cost) if c.memory_id in chosen else record(c, Exclusion.BUDGET, ExclusionDetail.BUDGET, cost)
        for c, cost in zip(ranked, costs, strict=True)
    )


def _hit_record(hit: MemoryHit, detail: str) -> MemoryUsed:
    return MemoryUsed(
        memory_id=hit.memory_id, exclusion=Exclusion.FILTER, detail=detail, composite_score=0.0,
        relevance_score=0.0, recency_score=0.0, usefulness_score=0.0, rank=hit.rank,
        category=hit.category, similarity=hit.similarity, confidence=hit.confidence,
        token_estimate=0, source=hit.source,
    )


def _dropped_record(item: DroppedItem) -> MemoryUsed:
    return MemoryUsed(
        memory_id=item.memory_id, exclusion=Exclusion.FILTER, detail=item.reason, composite_score=0.0,
        relevance_score=0.0, recency_score=0.0, usefulness_score=0.0, rank=0, category="",
        similarity=0.0, confidence=0.0, token_estimate=0,
    )
