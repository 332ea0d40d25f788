"""Exact memory packer: a 0/1 knapsack over token costs, optimal by construction.

Objective, in priority order (a function of the item multiset and the budget only):

1. maximise the total score, compared exactly as integers ``units = round(score * S)`` with
   ``S = 10**12`` (lowered by powers of ten only when ``n * max(score) * S`` would pass
   ``2**52``, e.g. above 4503 items of score 1); a positive score is worth at least one unit,
   and items of score 0 are never selected;
2. among equal totals, minimise the total cost;
3. then prefer the selection that is lexicographically greatest as an indicator vector over the
   canonical order ``(score desc, key asc)``: earlier items win ties.

Algorithm (chosen by measurement, see docs/PERFORMANCE.md): take cost-0 items; if everything
fits, take it; otherwise sort by score per token, find the LP (Dantzig) break item with prefix
sums and ``searchsorted``, and fix every item whose flip bound (Dembo-Hammer: LP bound minus the
item's loss at the break rate) is below a lower bound (greedy, sharpened by an exact DP over a
window around the break item when many items stay free). The remaining core is solved exactly
by a DP over token capacity (suffix rows in canonical order, traced front to back, so ties
resolve to the earliest items), or over score totals when scores share a large divisor (ties).
A core too large for one in-memory table is solved by halving with terminal value rows, in
``O(capacity * log n)`` memory. Exact for every input; only time and memory grow with hard
inputs (cores the bounds cannot shrink, e.g. score proportional to cost).

One module on purpose (about 420 lines): the import contracts name ``domain.packer`` as the only
numpy user in the core, and the parts (validation, bounds, DP) share private arrays.

``PackResult.path`` values: ``empty`` (no items), ``no_budget`` (budget 0: only cost-0 items),
``all_fit`` (every positive-score item fits), ``exact_dp`` (core solved by one in-memory DP over
token capacity), ``exact_dp_by_score`` (one in-memory DP over score totals, chosen when scores
share a large divisor), ``exact_dp_blocked`` (memory-bounded DP over token capacity).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence

import enum

import attrs
import numpy as np

from domain.model.errors import InvalidRequestError, PackerInvariantError

SCORE_SCALE = 10**12
MAX_COST = 2**40
_LOG10_MAX_UNITS = math.log10(2**52)
_MAX_CAPACITY = 2**62
_BLOCK_CELLS = 1 << 22
_UNREACHABLE = -(2**62)
_UNAFFORDABLE = 2**62
_GREEDY_FILL_STEPS = 64
_WINDOW = 8
_DIRECT_ROWS = 24


class PackingPath(enum.StrEnum):
    """How the selection was found (the module docstring says when each applies)."""

    EMPTY = "empty"
    NO_BUDGET = "no_budget"
    ALL_FIT = "all_fit"
    EXACT_DP = "exact_dp"
    EXACT_DP_BY_SCORE = "exact_dp_by_score"
    EXACT_DP_BLOCKED = "exact_dp_blocked"


@attrs.frozen
class PackItem:
    key: str
    score: float
    cost: int


@attrs.frozen
class PackResult:
    """The chosen keys and totals; ``path`` values are listed in the module docstring."""

    selected: tuple[str, ...] = attrs.field(converter=tuple)
    total_cost: int
    total_score: float
    path: PackingPath
    evaluated: int
    budget_excluded: tuple[str, ...] = attrs.field(converter=tuple)
    budget_reached: bool


@attrs.frozen(eq=False)
class _Table:
    """Validated items in canonical order (score desc, key asc) as parallel arrays."""

    keys: tuple[str, ...]
    scores: np.ndarray
    costs: np.ndarray
    units: np.ndarray


def pack(items: Sequence[PackItem], budget: int) -> PackResult:
    """Select the items that maximise the total score within ``budget`` tokens.

    Args:
        items: candidates; keys unique, scores finite and >= 0, costs integers >= 0.
        budget: token budget, an integer >= 0.

    Returns:
        The optimal selection under the objective in the module docstring, with keys in
        canonical order (score desc, key asc). Independent of the input order.

    Raises:
        InvalidRequestError: field ``items`` or ``budget`` names the invalid input.
        PackerInvariantError: the selection exceeded the budget (impossible by construction).
    """
    _check_budget(budget)
    table = _canonical_table(items)
    if not table.keys:
        return _result(table, np.zeros(0, dtype=bool), PackingPath.EMPTY, budget)
    selected, path = _choose(table, min(budget, _MAX_CAPACITY))
    return _result(table, selected, path, budget)


def _check_budget(budget: int) -> None:
    if isinstance(budget, bool) or not isinstance(budget, int | np.integer):
        raise InvalidRequestError("budget", f"budget must be an integer, got {budget!r}")
    if budget < 0:
        raise InvalidRequestError("budget", f"budget must be >= 0, got {budget}")


def _canonical_table(items: Sequence[PackItem]) -> _Table:
    keys = [item.key for item in items]
    _check_types(items, keys, str, "key must be a string")
    if len(set(keys)) != len(keys):
        duplicates = sorted(key for key, seen in Counter(keys).items() if seen > 1)
        raise InvalidRequestError("items", f"duplicate item keys: {duplicates}")
    scores = _numbers(items, "score", np.float64, (int, float, np.integer, np.floating))
    costs = _numbers(items, "cost", np.int64, (int, np.integer))
    if not (scores >= 0).all() or not math.isfinite(float(scores.sum())):
        _reject(items, ~np.isfinite(scores) | (scores < 0), "score must be finite and >= 0")
    if costs.size and (int(costs.min()) < 0 or int(costs.max()) > MAX_COST):
        _reject(items, (costs < 0) | (costs > MAX_COST), f"cost must be in 0..{MAX_COST}")
    order = (-scores).argsort(kind="stable")
    sorted_scores = scores[order]
    if (sorted_scores[1:] == sorted_scores[:-1]).any():
        by_key = np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.intp)
        order = by_key[(-scores[by_key]).argsort(kind="stable")]
        sorted_scores = scores[order]
    return _Table(
        keys=tuple([keys[i] for i in order.tolist()]),
        scores=sorted_scores,
        costs=costs[order],
        units=_score_units(sorted_scores),
    )


def _numbers(items: Sequence[PackItem], field: str, dtype: type, allowed: tuple) -> np.ndarray:
    raw = [getattr(item, field) for item in items]
    kind = "an integer" if dtype is np.int64 else "a number"
    _check_types(items, raw, allowed, f"{field} must be {kind}")
    try:
        return np.fromiter(raw, dtype=dtype, count=len(raw))
    except OverflowError as error:
        raise InvalidRequestError("items", f"an item {field} is out of range") from error


def _check_types(items: Sequence[PackItem], values: list, allowed, message: str) -> None:
    """Reject values whose type is bool or not a subclass of ``allowed`` (checked per type)."""
    for kind in set(map(type, values)):
        if kind is bool or not issubclass(kind, allowed):
            culprit = next(item for item, value in zip(items, values) if type(value) is kind)
            raise InvalidRequestError("items", f"item {culprit.key!r}: {message}")


def _reject(items: Sequence[PackItem], bad: np.ndarray, message: str) -> None:
    if bad.any():
        raise InvalidRequestError("items", f"item {items[int(bad.argmax())].key!r}: {message}")


def _score_units(scores: np.ndarray) -> np.ndarray:
    """Scores (sorted descending) as exact integers: equal floats give equal units, and a
    positive score is worth at least one unit."""
    peak = float(scores[0]) if scores.size else 0.0
    exponent = math.log10(SCORE_SCALE)
    if peak > 0:
        headroom = _LOG10_MAX_UNITS - math.log10(peak) - math.log10(scores.size)
        exponent = min(exponent, math.floor(headroom))
    units = np.rint(scores * 10.0**exponent).astype(np.int64)
    if scores.size and (scores[-1] == 0 or units[-1] == 0):
        return np.maximum(units, scores > 0)
    return units


def _choose(table: _Table, budget: int) -> tuple[np.ndarray, PackingPath]:
    """Selection mask over the canonical order, and the path that produced it."""
    live = table.units > 0
    selected = live & (table.costs == 0)
    if budget == 0:
        return selected, PackingPath.NO_BUDGET
    paid = live & (table.costs > 0) & (table.costs <= budget)
    if int(table.costs[paid].sum()) <= budget:
        return selected | paid, PackingPath.ALL_FIT
    candidates = paid.nonzero()[0]
    fixed_in, core = _reduce(table.costs[candidates], table.units[candidates], budget)
    fixed_in, core = candidates[fixed_in], candidates[core]
    selected[fixed_in] = True
    room = budget - int(table.costs[fixed_in].sum())
    if room < 0:
        raise PackerInvariantError(f"packer fixed items costing {budget - room} > budget {budget}")
    picked, path = _solve_core(table.costs[core], table.units[core], room)
    selected[core[picked]] = True
    return selected, path


@attrs.frozen(eq=False)
class _Relaxation:
    """Candidates in efficiency order, their prefix sums and the LP (Dantzig) break item.

    ``loss[j] = |value_j - rate * weight_j|`` (``rate``: the break item's score per token) is
    what flipping item ``j`` away from the LP solution costs at least, so ``bound - loss[j]``
    bounds every solution with item ``j`` flipped (Dembo and Hammer).
    """

    order: np.ndarray
    weights: np.ndarray
    values: np.ndarray
    prefix_w: np.ndarray
    prefix_v: np.ndarray
    split: int
    bound: float
    loss: np.ndarray

    @classmethod
    def of(cls, costs: np.ndarray, units: np.ndarray, capacity: int) -> _Relaxation:
        order = (-(units / costs)).argsort(kind="stable")
        weights, values = costs[order], units[order]
        prefix_w, prefix_v = _prefix(weights), _prefix(values)
        split = int(prefix_w.searchsorted(capacity, side="right")) - 1
        rate = int(values[split]) / int(weights[split])
        bound = int(prefix_v[split]) + (capacity - int(prefix_w[split])) * rate
        loss = np.abs(values - rate * weights)
        return cls(order, weights, values, prefix_w, prefix_v, split, bound, loss)

    def greedy_value(self, capacity: int) -> int:
        """The LP prefix plus a bounded first-fit over the items after the break item."""
        room = capacity - int(self.prefix_w[self.split])
        gained, start = int(self.prefix_v[self.split]), self.split + 1
        for _ in range(_GREEDY_FILL_STEPS):
            fits = (self.weights[start:] <= room).nonzero()[0]
            if fits.size == 0:
                break
            pick = start + int(fits[0])
            gained += int(self.values[pick])
            room -= int(self.weights[pick])
            start = pick + 1
        return gained

    def window_value(self, capacity: int) -> int:
        """The LP prefix before a window around the break item plus that window's exact DP."""
        lo, hi = max(0, self.split - _WINDOW), self.split + _WINDOW
        tail = np.zeros(capacity - int(self.prefix_w[lo]) + 1, dtype=np.int64)
        best = _suffix_values(self.weights[lo:hi], self.values[lo:hi], tail)
        return int(self.prefix_v[lo]) + int(best[-1])

    def fixings(self, lower: int) -> tuple[np.ndarray, np.ndarray]:
        """Masks (efficiency order) of items fixed in and of items left to the core.

        Items before the break item are in the LP solution (fixed in when beaten), items
        after it are out (fixed out when beaten); the break item always stays in the core.
        """
        beaten = self.loss > self.bound - lower + (4096.0 + 1e-9 * lower)
        beaten[self.split] = False
        fix_in = beaten.copy()
        fix_in[self.split :] = False
        return fix_in, ~beaten


def _prefix(values: np.ndarray) -> np.ndarray:
    return np.concatenate((np.zeros(1, dtype=values.dtype), values.cumsum()))


def _reduce(costs: np.ndarray, units: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """Fix items whose LP bound with the opposite decision is below a lower bound.

    Returns the positions fixed in and the positions left to the core, both ascending (so the
    core keeps the canonical order). A fix is sound because every solution with the opposite
    decision is worth at most that bound, which is strictly below an achievable value. The
    lower bound is greedy first; a window DP sharpens it when the core would still be large.
    """
    relaxed = _Relaxation.of(costs, units, capacity)
    fix_in, core = relaxed.fixings(relaxed.greedy_value(capacity))
    if int(core.sum()) > _DIRECT_ROWS:
        fix_in, core = relaxed.fixings(relaxed.window_value(capacity))
    fixed_in, kept = relaxed.order[fix_in], relaxed.order[core]
    fixed_in.sort()
    kept.sort()
    return fixed_in, kept


def _solve_core(costs: np.ndarray, units: np.ndarray, room: int) -> tuple[np.ndarray, PackingPath]:
    """Exact DP over the core (canonical order); returns picked core positions and the path.

    The DP runs over the smaller of two axes: token capacity (best score per capacity) or,
    when scores share a large common divisor (ties, few distinct scores), the score total
    (least cost per score).
    """
    fits = (costs <= room).nonzero()[0]
    weights, values = costs[fits], units[fits]
    divisor = _gcd(weights)
    if divisor > 1:
        weights = weights // divisor
    capacity = min(room // divisor, int(weights.sum()))
    step = _gcd(values)
    span = int(values.sum()) // step
    if span < capacity and weights.size * 2 * (span + 1) <= _BLOCK_CELLS:
        return fits[_least_cost_trace(weights, values // step, capacity)], PackingPath.EXACT_DP_BY_SCORE
    zeros = np.zeros(capacity + 1, dtype=np.int64)
    if weights.size * (2 * capacity + 1) <= _BLOCK_CELLS:
        rows, pad = _suffix_rows(weights, values, zeros, _UNREACHABLE, np.maximum)
        start = _cheapest_optimum(rows[0, pad:])
        return fits[_trace(rows, pad, weights, values, 0, start)], PackingPath.EXACT_DP
    start = _cheapest_optimum(_suffix_values(weights, values, zeros))
    picked: list[int] = []
    _solve_blocked(weights, values, 0, weights.size, zeros[: start + 1], picked)
    return fits[np.array(picked, dtype=np.intp)], PackingPath.EXACT_DP_BLOCKED


def _gcd(numbers: np.ndarray) -> int:
    return int(np.gcd.reduce(numbers)) if numbers.size else 1


def _cheapest_optimum(best: np.ndarray) -> int:
    """Smallest capacity reaching the optimum: the least cost of an optimal selection."""
    return int(np.argmax(best == best[-1]))


def _suffix_rows(shifts, gains, tail: np.ndarray, fill: int, better) -> tuple[np.ndarray, int]:
    """Every suffix DP row: ``rows[i, pad + x] = better(rows[i+1, x], rows[i+1, x - s_i] + g_i)``.

    Row ``m`` is ``tail``; the ``pad`` columns on the left hold ``fill`` (a value that never
    wins) so shifted reads below index 0 need no special case: two numpy operations per item,
    on slices of one flat buffer (each row, once written, is the next item's ``below``).
    """
    count, size = shifts.size, tail.size
    pad = int(shifts.max()) if count else 0
    stride = pad + size
    flat = np.empty((count + 1) * stride, dtype=np.int64)
    rows = flat.reshape(count + 1, stride)
    rows[:, :pad] = fill
    below = rows[count, pad:]
    below[:] = tail
    scratch = np.empty(size, dtype=np.int64)
    row_start = count * stride + pad  # where ``below``'s capacities begin in ``flat``
    for shift, gain in zip(reversed(shifts.tolist()), reversed(gains.tolist())):
        np.add(flat[row_start - shift : row_start - shift + size], gain, out=scratch)
        row_start -= stride
        here = flat[row_start : row_start + size]
        better(below, scratch, out=here)
        below = here
    return rows, pad


def _least_cost_trace(weights: np.ndarray, steps: np.ndarray, capacity: int) -> list[int]:
    """Score-indexed DP: ``rows[i, pad + v]`` is the least weight of items i.. scoring ``v``.

    The best score is the largest ``v`` whose least weight fits; its least weight is the
    cheapest optimum; the trace takes every item that still allows both.
    """
    tail = np.full(int(steps.sum()) + 1, _UNAFFORDABLE, dtype=np.int64)
    tail[0] = 0
    rows, pad = _suffix_rows(steps, weights, tail, _UNAFFORDABLE, np.minimum)
    score = int((rows[0, pad:] <= capacity).nonzero()[0][-1])
    room = int(rows[0, pad + score])
    picked = []
    for i in range(weights.size):
        step, weight = int(steps[i]), int(weights[i])
        if rows[i + 1, pad + score - step] + weight <= room:
            picked.append(i)
            score, room = score - step, room - weight
    return picked


def _suffix_values(weights: np.ndarray, values: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """Best value of the items on top of ``tail`` at every capacity (``tail`` is not modified)."""
    best = tail.copy()
    size = best.size
    for weight, value in zip(reversed(weights.tolist()), reversed(values.tolist())):
        if weight < size:
            reachable = best[weight:]
            np.maximum(reachable, best[: size - weight] + value, out=reachable)
    return best


def _trace(rows: np.ndarray, pad: int, weights, values, offset: int, capacity: int) -> list[int]:
    """Walk items in canonical order, taking each one whenever taking it stays optimal.

    Ties prefer taking, which yields the lexicographically greatest optimal selection. Stops
    once no capacity is left: every weight is positive, so no later item could be taken.
    """
    picked = []
    count, stride = rows.shape[0] - 1, rows.shape[1]
    cell = rows.reshape(-1).item  # a Python int: cheaper to compare than a numpy scalar
    pairs = zip(weights[offset : offset + count].tolist(), values[offset : offset + count].tolist())
    for i, (weight, value) in enumerate(pairs):
        if capacity == 0:
            break
        below = (i + 1) * stride + pad + capacity
        if cell(below - weight) + value >= cell(below):
            picked.append(offset + i)
            capacity -= weight
    return picked


def _solve_blocked(weights, values, lo: int, hi: int, tail: np.ndarray, picked: list[int]) -> int:
    """Lexicographically greatest optimum of items lo..hi-1 on top of the terminal row ``tail``.

    Halves the range: the right half's DP becomes the left half's terminal row, the left half
    is solved first (it decides the lexicographic order), then the right half in the capacity
    left over. Memory stays O(capacity * log n). Returns the weight used.
    """
    if (hi - lo) * 2 * tail.size <= _BLOCK_CELLS or hi - lo == 1:
        rows, pad = _suffix_rows(weights[lo:hi], values[lo:hi], tail, _UNREACHABLE, np.maximum)
        found = _trace(rows, pad, weights, values, lo, tail.size - 1)
        picked.extend(found)
        return int(weights[found].sum())
    mid = (lo + hi) // 2
    right_rows = _suffix_values(weights[mid:hi], values[mid:hi], tail)
    used = _solve_blocked(weights, values, lo, mid, right_rows, picked)
    return used + _solve_blocked(weights, values, mid, hi, tail[: tail.size - used], picked)


def _result(table: _Table, selected: np.ndarray, path: PackingPath, budget: int) -> PackResult:
    total_cost = int(table.costs[selected].sum())
    if total_cost > budget:
        raise PackerInvariantError(f"packer selection costs {total_cost} > budget {budget}")
    chosen = tuple(itertools.compress(table.keys, selected.tolist()))
    return PackResult(
        selected=chosen,
        total_cost=total_cost,
        total_score=float(table.scores[selected].sum()),
        path=path,
        evaluated=len(table.keys),
        budget_excluded=tuple(itertools.compress(table.keys, (~selected).tolist())),
        budget_reached=len(chosen) < len(table.keys),
    )
