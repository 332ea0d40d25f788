"""Candidate scoring: the interim score, the weighted schema, dedupe and the best-N cap.

* Interim (``interim_v1``, the reference): ``0.85 * similarity + 0.15 * confidence``.
* Weighted (``weighted_v1``, when any request weight is > 0): the normalised weighted sum
  ``(wr*relevance + wt*recency + wu*usefulness + wc*confidence) / (wr + wt + wu + wc)`` with
  relevance = similarity, recency = ``exp(-ln2 * age_days / half_life(category))`` (half-lives in
  CATEGORY_HALF_LIFE_DAYS, unknown categories 14 days, unknown age 0.0, future dates 1.0),
  usefulness = the source's usefulness score (0.5, a neutral prior, when the source has none).

Similarity outside [0, 1] (a negative cosine, say) is clamped; confidence must already be in
[0, 1] (sources validate it). Every score is in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime

import attrs

from domain.model.assembly import AssemblyOptions, ScoreSchema
from domain.model.memory import MemoryHit

INTERIM_SIMILARITY_WEIGHT = 0.85
INTERIM_CONFIDENCE_WEIGHT = 0.15
CATEGORY_HALF_LIFE_DAYS = {
    "factual": 180.0,
    "procedural": 120.0,
    "preference": 45.0,
    "behavioral": 30.0,
    "episodic": 14.0,
}
UNKNOWN_CATEGORY_HALF_LIFE_DAYS = 14.0
NEUTRAL_USEFULNESS = 0.5
_SECONDS_PER_DAY = 86400.0
_LN2 = math.log(2.0)


@attrs.frozen
class ScoredCandidate:
    hit: MemoryHit
    score: float
    relevance: float
    recency: float
    usefulness: float

    @property
    def memory_id(self) -> str:
        return self.hit.memory_id

    @property
    def canonical_key(self) -> tuple[float, str]:
        return (-self.score, self.memory_id)


def clamp_unit(value: float) -> float:
    """``value`` clamped to [0, 1]; NaN becomes 0.0."""
    if 0.0 <= value <= 1.0:
        return value
    return 1.0 if value > 1.0 else 0.0


def recency_factor(category: str, created_at: datetime | None, now: datetime) -> float:
    if created_at is None:
        return 0.0
    age_days = max(0.0, (now - created_at).total_seconds() / _SECONDS_PER_DAY)
    half_life = CATEGORY_HALF_LIFE_DAYS.get(category, UNKNOWN_CATEGORY_HALF_LIFE_DAYS)
    return math.exp(-_LN2 * age_days / half_life)


def score_schema(options: AssemblyOptions, policy: ScoreSchema = ScoreSchema.INTERIM) -> ScoreSchema:
    """The schema that applies: request weights > 0 select ``weighted_v1`` (SPEC 2.12), otherwise
    the configured ``policy`` (``relevance_v1`` by default, or the reference's ``interim_v1``)."""
    return ScoreSchema.WEIGHTED if options.uses_weights else policy


def score_hit(hit: MemoryHit, options: AssemblyOptions, now: datetime) -> ScoredCandidate:
    return _score(hit, _weights(options), now)


def score_hits(hits: Iterable[MemoryHit], options: AssemblyOptions, now: datetime) -> tuple[ScoredCandidate, ...]:
    weights = _weights(options)
    return tuple(_score(hit, weights, now) for hit in hits)


_Weights = tuple[float, float, float, float]


def _weights(options: AssemblyOptions) -> _Weights | None:
    """(relevance, recency, usefulness, confidence) weights, negatives as 0; None: interim schema."""
    if not options.uses_weights:
        return None
    return (
        max(0.0, options.relevance_weight),
        max(0.0, options.recency_weight),
        max(0.0, options.usefulness_weight),
        max(0.0, options.confidence_weight),
    )


def _score(hit: MemoryHit, weights: _Weights | None, now: datetime) -> ScoredCandidate:
    relevance = clamp_unit(hit.similarity)
    recency = recency_factor(hit.category, hit.created_at, now)
    usefulness = NEUTRAL_USEFULNESS if hit.usefulness is None else clamp_unit(hit.usefulness)
    confidence = clamp_unit(hit.confidence)
    if weights is None:
        score = INTERIM_SIMILARITY_WEIGHT * relevance + INTERIM_CONFIDENCE_WEIGHT * confidence
    else:
        w_rel, w_rec, w_use, w_conf = weights
        weighted = w_rel * relevance + w_rec * recency + w_use * usefulness + w_conf * confidence
        score = weighted / (w_rel + w_rec + w_use + w_conf)
    return ScoredCandidate(hit=hit, score=clamp_unit(score), relevance=relevance, recency=recency, usefulness=usefulness)


def dedupe(candidates: Sequence[ScoredCandidate]) -> tuple[tuple[ScoredCandidate, ...], tuple[ScoredCandidate, ...]]:
    """Keep one candidate per memory id: the higher score, then the lower rank, then the first.

    Returns (kept in first-appearance order, losers).
    """
    best: dict[str, ScoredCandidate] = {}
    order: list[str] = []
    losers: list[ScoredCandidate] = []
    for candidate in candidates:
        key = candidate.hit.memory_id
        incumbent = best.get(key)
        if incumbent is None:
            best[key] = candidate
            order.append(key)
        elif (candidate.score, -candidate.hit.rank) > (incumbent.score, -incumbent.hit.rank):
            best[key] = candidate
            losers.append(incumbent)
        else:
            losers.append(candidate)
    return tuple(best[key] for key in order), tuple(losers)


def keep_best(candidates: Sequence[ScoredCandidate], max_memories: int) -> tuple[tuple[ScoredCandidate, ...], tuple[ScoredCandidate, ...]]:
    """The best ``max_memories`` by (score desc, id asc) and the rest; 0 means no cap."""
    ranked = sorted(candidates, key=lambda c: c.canonical_key)
    if max_memories <= 0:
        return tuple(ranked), ()
    return tuple(ranked[:max_memories]), tuple(ranked[max_memories:])
