"""``relevance_v1``: query relevance decides what reaches the packer and what it is worth there.

Relevance (``ScoredCandidate.relevance``, in [0, 1], relative to the best candidate):

* a search hit: the stronger of its source similarity divided by the best search similarity of
  the assembly (so the memory service's cosine and the embedded BM25 mapping land on one scale:
  the floor is **relative to the candidate set**) and its lexical relevance;
* a hot hit: its lexical relevance only. A hot hit's similarity is a write-time score that
  ignores the query, so it never counts as relevance;
* lexical relevance: BM25 of the content against the query terms (the request's query and the
  last user message), over the assembly's candidates, divided by the best such score;
* no query terms at all (blank query, no user message): the source similarity relative to the
  best one, the only ordering there is.

Gates, in order, each with its own exclusion detail, all before packing:

1. ``below_relevance_floor``: relevance under ``floor``. The best ``core_slots`` hot hits of a
   core category (``preference``, ``behavioral``: how the user wants things, how the agent must
   act) by hot score are exempt: they are what a hot list is for, and reach the packer at
   ``core_utility``, below every relevant memory;
2. ``hot_bound``: a hot-only memory once ``hot_slots`` of them are kept (by utility);
3. ``near_duplicate``: same words as, or a near copy of, a more useful kept candidate
   (``domain.relevance``). A hot copy that is dropped does not take a hot slot.

Utility (``ScoredCandidate.score``, what the packer maximises the sum of):
``relevance ** sharpness * (1 - confidence_weight + confidence_weight * confidence)``, rounded to
float32 as the wire carries it, so a client re-solving the knapsack from ``composite_score``
agrees with the packer at ties. ``sharpness > 1`` makes one highly relevant memory worth more
than several weakly relevant ones of the same total cost.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Sequence
from datetime import datetime

import attrs

from domain.model.assembly import ExclusionDetail
from domain.model.memory import MemoryHit
from domain.relevance import DuplicateIndex, QueryTerms, TextProfile, bm25, profile, query_terms
from domain.scoring import NEUTRAL_USEFULNESS, ScoredCandidate, clamp_unit, recency_factor
from ports.text_profiles import TextProfiles

CORE_CATEGORIES = frozenset({"preference", "behavioral"})


@attrs.frozen
class RelevancePolicy:
    # The four tuned parameters have no defaults here: entrypoints.settings declares them (default,
    # bounds, variable) and builds the policy (``Settings().relevance_policy()``); these validators
    # keep the policy's own invariants. The other fields are constants of the method.
    floor: float = attrs.field(kw_only=True, validator=attrs.validators.and_(attrs.validators.ge(0.0), attrs.validators.le(1.0)))
    sharpness: float = attrs.field(kw_only=True, validator=attrs.validators.and_(attrs.validators.ge(1.0), attrs.validators.le(16.0)))
    hot_slots: int = attrs.field(kw_only=True, validator=attrs.validators.ge(0))
    core_slots: int = attrs.field(kw_only=True, validator=attrs.validators.ge(0))
    duplicate_jaccard: float = attrs.field(default=0.8, validator=attrs.validators.and_(attrs.validators.gt(0.0), attrs.validators.le(1.0)))
    confidence_weight: float = attrs.field(default=0.15, validator=attrs.validators.and_(attrs.validators.ge(0.0), attrs.validators.le(1.0)))
    core_categories: frozenset[str] = attrs.field(default=CORE_CATEGORIES, converter=frozenset)

    def utility(self, relevance: float, confidence: float) -> float:
        return self.utilities((relevance,), (confidence,))[0]

    def utilities(self, relevance: Sequence[float], confidence: Sequence[float]) -> list[float]:
        """``utility`` of each (relevance, confidence) pair, all rounded to float32 at once."""
        cw, sharpness = self.confidence_weight, self.sharpness
        return as_float32s([r**sharpness * (1.0 - cw + cw * c) for r, c in zip(relevance, confidence, strict=True)])

    @property
    def core_utility(self) -> float:
        """Half the least utility a memory at the floor can have: core facts fill what is left."""
        return as_float32(max(self.floor, 0.05) ** self.sharpness * (1.0 - self.confidence_weight) / 2.0)


@attrs.frozen
class Screened:
    kept: tuple[ScoredCandidate, ...]  # what the packer sees, canonical order (score desc, id asc)
    excluded: tuple[tuple[ScoredCandidate, str], ...]  # with their exclusion detail


class UncachedTextProfiles(TextProfiles):
    """``domain.relevance.profile`` as it is (adapters offer a cached one)."""

    def profile(self, text: str) -> TextProfile:
        return profile(text)


def screen(
    hot: Sequence[MemoryHit],
    found: Sequence[MemoryHit],
    query_text: str,
    policy: RelevancePolicy,
    now: datetime,
    profiles: TextProfiles = UncachedTextProfiles(),
) -> Screened:
    hits, searched, duplicates = _one_per_id(hot, found)
    texts = [profiles.profile(hit.content) for hit in hits]
    terms = query_terms(query_text)
    relevance = _relevance(hits, searched, texts, terms)
    grounded = bool(terms) or any(searched)  # else nothing to be relevant to: no floor, no hot bound

    below = [i for i, r in enumerate(relevance) if r < policy.floor] if grounded else []
    core = sorted(
        (i for i in below if not searched[i] and hits[i].category in policy.core_categories),
        key=lambda i: (-hits[i].similarity, hits[i].memory_id),
    )[: policy.core_slots]
    utilities = policy.utilities(relevance, [clamp_unit(hit.confidence) for hit in hits])
    for i in core:
        utilities[i] = policy.core_utility
    scored = _scored(hits, relevance, utilities, now)
    unscored = [0.0] * len(duplicates)
    excluded = [(copy, ExclusionDetail.DUPLICATE) for copy in _scored(duplicates, unscored, unscored, now)]
    floored = set(below) - set(core)
    excluded.extend((scored[i], ExclusionDetail.BELOW_RELEVANCE_FLOOR) for i in sorted(floored))

    kept: list[ScoredCandidate] = []
    copies = DuplicateIndex(policy.duplicate_jaccard)
    hot_left = policy.hot_slots
    for i in sorted((i for i in range(len(hits)) if i not in floored), key=lambda i: scored[i].canonical_key):
        bounded = not searched[i] and grounded
        if bounded and hot_left <= 0:
            excluded.append((scored[i], ExclusionDetail.HOT_BOUND))
        elif copies.find_or_add(texts[i]):
            excluded.append((scored[i], ExclusionDetail.NEAR_DUPLICATE))
        else:
            hot_left -= bounded
            kept.append(scored[i])
    return Screened(kept=tuple(kept), excluded=tuple(excluded))


def as_float32(value: float) -> float:
    """``value`` as the nearest float32 (what a proto ``float`` field carries)."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def as_float32s(values: Iterable[float]) -> list[float]:
    """Each of ``values`` as ``as_float32`` rounds it, all at once: an ``array('f')`` stores the
    same C cast to float that ``struct`` packs (values in float32 range: utilities are in [0, 1])."""
    return array("f", values).tolist()


def _one_per_id(
    hot: Sequence[MemoryHit], found: Sequence[MemoryHit]
) -> tuple[list[MemoryHit], list[bool], list[MemoryHit]]:
    """One hit per memory id: the search hit first (it carries the query's relevance), then the
    lower rank. Returns (hits, searched flags, the other copies)."""
    chosen: dict[str, tuple[MemoryHit, bool]] = {}
    others: list[MemoryHit] = []
    for is_search, batch in ((True, found), (False, hot)):
        for hit in batch:
            incumbent = chosen.get(hit.memory_id)
            if incumbent is None:
                chosen[hit.memory_id] = (hit, is_search)
            elif incumbent[1] == is_search and hit.rank < incumbent[0].rank:
                chosen[hit.memory_id] = (hit, is_search)
                others.append(incumbent[0])
            else:
                others.append(hit)
    return [h for h, _ in chosen.values()], [s for _, s in chosen.values()], others


def _relevance(hits: Sequence[MemoryHit], searched: Sequence[bool], texts: Sequence[TextProfile], terms: QueryTerms) -> list[float]:
    if not terms and not any(searched):
        # Nothing relates these memories to a query: the source's own order is all there is.
        best = max((clamp_unit(h.similarity) for h in hits), default=0.0)
        return [clamp_unit(h.similarity) / best if best > 0 else 0.0 for h in hits]
    lexical = bm25(terms, texts)
    best_lexical = max(lexical, default=0.0)
    best_search = max((clamp_unit(h.similarity) for h, s in zip(hits, searched, strict=True) if s), default=0.0)
    relevance = []
    for hit, is_search, score in zip(hits, searched, lexical, strict=True):
        value = score / best_lexical if best_lexical > 0 else 0.0
        if is_search and best_search > 0:
            value = max(value, clamp_unit(hit.similarity) / best_search)
        relevance.append(clamp_unit(value))
    return relevance


def _scored(
    hits: Sequence[MemoryHit], relevance: Sequence[float], utilities: Sequence[float], now: datetime
) -> list[ScoredCandidate]:
    # ScoredCandidate(hit, score, relevance, recency, usefulness), positional: a class called
    # with keywords builds a dict of them per call.
    return [
        ScoredCandidate(
            hit,
            utility,
            r,
            recency_factor(hit.category, hit.created_at, now),
            NEUTRAL_USEFULNESS if hit.usefulness is None else clamp_unit(hit.usefulness),
        )
        for hit, r, utility in zip(hits, relevance, utilities, strict=True)
    ]
