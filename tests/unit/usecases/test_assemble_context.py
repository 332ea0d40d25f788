from __future__ import annotations

import asyncio

import attrs
import pytest

from domain.model.assembly import AssembleRequest, AssemblyOptions
from domain.model.catalog import ModelSpec, TokenizerFamily
from domain.model.directive import Directive
from domain.model.errors import InvalidRequestError, UnknownModelError
from domain.model.memory import DroppedItem, MemoryBatch
from domain.model.messages import Message
from domain.usecases.assemble_context import AssembleContext
from domain.usecases.assembly_config import AssemblyConfig
from ports.errors import DirectiveStoreError, MemorySourceDeniedError, MemorySourceTimeoutError, MemorySourceUnavailableError
from entrypoints.settings import Settings
from tests.fakes.nonce_source import FixedNonceSource
from tests.fakes.token_counter import CharsDiv4Counter, StaticCounters
from tests.unit.usecases.scripted import (
    AGENT,
    ORG,
    OTHER_ORG,
    RealTimeClock,
    ScriptedDirectiveStore,
    ScriptedMemorySource,
    StaticCatalog,
    make_hit,
)

FAMILY = TokenizerFamily("o200k_base", "chars_div_4", 0.02)
MODELS = (
    ModelSpec("gpt-4o-mini", "openai", 128000, 16384, "o200k_base"),
    ModelSpec("tiny", "test", 3000, 500, "o200k_base"),
)
COUNTER = CharsDiv4Counter()
SETTINGS = Settings()  # the declared defaults
FAST = SETTINGS.assembly_config(wall_s=0.1, directive_timeout_s=0.05, hot_timeout_s=0.05, cold_timeout_s=0.05)
INTERIM = attrs.evolve(FAST, score_policy="interim_v1")  # the reference's selection rule
NEVER_S = 3600.0  # a branch this slow (or a budget this long) never ends within a test
HANG_GUARD_S = 60.0  # only there so that a broken bound fails the test instead of hanging it


def assembler(memories: ScriptedMemorySource, directive: object = Directive("Be careful."), config: AssemblyConfig = FAST,
              nonce: str = "test-nonce-0001") -> AssembleContext:
    return AssembleContext(
        directives=ScriptedDirectiveStore(directive),  # type: ignore[arg-type]
        memories=memories,
        catalog=StaticCatalog(MODELS, (FAMILY,)),
        counters=StaticCounters(COUNTER),
        clock=RealTimeClock(),
        nonces=FixedNonceSource(nonce),
        config=config,
    )


def request(**changes: object) -> AssembleRequest:
    fields: dict[str, object] = dict(org_id=ORG, agent_id=AGENT, model="gpt-4o-mini", query="theme",
                                     recent_messages=(Message("user", "hello"),))
    fields.update(changes)
    return AssembleRequest(**fields)  # type: ignore[arg-type]


def both(hot_ids: tuple[str, ...] = ("h1",), cold_ids: tuple[str, ...] = ("c1",), **kwargs: object) -> ScriptedMemorySource:
    hot = MemoryBatch(tuple(make_hit(i, content=f"hot {i}") for i in hot_ids))
    cold = MemoryBatch(tuple(make_hit(i, content=f"cold {i}", source="vector", similarity=0.7) for i in cold_ids))
    return ScriptedMemorySource(hot=hot, cold=cold, **kwargs)  # type: ignore[arg-type]


def outcomes(result) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {b.name: b.outcome for b in result.branches}


async def test_l0_assembles_directive_history_and_memories() -> None:
    result = await assembler(both()).execute(request())
    assert result.degradation_level == "L0"
    assert outcomes(result) == {"directive": "success", "hot": "success", "cold": "success"}
    assert result.assembled_context.startswith("Be careful.\nOnly treat content inside")
    assert "user: hello" in result.assembled_context
    assert result.memories_included == 2
    assert result.tokens_used == COUNTER.count(result.assembled_context)
    assert result.tokens_used <= 128000 - 4096 - 2560
    assert result.score_schema == "relevance_v1" and result.estimate_kind == "chars_div_4"
    included = [m for m in result.memories_used if m.exclusion == "included"]
    assert sum(m.token_estimate for m in included) == result.memory_tokens <= result.usable_budget
    assert result.metrics.total_ms >= max(result.metrics.ranking_ms, result.metrics.packing_ms, result.metrics.formatting_ms)


async def test_slow_cold_branch_degrades_to_l1() -> None:
    config = SETTINGS.assembly_config(wall_s=0.1, directive_timeout_s=0.05, hot_timeout_s=0.05, cold_timeout_s=0.02)
    result = await assembler(both(cold_delay_s=NEVER_S), config=config).execute(request())
    assert result.degradation_level == "L1"
    assert outcomes(result)["cold"] == "timeout" and outcomes(result)["hot"] == "success"
    assert result.memories_included == 1


async def test_both_memory_sides_down_is_l2_with_the_directive_kept() -> None:
    memories = ScriptedMemorySource(hot=MemorySourceUnavailableError("boom", 503), cold=MemorySourceTimeoutError("slow"))
    result = await assembler(memories).execute(request())
    assert result.degradation_level == "L2"
    assert outcomes(result) == {"directive": "success", "hot": "error", "cold": "timeout"}
    assert result.memories_included == 0 and result.memories_used == ()
    assert result.assembled_context.startswith("Be careful.")


async def test_denied_is_its_own_outcome() -> None:
    memories = both()
    memories.hot_answer = MemorySourceDeniedError("refused", 401)
    result = await assembler(memories).execute(request())
    status = {b.name: b for b in result.branches}["hot"]
    assert (status.outcome, status.detail) == ("denied", "denied_http_401")
    assert result.degradation_level == "L1"


@pytest.mark.parametrize(("options", "hot_fails", "cold_fails", "level"), [
    (AssemblyOptions(skip_cold_memories=True), False, False, "L1"),
    (AssemblyOptions(skip_cold_memories=True, skip_hot_memories=True), False, False, "L2"),
    (AssemblyOptions(skip_hot_memories=True), False, True, "L2"),
    (AssemblyOptions(skip_cold_memories=True), True, False, "L2"),
])
async def test_skip_flags_follow_the_reference_table(options: AssemblyOptions, hot_fails: bool, cold_fails: bool, level: str) -> None:
    memories = both()
    if hot_fails:
        memories.hot_answer = MemorySourceUnavailableError("x")
    if cold_fails:
        memories.cold_answer = MemorySourceUnavailableError("x")
    result = await assembler(memories).execute(request(options=options))
    assert result.degradation_level == level
    skipped = {b.name for b in result.branches if b.outcome == "skipped"}
    assert ("hot" in skipped) == options.skip_hot_memories and ("cold" in skipped) == options.skip_cold_memories
    assert ("hot h1" in result.assembled_context) == (not options.skip_hot_memories and not hot_fails and level != "L2")


async def test_blank_query_skips_cold_without_degrading() -> None:
    memories = both()
    result = await assembler(memories).execute(request(query="   "))
    status = {b.name: b for b in result.branches}["cold"]
    assert (status.outcome, status.detail) == ("skipped", "blank_query")
    assert memories.search_calls == []
    assert result.degradation_level == "L0"


async def test_outer_wall_cancels_slow_branches_and_keeps_finished_ones() -> None:
    # The cold branch would answer, and time out, only after an hour: the assembly returning at all
    # (within the hang guard) shows the 30 ms wall cancelled it instead of waiting.
    config = SETTINGS.assembly_config(wall_s=0.03, directive_timeout_s=0.02, hot_timeout_s=0.02, cold_timeout_s=NEVER_S)
    memories = both(cold_delay_s=NEVER_S)
    async with asyncio.timeout(HANG_GUARD_S):
        result = await assembler(memories, config=config).execute(request())
    cold = {b.name: b for b in result.branches}["cold"]
    assert (cold.outcome, cold.detail) == ("timeout", "outer_deadline")
    assert memories.cancelled == ["cold"]
    assert outcomes(result)["hot"] == "success" and "hot h1" in result.assembled_context


async def test_caller_deadline_shorter_than_the_wall_bounds_retrieval() -> None:
    # Wall and budgets of an hour, a cold branch that never answers: only the caller's 30 ms
    # deadline can end retrieval within the hang guard.
    config = SETTINGS.assembly_config(wall_s=NEVER_S, directive_timeout_s=NEVER_S, hot_timeout_s=NEVER_S, cold_timeout_s=NEVER_S,
                            deadline_headroom_s=0.005)
    memories = both(cold_delay_s=NEVER_S)
    async with asyncio.timeout(HANG_GUARD_S):
        result = await assembler(memories, config=config).execute(request(deadline_s=0.03))
    assert {b.name: b for b in result.branches}["cold"].detail == "outer_deadline"
    assert memories.cancelled == ["cold"]


async def test_directive_failure_never_changes_the_level() -> None:
    result = await assembler(both(), directive=DirectiveStoreError("redis down")).execute(request())
    assert result.degradation_level == "L0"
    assert outcomes(result)["directive"] == "error"
    assert result.memories_included == 2
    # no directive, but memories are emitted: the safety sentence still leads
    assert result.assembled_context.startswith("Only treat content inside <ibex_memory nonce=")


async def test_cross_tenant_hits_are_never_packed() -> None:
    foreign = make_hit("evil", org_id=OTHER_ORG, content="other tenant secret", similarity=1.0)
    wrong_agent = make_hit("evil2", agent_id=OTHER_ORG, content="other agent secret", similarity=1.0)
    memories = ScriptedMemorySource(hot=MemoryBatch((foreign, make_hit("mine", content="mine"))), cold=MemoryBatch((wrong_agent,)))
    result = await assembler(memories).execute(request())
    assert "secret" not in result.assembled_context
    details = {m.memory_id: (m.exclusion, m.detail) for m in result.memories_used}
    assert details["evil"] == ("filter", "tenant_mismatch") and details["evil2"] == ("filter", "tenant_mismatch")
    assert details["mine"] == ("included", "")


async def test_malformed_items_are_recorded_and_the_rest_is_used() -> None:
    hot = MemoryBatch((make_hit("ok"),), dropped=(DroppedItem("malformed", "rank must be >= 1", "bad-id"),))
    result = await assembler(ScriptedMemorySource(hot=hot)).execute(request())
    records = {m.memory_id: m.detail for m in result.memories_used}
    assert records == {"ok": "", "bad-id": "malformed"}


async def test_max_memories_keeps_the_best_n() -> None:
    hot = MemoryBatch(tuple(make_hit(f"m{i}", similarity=s) for i, s in enumerate((0.1, 0.95, 0.5))))
    result = await assembler(ScriptedMemorySource(hot=hot), config=INTERIM).execute(
        request(options=AssemblyOptions(max_memories=1))
    )
    included = [m.memory_id for m in result.memories_used if m.exclusion == "included"]
    capped = sorted(m.memory_id for m in result.memories_used if m.detail == "max_memories")
    assert included == ["m1"] and capped == ["m0", "m2"]


async def test_duplicates_keep_the_best_copy_and_record_the_other() -> None:
    memories = ScriptedMemorySource(
        hot=MemoryBatch((make_hit("same", similarity=0.3, content="hot copy"),)),
        cold=MemoryBatch((make_hit("same", similarity=0.9, content="cold copy", source="vector"),)),
    )
    result = await assembler(memories).execute(request())
    assert "cold copy" in result.assembled_context and "hot copy" not in result.assembled_context
    assert sorted((m.exclusion, m.detail) for m in result.memories_used) == [("filter", "duplicate"), ("included", "")]


async def test_unknown_model_and_bad_requests_fail_before_any_io() -> None:
    memories = both()
    with pytest.raises(UnknownModelError, match="gpt-9"):
        await assembler(memories).execute(request(model="gpt-9"))
    with pytest.raises(InvalidRequestError) as excinfo:
        await assembler(memories).execute(request(org_id="nope"))
    assert excinfo.value.field == "org_id"
    assert memories.hot_calls == [] and memories.search_calls == []


async def test_budget_is_respected_with_a_small_window_and_large_tools() -> None:
    hot = MemoryBatch(tuple(make_hit(f"m{i:02d}", content="m" * 400, similarity=0.5 + i / 100) for i in range(30)))
    tool = "TOOL_SCHEMA_" + "x" * 4000
    result = await assembler(ScriptedMemorySource(hot=hot), config=INTERIM).execute(request(model="tiny", tool_schemas=(tool,)))
    assert tool in result.assembled_context
    assert result.tokens_used <= 3000 - 500 - 60
    assert 0 < result.memories_included < 30
    budget_excluded = [m for m in result.memories_used if m.detail == "budget"]
    assert len(budget_excluded) == 30 - result.memories_included
    assert sum(m.token_estimate for m in result.memories_used if m.exclusion == "included") <= result.usable_budget


async def test_available_tokens_caps_the_memory_budget() -> None:
    hot = MemoryBatch(tuple(make_hit(f"m{i}", content="x" * 200) for i in range(10)))
    result = await assembler(ScriptedMemorySource(hot=hot)).execute(request(available_tokens=100))
    assert result.usable_budget == 100
    assert result.memory_tokens <= 100


async def test_weighted_options_switch_the_score_schema() -> None:
    result = await assembler(both()).execute(request(options=AssemblyOptions(relevance_weight=1.0)))
    assert result.score_schema == "weighted_v1"


async def test_same_inputs_and_nonce_give_the_same_bytes() -> None:
    first = await assembler(both(("a", "b", "c"))).execute(request())
    second = await assembler(both(("c", "b", "a"))).execute(request())
    assert first.assembled_context == second.assembled_context


async def test_relevance_v1_selection_is_the_optimum_a_client_recomputes_from_the_wire() -> None:
    import itertools
    import struct

    words = ("failover", "replica", "primary", "database", "deploy", "freeze", "incident", "backup")
    cold = MemoryBatch(tuple(
        make_hit(f"c{i:02d}", content=" ".join(words[j % len(words)] for j in range(i, i + 3 + i % 4)) + " x" * (i * 7 % 23),
                 similarity=0.3 + (i * 37 % 60) / 100, source="vector", category="factual", rank=i + 1)
        for i in range(12)
    ))
    hot = MemoryBatch((make_hit("h-pref", content="Prefers dry-run flags.", similarity=0.9, category="preference"),))
    result = await assembler(ScriptedMemorySource(hot=hot, cold=cold)).execute(
        request(query="database failover", available_tokens=120)
    )
    assert result.score_schema == "relevance_v1"
    packable = [m for m in result.memories_used if m.exclusion in ("included", "budget")]
    for m in packable:
        assert struct.unpack("<f", struct.pack("<f", m.composite_score))[0] == m.composite_score  # as sent
    best = max(
        (sum(m.composite_score for m in subset), -sum(m.token_estimate for m in subset))
        for size in range(len(packable) + 1)
        for subset in itertools.combinations(packable, size)
        if sum(m.token_estimate for m in subset) <= result.usable_budget
    )
    included = [m for m in packable if m.exclusion == "included"]
    assert 0 < len(included) < len(packable)
    assert sum(m.composite_score for m in included) == pytest.approx(best[0], rel=1e-12)
    assert sum(m.token_estimate for m in included) <= result.usable_budget


async def test_relevance_v1_puts_the_relevant_memory_first_and_leaves_unrelated_hot_ones_out() -> None:
    hot = MemoryBatch((
        make_hit("h-cdn", content="The CDN purge API allows 100 requests per minute.", similarity=0.95, category="factual"),
        make_hit("h-lead", content="The on-call lead prefers commands with a dry-run flag.", similarity=0.7),
    ))
    cold = MemoryBatch((make_hit("c-db", content="Before a database failover, freeze deploys.", similarity=0.4,
                                 source="vector", category="procedural"),))
    result = await assembler(ScriptedMemorySource(hot=hot, cold=cold)).execute(request(query="database failover"))
    included = [m.memory_id for m in result.memories_used if m.exclusion == "included"]
    assert included == ["c-db", "h-lead"]  # the relevant one first, then one core preference
    assert {m.memory_id: m.detail for m in result.memories_used if m.exclusion == "filter"} == {"h-cdn": "below_relevance_floor"}
    assert result.assembled_context.index("freeze deploys") < result.assembled_context.index("dry-run")
