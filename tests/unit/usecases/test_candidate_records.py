"""The explain record of a candidate carries each of its values in the field of that name."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs

from domain.model.assembly import Exclusion, ExclusionDetail, MemoryUsed
from domain.model.memory import MemoryHit
from domain.scoring import ScoredCandidate
from domain.usecases.candidates import packed_records, record

HIT = MemoryHit(memory_id="m1", org_id="o", agent_id="a", content="c", category="episodic", confidence=0.25,
                similarity=0.375, rank=7, source="vector", usefulness=0.875, created_at=datetime(2026, 1, 1, tzinfo=UTC))
CANDIDATE = ScoredCandidate(hit=HIT, score=0.125, relevance=0.5, recency=0.0625, usefulness=0.75)


def test_a_record_maps_every_value_to_its_own_field() -> None:
    assert record(CANDIDATE, Exclusion.FILTER, ExclusionDetail.NEAR_DUPLICATE, 42) == MemoryUsed(
        memory_id="m1", exclusion=Exclusion.FILTER, detail=ExclusionDetail.NEAR_DUPLICATE, composite_score=0.125,
        relevance_score=0.5, recency_score=0.0625, usefulness_score=0.75, rank=7, category="episodic",
        similarity=0.375, confidence=0.25, token_estimate=42, source="vector",
    )


def test_packed_records_say_included_or_over_budget() -> None:
    other = attrs.evolve(CANDIDATE, hit=attrs.evolve(HIT, memory_id="m2"))
    records = packed_records([CANDIDATE, other], [10, 20], ["m1"])
    assert [(r.memory_id, r.exclusion, r.detail, r.token_estimate) for r in records] == [
        ("m1", Exclusion.INCLUDED, "", 10), ("m2", Exclusion.BUDGET, ExclusionDetail.BUDGET, 20)]

