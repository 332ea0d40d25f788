from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.model.errors import InvalidRequestError
from domain.packer import PackItem, PackResult, pack

A_KEY, B_KEY = "a" * 32, "b" * 32


def items_of(*specs: tuple[str, float, int]) -> list[PackItem]:
    return [PackItem(key, score, cost) for key, score, cost in specs]


def canonical(items: list[PackItem]) -> list[PackItem]:
    return sorted(items, key=lambda item: (-item.score, item.key))


def dp_optimum(items: list[PackItem], budget: int) -> float:
    """Independent exact optimum: numpy DP over every token of capacity (value only)."""
    best = np.zeros(budget + 1)
    for item in items:
        if item.cost <= budget:
            shifted = best[: budget + 1 - item.cost] + item.score
            best[item.cost :] = np.maximum(best[item.cost :], shifted)
    return float(best[-1])


def brute_force(items: list[PackItem], budget: int) -> tuple[str, ...]:
    """The documented rule by enumeration: max exact score, then min cost, then the
    lexicographically greatest indicator vector in canonical order; score-0 items never."""
    ordered = [item for item in canonical(items) if item.score > 0]
    best_key, best_pick = None, ()
    for mask in itertools.product((1, 0), repeat=len(ordered)):
        cost = sum(item.cost for item, bit in zip(ordered, mask) if bit)
        if cost <= budget:
            score = sum(Fraction(item.score) for item, bit in zip(ordered, mask) if bit)
            key = (score, -cost, mask)
            if best_key is None or key > best_key:
                best_key = key
                best_pick = tuple(item.key for item, bit in zip(ordered, mask) if bit)
    return best_pick


# --- reference cases (costs given directly) -------------------------------------------------


def test_empty_input_packs_nothing() -> None:
    result = pack([], 100)
    assert result == PackResult((), 0, 0.0, "empty", 0, (), False)


def test_zero_budget_excludes_every_item_that_costs_tokens() -> None:
    result = pack(items_of(("m", 0.9, 10)), 0)
    assert (result.selected, result.budget_excluded) == ((), ("m",))
    assert result.budget_reached and result.path == "no_budget" and result.evaluated == 1


def test_single_item_over_budget_is_excluded() -> None:
    result = pack(items_of(("big", 0.9, 100)), 50)
    assert result.selected == () and result.budget_excluded == ("big",) and result.budget_reached


def test_exact_fit_is_packed() -> None:
    result = pack(items_of(("fit", 0.9, 40)), 40)
    assert result.selected == ("fit",) and result.total_cost == 40 and not result.budget_reached


def test_five_equal_items_fill_the_budget_exactly() -> None:
    result = pack([PackItem(f"m{i}", 0.5, 16) for i in range(5)], 80)
    assert len(result.selected) == 5 and result.total_cost == 80 and not result.budget_reached
    assert result.path == "all_fit"


def test_items_larger_than_the_budget_are_all_excluded() -> None:
    result = pack([PackItem(f"m{i}", 0.5, 80) for i in range(4)], 50)
    assert result.selected == () and len(result.budget_excluded) == 4


def test_selection_is_in_score_order() -> None:
    result = pack(items_of(("a", 0.2, 5), ("b", 0.9, 5), ("c", 0.5, 5)), 100)
    assert result.selected == ("b", "c", "a")


def test_budget_reached_only_when_something_is_left_out() -> None:
    assert pack([PackItem(f"m{i}", 0.5, 40) for i in range(5)], 100).budget_reached
    assert not pack([PackItem(f"m{i}", 0.5, 10) for i in range(3)], 100).budget_reached


@pytest.mark.parametrize("reverse", [False, True])
def test_equal_scores_resolve_to_the_earliest_key_whatever_the_input_order(reverse: bool) -> None:
    items = items_of((A_KEY, 0.5, 16), (B_KEY, 0.5, 16))
    result = pack(items[::-1] if reverse else items, 16)
    assert result.selected == (A_KEY,) and result.budget_excluded == (B_KEY,)


def test_cost_zero_item_is_always_included() -> None:
    result = pack(items_of(("empty", 0.8, 0), ("sixteen", 0.5, 16)), 16)
    assert result.selected == ("empty", "sixteen") and result.total_cost == 16
    assert pack(items_of(("empty", 0.8, 0), ("other", 0.5, 3)), 0).selected == ("empty",)


def test_adversarial_case_finds_two_small_items_instead_of_the_big_one() -> None:
    items = [PackItem("big", 0.95, 600)] + [PackItem(f"s{i:02d}", 0.55, 500) for i in range(15)]
    result = pack(items, 1000)
    assert result.selected == ("s00", "s01")
    assert result.total_score == pytest.approx(1.10, abs=1e-12) and result.total_cost == 1000
    assert result.total_score == pytest.approx(dp_optimum(items, 1000), abs=1e-12)


def test_item_under_counted_by_buckets_never_overflows() -> None:
    result = pack(items_of(("over", 0.95, 31), ("exact-fit", 0.40, 16)), 16)
    assert result.selected == ("exact-fit",) and result.total_cost == 16


def test_reference_latency_workload_is_packed_optimally() -> None:
    items = [PackItem(f"m{i:02d}", 0.3 + (i % 10) * 0.07, 4 + (i * 3) % 50) for i in range(70)]
    for budget in (300, 800, 8000):
        result = pack(items, budget)
        assert result.total_cost <= budget
        assert result.total_score == pytest.approx(dp_optimum(items, budget), abs=1e-9)


# --- the documented tie rule ----------------------------------------------------------------


def test_equal_scores_prefer_the_cheaper_selection() -> None:
    assert pack(items_of(("a", 0.5, 10), ("b", 0.5, 5)), 10).selected == ("b",)


def test_equal_score_and_cost_prefer_earlier_items_in_canonical_order() -> None:
    items = items_of(("a", 0.5, 10), ("b", 0.25, 5), ("c", 0.25, 5))
    assert pack(items, 10).selected == ("a",)


def test_zero_score_items_are_never_selected() -> None:
    result = pack(items_of(("useless", 0.0, 0), ("idle", 0.0, 5), ("good", 0.4, 5)), 100)
    assert result.selected == ("good",) and result.budget_excluded == ("idle", "useless")


def test_huge_budgets_take_everything() -> None:
    result = pack(items_of(("a", 0.5, 10), ("b", 0.25, 2**40)), 10**30)
    assert result.selected == ("a", "b") and result.path == "all_fit"


def test_distinct_scores_use_the_token_capacity_dp() -> None:
    rng = np.random.default_rng(5)
    costs, scores = rng.integers(5, 200, 100), rng.random(100)
    items = [PackItem(f"m{i:03d}", float(s), int(c)) for i, (s, c) in enumerate(zip(scores, costs))]
    result = pack(items, 1000)
    assert result.path == "exact_dp" and result.total_cost <= 1000
    assert result.total_score == pytest.approx(dp_optimum(items, 1000), abs=1e-9)


def test_many_equal_scores_take_the_cheapest_items_earliest_key_first() -> None:
    rng = np.random.default_rng(3)
    items = [PackItem(f"m{i:03d}", 0.5, int(c)) for i, c in enumerate(rng.integers(5, 200, 300))]
    by_cost = sorted(items, key=lambda item: (item.cost, item.key))
    spent = np.cumsum([item.cost for item in by_cost])
    affordable = int(np.searchsorted(spent, 5000, side="right"))
    expected = sorted(item.key for item in by_cost[:affordable])
    result = pack(items, 5000)
    assert result.path == "exact_dp_by_score"
    assert list(result.selected) == expected


def test_large_equal_efficiency_core_is_solved_exactly_in_bounded_memory() -> None:
    rng = np.random.default_rng(11)
    costs = rng.integers(50, 300, 200)
    items = [PackItem(f"m{i:03d}", float(c) / 1000.0, int(c)) for i, c in enumerate(costs)]
    result = pack(items, 20011)
    assert result.path == "exact_dp_blocked" and result.total_cost <= 20011
    assert result.total_score == pytest.approx(dp_optimum(items, 20011), abs=1e-9)


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "needle"),
    [
        (items_of(("a", 0.5, 1), ("a", 0.4, 2)), "duplicate"),
        (items_of(("a", 0.5, -1)), "cost"),
        (items_of(("a", 0.5, 1.5)), "cost"),
        (items_of(("a", 0.5, True)), "cost"),
        (items_of(("a", 0.5, 2**41)), "cost"),
        (items_of(("a", -0.1, 1)), "score"),
        (items_of(("a", float("nan"), 1)), "score"),
        (items_of(("a", float("inf"), 1)), "score"),
        (items_of(("a", "0.5", 1)), "score"),
        ([PackItem(7, 0.5, 1)], "key"),  # type: ignore[arg-type]
    ],
)
def test_invalid_items_are_rejected_naming_the_problem(items: list[PackItem], needle: str) -> None:
    with pytest.raises(InvalidRequestError, match=needle) as caught:
        pack(items, 10)
    assert caught.value.field == "items"


@pytest.mark.parametrize("budget", [-1, 2.5, True, "10"])
def test_invalid_budgets_are_rejected(budget: object) -> None:
    with pytest.raises(InvalidRequestError, match="budget") as caught:
        pack(items_of(("a", 0.5, 1)), budget)  # type: ignore[arg-type]
    assert caught.value.field == "budget"


# --- properties -----------------------------------------------------------------------------

DYADIC_SCORES = st.integers(0, 16).map(lambda k: k / 16)
ANY_SCORES = st.floats(0.0, 1.0, allow_nan=False)


def item_lists(scores: st.SearchStrategy[float], max_size: int, max_cost: int):
    specs = st.lists(st.tuples(scores, st.integers(0, max_cost)), max_size=max_size)
    return specs.map(lambda rows: [PackItem(f"k{i:03d}", s, c) for i, (s, c) in enumerate(rows)])


def check_invariants(result: PackResult, items: list[PackItem], budget: int) -> None:
    by_key = {item.key: item for item in items}
    assert result.total_cost == sum(by_key[k].cost for k in result.selected) <= budget
    expected_score = sum(by_key[k].score for k in result.selected)
    assert result.total_score == pytest.approx(expected_score, abs=1e-12)
    assert set(result.selected) | set(result.budget_excluded) == set(by_key)
    assert not set(result.selected) & set(result.budget_excluded)
    for keys in (result.selected, result.budget_excluded):
        assert list(keys) == [item.key for item in canonical([by_key[k] for k in keys])]
    assert result.budget_reached == bool(result.budget_excluded)
    assert result.evaluated == len(items)


@settings(max_examples=250, deadline=None)
@given(items=item_lists(ANY_SCORES, 12, 60), budget=st.integers(0, 200))
def test_small_inputs_reach_the_brute_force_optimum(items: list[PackItem], budget: int) -> None:
    result = pack(items, budget)
    check_invariants(result, items, budget)
    best = max(
        (sum(i.score for i in combo) for r in range(len(items) + 1)
         for combo in itertools.combinations(items, r) if sum(i.cost for i in combo) <= budget),
        default=0.0,
    )
    assert result.total_score == pytest.approx(best, abs=1e-9)


@settings(max_examples=250, deadline=None)
@given(items=item_lists(DYADIC_SCORES, 11, 40), budget=st.integers(0, 160))
def test_ties_follow_the_documented_rule(items: list[PackItem], budget: int) -> None:
    assert pack(items, budget).selected == brute_force(items, budget)


@settings(max_examples=150, deadline=None)
@given(items=item_lists(ANY_SCORES, 200, 400), budget=st.integers(0, 4000))
def test_larger_inputs_match_an_independent_dp(items: list[PackItem], budget: int) -> None:
    result = pack(items, budget)
    check_invariants(result, items, budget)
    assert result.total_score == pytest.approx(dp_optimum(items, budget), abs=1e-9)


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    items=st.one_of(item_lists(DYADIC_SCORES, 60, 120), item_lists(ANY_SCORES, 60, 120)),
    budget=st.integers(0, 1500),
)
def test_result_does_not_depend_on_input_order(
    data: st.DataObject, items: list[PackItem], budget: int
) -> None:
    shuffled = data.draw(st.permutations(items))
    assert pack(shuffled, budget) == pack(items, budget)
