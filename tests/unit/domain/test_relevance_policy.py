"""relevance_v1: relevance decides, floors and bounds act before packing, utility is sharp."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.model.assembly import ExclusionDetail
from domain.model.memory import MemoryHit
from domain.packer import PackItem, pack
from domain.relevance import DuplicateIndex, bm25, near_duplicates, profile, query_terms
from domain.relevance_policy import RelevancePolicy, as_float32, as_float32s, screen
from entrypoints.settings import Settings

NOW = datetime(2026, 11, 1, tzinfo=UTC)
POLICY = Settings().relevance_policy()  # relevance_v1 with the service's declared parameters


def hit(memory_id: str, content: str, similarity: float, *, searched: bool = True, category: str = "factual",
        confidence: float = 0.9, rank: int = 1) -> MemoryHit:
    return MemoryHit(memory_id=memory_id, org_id="o", agent_id="a", content=content, category=category,
                     confidence=confidence, similarity=similarity, rank=rank,
                     source="vector" if searched else "hot_cache")


def kept_ids(screened) -> list[str]:  # type: ignore[no-untyped-def]
    return [c.memory_id for c in screened.kept]


def reasons(screened) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {c.memory_id: detail for c, detail in screened.excluded}


# ------------------------------------------------------------------ text signals


def test_terms_fold_case_punctuation_stop_words_and_plurals() -> None:
    assert profile("The Databases, and the QUERIES!").terms == {"databases", "queries"}
    assert profile("The Databases, and the QUERIES!").key == "the databases and the queries"
    assert query_terms("Which databases? Any queries, classes, status, bus").terms == {
        "database", "query", "class", "status", "bus"}
    assert not query_terms("what is it?")
    # a query term meets its plural in a memory, and the other way round
    docs = [profile("one database"), profile("two databases"), profile("a query"), profile("the classes")]
    assert [s > 0 for s in bm25(query_terms("databases query class"), docs)] == [True, True, True, True]


def test_bm25_rewards_more_and_rarer_query_terms() -> None:
    docs = [profile(t) for t in ("postgres failover runbook", "postgres upgrade", "lunch menu", "postgres backup")]
    scores = bm25(query_terms("postgres failover"), docs)
    assert scores[0] > scores[1] > 0.0 and scores[2] == 0.0
    assert scores[1] == pytest.approx(scores[3])  # same match, same length


def test_near_duplicates_are_verbatim_or_nearly_the_same_words() -> None:
    a = profile("Freeze deploys before a database failover and announce it in #incidents.")
    assert near_duplicates(a, profile("freeze DEPLOYS before a database failover, and announce it in incidents"), 0.8)
    assert near_duplicates(a, profile("Before a database failover freeze deploys and announce it in #incidents"), 0.8)
    assert not near_duplicates(a, profile("Freeze deploys before the holidays."), 0.8)
    assert near_duplicates(profile("..."), profile("!!"), 0.8)  # no words at all: the same (empty) words


# ------------------------------------------------------------------ relevance decides


WORDS = ("database", "failover", "freeze", "deploys", "replica", "lag", "cutover", "page", "oncall", "runbook",
         "budget", "report", "weekly", "alert", "promote", "check")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(WORDS), max_size=9), max_size=24),
       st.sampled_from([0.5, 0.8, 0.9, 1.0]))
def test_the_duplicate_index_decides_as_comparing_every_kept_pair(texts: list[list[str]], jaccard: float) -> None:
    """Prefix filtering and bit sets find exactly the near duplicates a pairwise scan finds."""
    index, kept = DuplicateIndex(jaccard), []
    for words in texts:
        candidate = profile(" ".join(words))
        expected = any(near_duplicates(candidate, other, jaccard) for other in kept)
        assert index.find_or_add(candidate) == expected, (words, jaccard)
        if not expected:
            kept.append(candidate)


def test_a_query_independent_hot_memory_never_outranks_a_relevant_search_hit() -> None:
    hot = [hit("h-cdn", "The CDN purge API allows 100 requests per minute.", 0.98, searched=False)]
    found = [hit("s-db", "Before a database failover, freeze deploys.", 0.35)]
    screened = screen(hot, found, "database failover", POLICY, NOW)
    assert kept_ids(screened) == ["s-db"]
    assert reasons(screened) == {"h-cdn": ExclusionDetail.BELOW_RELEVANCE_FLOOR}


def test_hot_memories_are_scored_against_the_query_and_the_last_user_message() -> None:
    hot = [hit("h-replica", "The primary Postgres cluster has three replicas.", 0.6, searched=False),
           hot_unrelated := hit("h-lunch", "Team lunch is on Fridays.", 0.9, searched=False)]
    screened = screen(hot, [], "outage\nhow many replicas does the primary have?", POLICY, NOW)
    assert kept_ids(screened) == ["h-replica"]
    assert screened.kept[0].relevance == 1.0
    assert reasons(screened) == {hot_unrelated.memory_id: ExclusionDetail.BELOW_RELEVANCE_FLOOR}


def test_the_floor_is_relative_so_cosine_and_bm25_scales_select_the_same_memories() -> None:
    texts = ("alpha one", "beta two", "gamma three", "delta four")
    cosine = screen([], [hit(f"m{i}", t, s) for i, (t, s) in enumerate(zip(texts, (0.9, 0.85, 0.4, 0.2)))], "zeta", POLICY, NOW)
    mapped = screen([], [hit(f"m{i}", t, s) for i, (t, s) in enumerate(zip(texts, (0.45, 0.425, 0.2, 0.1)))], "zeta", POLICY, NOW)
    assert kept_ids(cosine) == kept_ids(mapped) == ["m0", "m1", "m2"]
    assert reasons(cosine) == reasons(mapped) == {"m3": ExclusionDetail.BELOW_RELEVANCE_FLOOR}
    assert [c.relevance for c in cosine.kept] == pytest.approx([c.relevance for c in mapped.kept])


def test_one_highly_relevant_memory_beats_several_weakly_relevant_ones_of_the_same_cost() -> None:
    found = [hit("strong", "s", 0.9)] + [hit(f"weak{i}", f"w{i}", 0.5) for i in range(3)]
    screened = screen([], found, "q", POLICY, NOW)
    costs = {"strong": 90, "weak0": 30, "weak1": 30, "weak2": 30}
    result = pack([PackItem(c.memory_id, c.score, costs[c.memory_id]) for c in screened.kept], 90)
    assert result.selected == ("strong",)
    # Under a linear utility the three weak ones would have won (3 * 0.5 > 0.9).
    linear = pack([PackItem(c.memory_id, c.relevance, costs[c.memory_id]) for c in screened.kept], 90)
    assert set(linear.selected) == {"weak0", "weak1", "weak2"}


def test_utility_is_a_float32_value_and_grows_with_relevance_and_confidence() -> None:
    for relevance in (0.31, 0.5, 0.77, 1.0):
        value = POLICY.utility(relevance, 0.63)
        assert as_float32(value) == value
    assert POLICY.utility(0.9, 0.5) > POLICY.utility(0.8, 0.5) and POLICY.utility(0.8, 1.0) > POLICY.utility(0.8, 0.0)
    assert POLICY.core_utility < POLICY.utility(POLICY.floor, 0.0)


EDGE_UNIT_FLOATS = [0.0, -0.0, 5e-324, 1e-320, 1.1754942e-38, 1.401298464324817e-45, 7e-46, 2.1e-45,
                    0.1, 1 / 3, 0.5 + 2**-25, 0.5 + 2**-26, 1.0 - 2**-25, 1.0 - 2**-26, 1.0]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1.0), max_size=40))
def test_float32_rounding_all_at_once_is_that_of_one_value_at_a_time(values: list[float]) -> None:
    values += EDGE_UNIT_FLOATS  # zero, subnormals of both widths, float32 halfway cases
    assert [repr(v) for v in as_float32s(values)] == [repr(as_float32(v)) for v in values]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)), max_size=30))
def test_utilities_are_each_pair_s_utility_rounded_to_float32(pairs: list[tuple[float, float]]) -> None:
    cw = POLICY.confidence_weight
    expected = [as_float32(r**POLICY.sharpness * (1.0 - cw + cw * c)) for r, c in pairs]
    assert POLICY.utilities([r for r, _ in pairs], [c for _, c in pairs]) == expected
    assert [POLICY.utility(r, c) for r, c in pairs] == expected


# ------------------------------------------------------------------ duplicates and bounds


def test_the_search_copy_of_a_memory_on_both_lists_is_kept() -> None:
    screened = screen([hit("m", "database failover", 0.99, searched=False)], [hit("m", "database failover", 0.6)],
                      "database failover", POLICY, NOW)
    assert [(c.memory_id, c.hit.source) for c in screened.kept] == [("m", "vector")]
    assert [(c.hit.source, d) for c, d in screened.excluded] == [("hot_cache", ExclusionDetail.DUPLICATE)]


def test_verbatim_and_paraphrased_copies_are_packed_once_keeping_the_most_useful() -> None:
    found = [
        hit("a", "Freeze deploys before a database failover and announce it.", 0.9),
        hit("b", "freeze deploys before a database failover, and announce it", 0.8),
        hit("c", "Before a database failover freeze deploys and announce it", 0.7),
        hit("d", "Check replica lag before a database failover.", 0.6),
    ]
    screened = screen([], found, "database failover", POLICY, NOW)
    assert kept_ids(screened) == ["a", "d"]
    assert reasons(screened) == {"b": ExclusionDetail.NEAR_DUPLICATE, "c": ExclusionDetail.NEAR_DUPLICATE}


def test_hot_only_memories_are_bounded_even_when_relevant() -> None:
    hot = [hit(f"h{i}", f"failover note {i}", 0.9 - i / 100, searched=False, rank=i + 1) for i in range(6)]
    screened = screen(hot, [], "failover", attrs.evolve(POLICY, hot_slots=4), NOW)
    assert len(screened.kept) == 4
    assert sorted(d for d in reasons(screened).values()) == [ExclusionDetail.HOT_BOUND] * 2


def test_core_facts_keep_a_bounded_place_below_every_relevant_memory() -> None:
    hot = [
        hit("pref1", "The on-call lead prefers a dry-run flag first.", 0.9, searched=False, category="preference"),
        hit("pref2", "Answers in bullet points.", 0.8, searched=False, category="preference"),
        hit("pref3", "Short answers, please.", 0.7, searched=False, category="behavioral"),
        hit("fact", "The CDN purge API allows 100 requests per minute.", 0.95, searched=False, category="factual"),
    ]
    found = [hit("db", "Before a database failover, freeze deploys.", 0.4)]
    screened = screen(hot, found, "database failover", attrs.evolve(POLICY, core_slots=2), NOW)
    assert kept_ids(screened) == ["db", "pref1", "pref2"]
    assert all(c.score == POLICY.core_utility < screened.kept[0].score for c in screened.kept[1:])
    assert reasons(screened) == {"pref3": ExclusionDetail.BELOW_RELEVANCE_FLOOR, "fact": ExclusionDetail.BELOW_RELEVANCE_FLOOR}


def test_without_any_query_the_hot_order_stands_and_nothing_is_floored() -> None:
    hot = [hit(f"h{i}", f"note {i}", s, searched=False) for i, s in enumerate((0.5, 0.9, 0.2))]
    screened = screen(hot, [], "", POLICY, NOW)
    assert kept_ids(screened) == ["h1", "h0", "h2"]
    assert screened.excluded == ()


def test_the_tuned_parameters_have_no_domain_default_and_keep_their_invariants() -> None:
    with pytest.raises(TypeError, match="floor"):  # declared once, in entrypoints.settings
        RelevancePolicy()  # type: ignore[call-arg]
    for bad in ({"floor": 1.5}, {"sharpness": 0.5}, {"hot_slots": -1}, {"core_slots": -1}):
        with pytest.raises(ValueError):
            attrs.evolve(POLICY, **bad)
    assert RelevancePolicy(floor=0.3, sharpness=5.0, hot_slots=4, core_slots=2) == POLICY
