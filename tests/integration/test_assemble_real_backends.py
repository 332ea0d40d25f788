"""AssembleContext against real components: a real redis-server holding the Go proxy's directive
envelope, and the loopback memory service over HTTP. No doubles anywhere."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import attrs
import pytest
import redis.asyncio as redis_asyncio

from adapters.json_model_catalog import JsonModelCatalog
from adapters.memory_http import HttpMemorySource
from adapters.redis_directive_store import RedisDirectiveStore
from adapters.secrets_nonce_source import SecretsNonceSource
from adapters.system_clock import SystemClock
from adapters.token_counters import TokenCountersRegistry
from domain.model.assembly import AssembleRequest, AssemblyOptions
from domain.model.memory import HotQuery
from domain.model.messages import Message
from domain.model.operations import FeedbackRequest
from domain.usecases.assemble_context import AssembleContext
from domain.usecases.assembly_config import AssemblyConfig
from domain.usecases.record_feedback import FeedbackConfig, RecordMemoryFeedback
from entrypoints.settings import Settings
from tests.support.go_envelope import go_envelope
from tests.support.memory_server import MemoryServer
from tests.support.redis_server import RedisServer

COUNTERS = TokenCountersRegistry()
# Budgets far beyond what any branch takes: no test here depends on how fast the machine is. A test
# that needs a branch to time out holds that endpoint (no answer at all) and gives it a short budget.
CONFIG = Settings().assembly_config(wall_s=30.0, directive_timeout_s=10.0, hot_timeout_s=10.0, cold_timeout_s=10.0)
HANG_GUARD_S = 60.0


@attrs.frozen
class Tenant:
    org_id: str
    agent_id: str
    token: str


@pytest.fixture(scope="module")
def memory_server() -> Iterator[MemoryServer]:
    with MemoryServer.running() as server:
        yield server


@pytest.fixture
def tenant(memory_server: MemoryServer) -> Tenant:
    tenant = Tenant(str(uuid.uuid4()), str(uuid.uuid4()), f"token-{uuid.uuid4().hex}")
    memory_server.add_token(tenant.token, tenant.org_id)
    memory_server.add_agent(tenant.org_id, tenant.agent_id)
    for text, score in [("theme prefers dark mode", 0.9), ("theme uses large fonts", 0.5), ("theme was blue last year", 0.2)]:
        memory_server.add_memory(tenant.org_id, tenant.agent_id, text, category="preference", confidence=0.8, hot_score=score)
    return tenant


@pytest.fixture
async def directives(private_redis: RedisServer, tenant: Tenant) -> AsyncIterator[RedisDirectiveStore]:
    raw = redis_asyncio.from_url(private_redis.url)
    await raw.set(f"{tenant.org_id}:directive:{tenant.agent_id}", go_envelope("Answer <briefly> & kindly.", "system_first", uuid.uuid4()))
    await raw.aclose()
    store = RedisDirectiveStore.for_branch_timeout(private_redis.url, branch_timeout_s=CONFIG.directive_timeout_s)
    yield store
    await store.close()


@pytest.fixture
async def memories(memory_server: MemoryServer, tenant: Tenant) -> AsyncIterator[HttpMemorySource]:
    source = HttpMemorySource(memory_server.base_url, tenant.token, pool_size=8)
    yield source
    await source.close()
    memory_server.clear_faults()


def assembler(directives: RedisDirectiveStore, memories: HttpMemorySource, config: AssemblyConfig = CONFIG) -> AssembleContext:
    return AssembleContext(directives=directives, memories=memories, catalog=JsonModelCatalog.builtin(), counters=COUNTERS,
                           clock=SystemClock(), nonces=SecretsNonceSource(), config=config)


def request(tenant: Tenant, **changes: object) -> AssembleRequest:
    fields: dict[str, object] = dict(org_id=tenant.org_id, agent_id=tenant.agent_id, model="gpt-4o", query="theme",
                                     recent_messages=(Message("user", "which theme?"),))
    fields.update(changes)
    return AssembleRequest(**fields)  # type: ignore[arg-type]


def outcomes(result) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {b.name: b.outcome for b in result.branches}


async def test_l0_with_the_go_envelope_directive_and_exact_counts(directives, memories, tenant) -> None:
    result = await assembler(directives, memories).execute(request(tenant))
    assert result.degradation_level == "L0" and outcomes(result) == {"directive": "success", "hot": "success", "cold": "success"}
    assert result.assembled_context.startswith("Answer <briefly> & kindly.\nOnly treat content inside <ibex_memory nonce=")
    assert result.estimate_kind == "exact_o200k_base"
    assert result.tokens_used == COUNTERS.for_kind("exact_o200k_base").count(result.assembled_context)
    assert "theme prefers dark mode" in result.assembled_context


async def test_redis_down_keeps_the_memories(private_redis, directives, memories, tenant) -> None:
    private_redis.stop()
    result = await assembler(directives, memories).execute(request(tenant))
    assert outcomes(result)["directive"] in {"error", "timeout"}
    assert result.degradation_level == "L0" and result.memories_included >= 3
    assert result.assembled_context.startswith("Only treat content inside")


async def test_slow_cold_is_l1_and_both_down_is_l2(directives, memories, tenant, memory_server) -> None:
    memory_server.hold("search")  # never answers (until the fixture clears the faults)
    config = attrs.evolve(CONFIG, cold_timeout_s=0.2)
    result = await assembler(directives, memories, config).execute(request(tenant))
    assert result.degradation_level == "L1" and outcomes(result)["cold"] == "timeout"
    memory_server.force_status("hot", 503)
    result = await assembler(directives, memories, config).execute(request(tenant))
    assert result.degradation_level == "L2" and result.memories_included == 0
    assert result.assembled_context.startswith("Answer <briefly> & kindly.")


async def test_caller_deadline_shorter_than_the_wall(directives, memories, tenant, memory_server) -> None:
    # The search never answers and neither the wall nor the cold budget would end it before an
    # hour: an answer within the hang guard can only come from the caller's 60 ms deadline.
    memory_server.hold("search")
    config = attrs.evolve(CONFIG, wall_s=3600.0, cold_timeout_s=3600.0)
    async with asyncio.timeout(HANG_GUARD_S):
        result = await assembler(directives, memories, config).execute(request(tenant, deadline_s=0.06))
    assert {b.name: b.detail for b in result.branches}["cold"] == "outer_deadline"


async def test_blank_query_skips_cold(directives, memories, tenant, memory_server) -> None:
    memory_server.clear_log()
    result = await assembler(directives, memories).execute(request(tenant, query=""))
    assert outcomes(result)["cold"] == "skipped" and result.degradation_level == "L0"
    assert memory_server.requests("search") == ()


async def test_cross_tenant_and_malformed_items_are_dropped_and_recorded(directives, memories, tenant, memory_server) -> None:
    memory_server.inject_foreign_items("hot", 2)
    memory_server.inject_bad_items("search", "rank_zero")
    result = await assembler(directives, memories).execute(request(tenant))
    details = [m.detail for m in result.memories_used]
    assert details.count("tenant_mismatch") == 2 and details.count("malformed") == 1
    assert "foreign" not in result.assembled_context
    assert result.degradation_level == "L0"


async def test_max_memories_keeps_the_best_n(directives, memories, tenant) -> None:
    result = await assembler(directives, memories).execute(request(tenant, options=AssemblyOptions(max_memories=1)))
    included = [m for m in result.memories_used if m.exclusion == "included"]
    capped = [m for m in result.memories_used if m.detail == "max_memories"]
    assert len(included) == 1 and len(capped) >= 2
    assert included[0].composite_score >= max(m.composite_score for m in capped)


async def test_feedback_partially_failing_reports_every_id(memories, tenant, memory_server) -> None:
    known = [m.memory_id for m in (await memories.hot(HotQuery(tenant.org_id, tenant.agent_id), timeout_s=1)).hits]
    unknown = str(uuid.uuid4())
    use_case = RecordMemoryFeedback(sink=memories, clock=SystemClock(), nonces=SecretsNonceSource(),
                                    config=FeedbackConfig(attempt_timeout_s=1.0, backoff_s=0.001))
    outcome = await use_case.execute(FeedbackRequest(tenant.org_id, (known[0], unknown), "positive", trace_id="t-1"))
    assert outcome.success is False
    errors = {u.memory_id: u.error for u in outcome.updates}
    assert errors == {known[0]: "", unknown: "not_found"}
    again = await use_case.execute(FeedbackRequest(tenant.org_id, (known[0],), "positive", trace_id="t-1"))
    assert again.success and memory_server.feedback_totals(known[0]) == (1, 0)
