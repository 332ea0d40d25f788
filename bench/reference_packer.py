"""Baseline: the reference service's bucketed-DP packer, rebuilt from its behaviour description.

Costs are given directly (the reference's ``cost_by_id`` mode). Steps: canonical order
(score desc, key asc); bucket weights ``max(1, cost // 16)`` (floor) for a capacity of
``max(1, budget // 16)`` buckets; a DP with strict improvement and a bool keep matrix when
``n * (buckets + 1) <= 437570``, otherwise greedy with at most 5 consecutive skips; then repair
(drop the lowest ``(score, key)`` while over budget) and a first-fit refill in canonical order.
Used only by the benchmark, as the baseline to beat.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from domain.packer import PackItem

BUCKET_SIZE = 16
DP_CELL_CEILING = 70 * 6251
MAX_CONSECUTIVE_SKIPS = 5


@attrs.frozen
class ReferencePack:
    selected: tuple[str, ...]
    total_cost: int
    total_score: float
    path: str


def reference_pack(items: Sequence[PackItem], budget: int) -> ReferencePack:
    """Pack like the reference: bucketed DP + repair + refill, or greedy above the ceiling."""
    ordered = sorted(items, key=lambda item: (-item.score, item.key))
    if not ordered or budget <= 0:
        return _finish([], "dp")
    buckets = max(1, budget // BUCKET_SIZE)
    if len(ordered) * (buckets + 1) > DP_CELL_CEILING:
        return _finish(_greedy(ordered, budget), "greedy")
    chosen = _bucketed_dp(ordered, buckets)
    chosen = _repair(chosen, budget)
    return _finish(_refill(ordered, chosen, budget), "dp")


def _bucketed_dp(ordered: list[PackItem], buckets: int) -> list[PackItem]:
    weights = [0 if item.cost <= 0 else max(1, item.cost // BUCKET_SIZE) for item in ordered]
    keep = np.zeros((len(ordered) + 1, buckets + 1), dtype=bool)
    best = np.zeros(buckets + 1, dtype=np.float64)
    for row, (item, weight) in enumerate(zip(ordered, weights), start=1):
        previous = best.copy()
        if weight == 0:
            taken = previous + item.score > previous
            keep[row] = taken
            best = np.where(taken, previous + item.score, previous)
        elif weight <= buckets:
            candidate = previous[:-weight] + item.score
            taken = candidate > previous[weight:]
            keep[row, weight:] = taken
            best[weight:] = np.where(taken, candidate, previous[weight:])
    chosen, capacity = [], buckets
    for row in range(len(ordered), 0, -1):
        if keep[row, capacity]:
            chosen.append(ordered[row - 1])
            capacity -= weights[row - 1]
    return chosen


def _repair(chosen: list[PackItem], budget: int) -> list[PackItem]:
    chosen = list(chosen)
    while sum(item.cost for item in chosen) > budget:
        chosen.remove(min(chosen, key=lambda item: (item.score, item.key)))
    return chosen


def _refill(ordered: list[PackItem], chosen: list[PackItem], budget: int) -> list[PackItem]:
    taken = {item.key for item in chosen}
    remaining = budget - sum(item.cost for item in chosen)
    result = list(chosen)
    for item in ordered:
        if item.key not in taken and item.cost <= remaining:
            result.append(item)
            taken.add(item.key)
            remaining -= item.cost
    return result


def _greedy(ordered: list[PackItem], budget: int) -> list[PackItem]:
    chosen, remaining, skips = [], budget, 0
    for item in ordered:
        if item.cost <= remaining:
            chosen.append(item)
            remaining -= item.cost
            skips = 0
        else:
            skips += 1
            if skips > MAX_CONSECUTIVE_SKIPS:
                break
    return chosen


def _finish(chosen: list[PackItem], path: str) -> ReferencePack:
    chosen = sorted(chosen, key=lambda item: (-item.score, item.key))
    return ReferencePack(
        selected=tuple(item.key for item in chosen),
        total_cost=sum(item.cost for item in chosen),
        total_score=sum(item.score for item in chosen),
        path=path,
    )
