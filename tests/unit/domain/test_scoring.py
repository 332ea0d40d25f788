from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from domain.model.assembly import AssemblyOptions
from domain.model.memory import MemoryHit
from domain.scoring import (
    dedupe,
    keep_best,
    recency_factor,
    score_hit,
    score_hits,
    score_schema,
)

NOW = datetime(2026, 11, 1, tzinfo=UTC)
INTERIM = AssemblyOptions()


def hit(memory_id: str = "m", similarity: float = 0.8, confidence: float = 0.9, **extra: object) -> MemoryHit:
    fields: dict[str, object] = dict(
        memory_id=memory_id, org_id="o", agent_id="a", content="c", category="preference",
        confidence=confidence, similarity=similarity, rank=1, source="hot_cache",
    )
    fields.update(extra)
    return MemoryHit(**fields)  # type: ignore[arg-type]


def test_interim_score_matches_the_reference() -> None:
    assert score_hit(hit(similarity=1.0, confidence=0.0), INTERIM, NOW).score == pytest.approx(0.85)
    assert score_hit(hit(similarity=0.5, confidence=0.5), INTERIM, NOW).score == pytest.approx(0.5)
    assert score_schema(INTERIM) == "interim_v1"


def test_out_of_range_similarity_is_clamped_not_fatal() -> None:
    assert score_hit(hit(similarity=-0.3, confidence=1.0), INTERIM, NOW).score == pytest.approx(0.15)
    assert score_hit(hit(similarity=1.4, confidence=0.0), INTERIM, NOW).score == pytest.approx(0.85)


@pytest.mark.parametrize(("category", "half_life"), [
    ("factual", 180), ("procedural", 120), ("preference", 45), ("behavioral", 30), ("episodic", 14), ("custom", 14),
])
def test_recency_halves_after_one_half_life(category: str, half_life: float) -> None:
    created = NOW - timedelta(days=half_life)
    assert recency_factor(category, created, NOW) == pytest.approx(0.5)


def test_recency_edges() -> None:
    assert recency_factor("factual", None, NOW) == 0.0
    assert recency_factor("factual", NOW + timedelta(days=3), NOW) == 1.0


def test_weighted_schema_is_the_normalised_weighted_sum() -> None:
    options = AssemblyOptions(relevance_weight=2.0, recency_weight=1.0, usefulness_weight=1.0, confidence_weight=0.0)
    created = NOW - timedelta(days=45)
    scored = score_hit(hit(similarity=0.6, confidence=0.2, usefulness=0.9, created_at=created), options, NOW)
    expected = (2.0 * 0.6 + 1.0 * 0.5 + 1.0 * 0.9) / 4.0
    assert scored.score == pytest.approx(expected)
    assert (scored.relevance, scored.usefulness) == (0.6, 0.9)
    assert scored.recency == pytest.approx(0.5)
    assert score_schema(options) == "weighted_v1"


def test_missing_usefulness_is_a_neutral_prior() -> None:
    options = AssemblyOptions(usefulness_weight=1.0)
    assert score_hit(hit(), options, NOW).score == 0.5


def test_dedupe_keeps_the_higher_score() -> None:
    hot = hit("same", similarity=0.3, source="hot_cache")
    cold = hit("same", similarity=0.9, source="vector")
    kept, losers = dedupe(score_hits([hot, cold], INTERIM, NOW))
    assert [c.hit.similarity for c in kept] == [0.9]
    assert [c.hit.source for c in losers] == ["hot_cache"]


def test_dedupe_equal_scores_keeps_the_lower_rank() -> None:
    hot = hit("same", rank=5, source="hot_cache")
    cold = hit("same", rank=1, source="vector")
    kept, _ = dedupe(score_hits([hot, cold], INTERIM, NOW))
    assert kept[0].hit.source == "vector"


def test_max_memories_keeps_the_best_not_the_first() -> None:
    candidates = score_hits([hit("a", similarity=0.1), hit("b", similarity=0.9), hit("c", similarity=0.5)], INTERIM, NOW)
    kept, rest = keep_best(candidates, 2)
    assert [c.memory_id for c in kept] == ["b", "c"]
    assert [c.memory_id for c in rest] == ["a"]
    everything, none = keep_best(candidates, 0)
    assert len(everything) == 3 and none == ()


def test_every_score_is_a_unit_interval_value() -> None:
    options = AssemblyOptions(recency_weight=1.0, relevance_weight=1.0, usefulness_weight=1.0, confidence_weight=1.0)
    for similarity in (-1.0, 0.0, 0.5, 1.0, 2.0):
        value = score_hit(hit(similarity=similarity, usefulness=1.0, created_at=NOW), options, NOW).score
        assert 0.0 <= value <= 1.0 and math.isfinite(value)
