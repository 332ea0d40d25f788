"""The conformance kit run against the embedded store and the in-memory fake, and proof that it
fails implementations that break the port contract (each broken one run through ``pytester``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from adapters.embedded import EmbeddedMemoryStore
from conformance.memory_source import MemorySourceConformance
from conformance.seed import SEED_TIME, SeedMemory
from domain.model.directive import Directive
from domain.model.feedback import FeedbackItem, FeedbackResult
from domain.model.memory import HotQuery, MemoryBatch, SearchQuery
from ports.errors import (
    DirectiveStoreError,
    DirectiveStoreTimeoutError,
    MemorySourceDeniedError,
    MemorySourceTimeoutError,
)
from tests.fakes.clock import FixedClock
from tests.fakes.directive_store import InMemoryDirectiveStore
from tests.fakes.memory_source import InMemoryMemorySource

pytest_plugins = ["pytester"]
ORG, AGENT = "8c1f0a4e-3b57-4d2a-9e61-0f5b7c2d9a13", "2e7d4c91-6a0b-4f38-b5d2-c8e1f3a07b64"


class EmbeddedBackend:
    """The embedded store seeded through its own write API."""

    def __init__(self, store: EmbeddedMemoryStore) -> None:
        self.source = self.feedback = store

    async def seed(self, memories: Sequence[SeedMemory]) -> None:
        for memory in memories:
            await self.source.add(
                org_id=memory.org_id, agent_id=memory.agent_id, content=memory.content,
                category=memory.category, confidence=memory.confidence, usefulness=memory.usefulness,
                tags=memory.tags, memory_id=memory.memory_id, created_at=memory.created_at,
                retrieval_count=memory.retrieval_count,
            )

    async def close(self) -> None:
        await self.source.close()


class FakeBackend:
    """Any InMemoryMemorySource (or a deliberately broken subclass) as a conformance backend."""

    def __init__(self, fake: InMemoryMemorySource) -> None:
        self.source = self.feedback = fake

    async def seed(self, memories: Sequence[SeedMemory]) -> None:
        self.source.add(*memories)

    async def close(self) -> None:
        await self.source.close()


class TestEmbeddedStoreConformance(MemorySourceConformance):
    @pytest.fixture
    async def conformance_backend(self, tmp_path: Path) -> AsyncIterator[EmbeddedBackend]:
        clock = FixedClock(SEED_TIME + timedelta(days=1))
        backend = EmbeddedBackend(EmbeddedMemoryStore.open(tmp_path / "ibex.db", clock=clock))
        yield backend
        await backend.close()


class TestInMemoryFakeConformance(MemorySourceConformance):
    @pytest.fixture
    async def conformance_backend(self) -> AsyncIterator[FakeBackend]:
        backend = FakeBackend(InMemoryMemorySource())
        yield backend
        await backend.close()


# --- deliberately broken implementations ---------------------------------------------------


class OrgBlindSource(InMemoryMemorySource):
    """Reads filter by agent only: another org's agent with the same id leaks in."""

    def _visible(self, memory: SeedMemory, org_id: str, agent_id: str) -> bool:
        return memory.agent_id == agent_id


class LimitBlindSource(InMemoryMemorySource):
    """Returns every match whatever the limit."""

    async def hot(self, query: HotQuery, *, timeout_s: float) -> MemoryBatch:
        widened = HotQuery(query.org_id, query.agent_id, 10_000, query.min_confidence)
        return await super().hot(widened, timeout_s=timeout_s)

    async def search(self, query: SearchQuery, *, timeout_s: float) -> MemoryBatch:
        widened = SearchQuery(query.org_id, query.agent_id, query.query, 10_000, query.min_similarity,
                              query.min_confidence, query.categories, query.tags)
        return await super().search(widened, timeout_s=timeout_s)


class RetryCountingSink(InMemoryMemorySource):
    """Applies every feedback write, ignoring its idempotency key."""

    async def record(self, item: FeedbackItem, *, timeout_s: float) -> FeedbackResult:
        fresh = FeedbackItem(item.org_id, item.memory_id, item.feedback, idempotency_key="")
        return await super().record(fresh, timeout_s=timeout_s)


class NeverClosedSource(InMemoryMemorySource):
    """close() does nothing: calls keep answering."""

    async def close(self) -> None:
        return None


class FilterBlindSource(InMemoryMemorySource):
    """Search ignores min_confidence, categories and tags."""

    async def search(self, query: SearchQuery, *, timeout_s: float) -> MemoryBatch:
        widened = SearchQuery(query.org_id, query.agent_id, query.query, query.limit, query.min_similarity)
        return await super().search(widened, timeout_s=timeout_s)


BROKEN = {
    "OrgBlindSource": ("test_hot_returns_only_the_tenants_memories", "test_search_returns_only_the_tenants_memories",
                       "test_neighbours_see_only_their_own_memories", "test_concurrent_calls_stay_within_their_tenant"),
    "LimitBlindSource": ("test_hot_honours_the_limit", "test_search_honours_the_limit_and_a_smaller_limit_is_a_prefix"),
    "RetryCountingSink": ("test_feedback_with_a_repeated_idempotency_key_applies_once",),
    "NeverClosedSource": ("test_calls_after_close_raise_closed",),
    "FilterBlindSource": ("test_search_honours_min_confidence_inclusively", "test_search_filters_by_category",
                          "test_search_filters_by_tag"),
}

KIT_RUN = """
import pytest
from conformance.memory_source import MemorySourceConformance
from tests.contract.test_memory_source_conformance import FakeBackend, {names}
"""
KIT_CLASS = """

class Test{name}(MemorySourceConformance):
    @pytest.fixture
    async def conformance_backend(self):
        backend = FakeBackend({name}())
        yield backend
        await backend.close()
"""


def _kit_module(names: Sequence[str]) -> str:
    return KIT_RUN.format(names=", ".join(names)) + "".join(KIT_CLASS.format(name=name) for name in names)


def test_the_kit_fails_each_broken_implementation_on_what_it_breaks(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_kit=_kit_module(sorted(BROKEN)))
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    failed = {tuple(line.split(" ")[1].split("::")[1:]) for line in result.outlines if line.startswith("FAILED")}
    for name, checks in BROKEN.items():
        missed = [check for check in checks if (f"Test{name}", check) not in failed]
        assert not missed, f"{name} passed checks it breaks: {missed}\n{result.stdout.str()}"
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_the_kit_runs_in_strict_asyncio_mode_from_another_project(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n")
    module = _kit_module(["InMemoryMemorySource"]).replace("    @pytest.fixture\n", "    @pytest_asyncio.fixture\n")
    pytester.makepyfile(test_kit=module.replace("import pytest\n", "import pytest\nimport pytest_asyncio\n", 1))
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=len([name for name in dir(MemorySourceConformance) if name.startswith("test_")]))


# --- the fakes' test controls ----------------------------------------------------------------


async def test_the_fake_source_times_out_past_its_delay_and_raises_an_injected_error() -> None:
    fake = InMemoryMemorySource(delay_s=0.05)
    with pytest.raises(MemorySourceTimeoutError):
        await fake.hot(HotQuery(ORG, AGENT), timeout_s=0.01)
    assert (await fake.hot(HotQuery(ORG, AGENT), timeout_s=1.0)).hits == ()
    fake.fail_with = MemorySourceDeniedError("refused", status_code=403)
    with pytest.raises(MemorySourceDeniedError):
        await fake.search(SearchQuery(ORG, AGENT, "anything"), timeout_s=1.0)
    assert (len(fake.hot_queries), len(fake.search_queries)) == (2, 1)


async def test_the_fake_directive_store_serves_what_was_set_until_closed() -> None:
    store = InMemoryDirectiveStore(delay_s=0.05)
    store.set(ORG, AGENT, Directive("Be brief.", "system_append", "v1"))
    assert await store.get(ORG, AGENT, timeout_s=1.0) == Directive("Be brief.", "system_append", "v1")
    assert await store.get(ORG, "other-agent", timeout_s=1.0) is None
    with pytest.raises(DirectiveStoreTimeoutError):
        await store.get(ORG, AGENT, timeout_s=0.01)
    await store.close()
    with pytest.raises(DirectiveStoreError):
        await store.get(ORG, AGENT, timeout_s=1.0)


def test_the_fixed_clock_moves_only_forward_when_advanced() -> None:
    clock = FixedClock(SEED_TIME)
    clock.advance(90)
    assert (clock.now(), clock.monotonic()) == (SEED_TIME + timedelta(seconds=90), 90.0)
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="timezone-aware"):
        FixedClock(SEED_TIME.replace(tzinfo=None))
