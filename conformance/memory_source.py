"""Conformance suite for MemorySource + FeedbackSink implementations (pytest, class-based).

Subclass ``MemorySourceConformance`` in a test module (class name starting with ``Test``) and
provide an async fixture ``conformance_backend`` returning a ``ConformanceBackend`` (see
``conformance.seed``): the port objects plus ``seed`` and ``close``. Every check gets a fresh
fixture and fresh tenant ids. Needs pytest-asyncio (in strict mode declare the fixture with
``@pytest_asyncio.fixture``). Set ``agent_ids_are_global = True`` in the subclass when an agent
id can belong to one org only. A check that cannot hold for a backend by design may be overridden
in the subclass, with a comment saying why.

What is checked, by the port contract alone: tenant isolation (another org or another agent is
never returned; feedback across orgs is MemoryNotFoundError), limits, ordering and ranks,
similarity range, ``min_similarity``/``min_confidence`` (inclusive), categories and tags, empty
results for an unknown agent, feedback effects and idempotency, error types, behaviour after
``close``, timeouts, and tenant isolation under concurrent calls. An unknown agent may get empty
results or MemorySourceDeniedError; reported creation times are only checked to be aware.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Mapping, Sequence

import pytest

from conformance.seed import (
    ANIMAL_QUERY,
    CORPUS,
    ConformanceBackend,
    SeedMemory,
    Tenant,
    World,
    corpus_for,
)
from domain.model.feedback import FeedbackItem, FeedbackResult
from domain.model.memory import HotQuery, MemoryBatch, MemoryHit, SearchQuery
from ports.errors import (
    MemoryNotFoundError,
    MemorySourceClosedError,
    MemorySourceDeniedError,
    MemorySourceError,
    MemorySourceTimeoutError,
)

__all__ = ["ConformanceBackend", "MemorySourceConformance", "SeedMemory"]

TIMEOUT_S = 10.0
Corpus = Mapping[str, SeedMemory]


class MemorySourceConformance:
    """The checks; a subclass supplies the ``conformance_backend`` fixture."""

    pytestmark = [pytest.mark.asyncio]

    #: True for a backend where an agent id belongs to exactly one org (the memory service): the
    #: foreign org then gets its own agent id instead of reusing the home agent's id.
    agent_ids_are_global = False

    @pytest.fixture
    def world(self) -> World:
        return World.fresh(agent_ids_are_global=self.agent_ids_are_global)

    # --- tenant fence -------------------------------------------------------------------------

    async def test_hot_returns_only_the_tenants_memories(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        batch = await _hot(conformance_backend, world.home, limit=50)
        _assert_within(batch, world.home, corpus)
        assert {hit.memory_id for hit in batch.hits} == _ids(corpus)

    async def test_search_returns_only_the_tenants_memories(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        for entry in CORPUS:
            batch = await _search(conformance_backend, world.home, entry.content, limit=50)
            _assert_within(batch, world.home, corpus)

    async def test_neighbours_see_only_their_own_memories(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        for neighbour in (world.sibling_agent, world.foreign_org):
            hot = await _hot(conformance_backend, neighbour, limit=50)
            found = await _search(conformance_backend, neighbour, ANIMAL_QUERY, limit=50)
            for hit in hot.hits + found.hits:
                assert (hit.org_id, hit.agent_id) == (neighbour.org_id, neighbour.agent_id)
                assert hit.memory_id not in _ids(corpus), "a home memory leaked to a neighbour"

    async def test_unknown_agent_gets_nothing(self, conformance_backend, world):
        """Empty results, or MemorySourceDeniedError from a backend that knows its agents."""
        await _seed(conformance_backend, world)
        stranger = Tenant(world.home.org_id, str(uuid.uuid4()))
        calls = (lambda: _hot(conformance_backend, stranger, limit=50),
                 lambda: _search(conformance_backend, stranger, ANIMAL_QUERY, limit=50))
        for call in calls:
            try:
                batch = await call()
            except MemorySourceDeniedError:
                continue
            assert batch.hits == ()

    async def test_concurrent_calls_stay_within_their_tenant(self, conformance_backend, world):
        await _seed(conformance_backend, world)
        calls = [
            (tenant, _hot(conformance_backend, tenant, limit=50) if n % 2 else
             _search(conformance_backend, tenant, CORPUS[n % len(CORPUS)].content, limit=50))
            for n in range(30)
            for tenant in world.tenants
        ]
        batches = await asyncio.gather(*(call for _, call in calls))
        for (tenant, _), batch in zip(calls, batches, strict=True):
            assert all((h.org_id, h.agent_id) == (tenant.org_id, tenant.agent_id) for h in batch.hits)

    # --- hot ----------------------------------------------------------------------------------

    async def test_hot_honours_the_limit(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        assert len((await _hot(conformance_backend, world.home, limit=3)).hits) == 3
        assert len((await _hot(conformance_backend, world.home, limit=50)).hits) == len(corpus)

    async def test_hot_is_ordered_with_ranks_one_to_n(self, conformance_backend, world):
        await _seed(conformance_backend, world)
        batch = await _hot(conformance_backend, world.home, limit=50)
        _assert_ordered(batch, check_id_ties=False)

    async def test_hot_honours_min_confidence_inclusively(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        batch = await _hot(conformance_backend, world.home, limit=50, min_confidence=0.6)
        expected = {m.memory_id for m in corpus.values() if m.confidence >= 0.6}
        assert {hit.memory_id for hit in batch.hits} == expected

    async def test_hits_report_the_stored_memory(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        hot = await _hot(conformance_backend, world.home, limit=50)
        found = await _search(conformance_backend, world.home, ANIMAL_QUERY, limit=50)
        by_id = {memory.memory_id: memory for memory in corpus.values()}
        for hit in hot.hits + found.hits:
            _assert_reports(hit, by_id[hit.memory_id])

    # --- search -------------------------------------------------------------------------------

    async def test_search_ranks_a_memory_first_for_its_own_text(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        for key, memory in corpus.items():
            batch = await _search(conformance_backend, world.home, memory.content, limit=5)
            assert batch.hits, f"no hit for the exact text of {key!r}"
            assert batch.hits[0].memory_id == memory.memory_id, f"{key!r} is not first for its own text"

    async def test_search_is_ordered_with_ranks_and_similarity_in_range(self, conformance_backend, world):
        await _seed(conformance_backend, world)
        for query in (ANIMAL_QUERY, CORPUS[0].content, "blue pipeline planning"):
            batch = await _search(conformance_backend, world.home, query, limit=50)
            _assert_ordered(batch, check_id_ties=True)
            assert all(0.0 <= hit.similarity <= 1.0 for hit in batch.hits)

    async def test_search_grades_partial_matches(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        batch = await _search(conformance_backend, world.home, ANIMAL_QUERY, limit=50)
        order = [hit.memory_id for hit in batch.hits]
        animals = [corpus[key].memory_id for key in ("animals3", "animals2", "animals1")]
        assert all(memory_id in order for memory_id in animals)
        assert order.index(animals[0]) < order.index(animals[1]) < order.index(animals[2])

    async def test_search_honours_the_limit_and_a_smaller_limit_is_a_prefix(self, conformance_backend, world):
        await _seed(conformance_backend, world)
        full = await _search(conformance_backend, world.home, ANIMAL_QUERY, limit=50)
        short = await _search(conformance_backend, world.home, ANIMAL_QUERY, limit=2)
        assert len(full.hits) >= 3
        assert [h.memory_id for h in short.hits] == [h.memory_id for h in full.hits[:2]]

    async def test_search_honours_min_similarity(self, conformance_backend, world):
        await _seed(conformance_backend, world)
        full = await _search(conformance_backend, world.home, ANIMAL_QUERY, limit=50)
        top, low = full.hits[0].similarity, full.hits[-1].similarity
        assert top > low, "the graded animal memories must get different similarities"
        threshold = (top + low) / 2
        cut = await _search(conformance_backend, world.home, ANIMAL_QUERY, limit=50, min_similarity=threshold)
        assert cut.hits and cut.hits[0].memory_id == full.hits[0].memory_id
        assert all(hit.similarity >= threshold for hit in cut.hits)
        assert {h.memory_id for h in cut.hits} <= {h.memory_id for h in full.hits}
        above = await _search(conformance_backend, world.home, ANIMAL_QUERY, limit=50, min_similarity=top)
        assert full.hits[0].memory_id in {hit.memory_id for hit in above.hits}, "min_similarity is inclusive"

    async def test_search_honours_min_confidence_inclusively(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        batch = await _search(conformance_backend, world.home, ANIMAL_QUERY, limit=50, min_confidence=0.5)
        ids = {hit.memory_id for hit in batch.hits}
        by_id = {memory.memory_id: memory for memory in corpus.values()}
        assert all(by_id[memory_id].confidence >= 0.5 for memory_id in ids)
        assert {corpus["animals3"].memory_id, corpus["animals2"].memory_id} <= ids
        assert corpus["animals1"].memory_id not in ids

    async def test_search_filters_by_category(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        batch = await _search(conformance_backend, world.home, ANIMAL_QUERY, limit=50, categories=("behavioral",))
        by_id = {memory.memory_id: memory for memory in corpus.values()}
        assert [hit.memory_id for hit in batch.hits] == [corpus["animals1"].memory_id]
        assert all(by_id[hit.memory_id].category == "behavioral" for hit in batch.hits)

    async def test_search_filters_by_tag(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        rare = await _search(conformance_backend, world.home, ANIMAL_QUERY, limit=50, tags=("rare",))
        assert [hit.memory_id for hit in rare.hits] == [corpus["animals1"].memory_id]
        query = f"{ANIMAL_QUERY} editor"
        tagged = await _search(conformance_backend, world.home, query, limit=50, tags=("animals",))
        by_id = {memory.memory_id: memory for memory in corpus.values()}
        assert all("animals" in by_id[hit.memory_id].tags for hit in tagged.hits)
        assert len(tagged.hits) == 3

    # --- feedback -----------------------------------------------------------------------------

    async def test_positive_feedback_raises_usefulness_and_counts(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        memory = corpus["deploy"]
        result = await _feedback(conformance_backend, world.home, memory, "positive")
        assert (result.memory_id, result.feedback) == (memory.memory_id, "positive")
        assert result.new_usefulness_score > memory.usefulness
        assert (result.total_positive_feedback, result.total_negative_feedback) == (1, 0)
        assert result.previous_usefulness_score in (None, pytest.approx(memory.usefulness))

    async def test_negative_feedback_lowers_usefulness_and_counts(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        memory = corpus["deploy"]
        result = await _feedback(conformance_backend, world.home, memory, "negative")
        assert result.new_usefulness_score < memory.usefulness
        assert (result.total_positive_feedback, result.total_negative_feedback) == (0, 1)

    async def test_neutral_feedback_counts_nothing(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        result = await _feedback(conformance_backend, world.home, corpus["deploy"], "neutral")
        assert (result.total_positive_feedback, result.total_negative_feedback) == (0, 0)

    async def test_feedback_with_a_repeated_idempotency_key_applies_once(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        memory = corpus["billing"]
        first = await _feedback(conformance_backend, world.home, memory, "positive", key="retry-1")
        again = await _feedback(conformance_backend, world.home, memory, "positive", key="retry-1")
        assert again == first
        other = await _feedback(conformance_backend, world.home, memory, "positive", key="retry-2")
        assert other.total_positive_feedback == 2
        assert other.new_usefulness_score > first.new_usefulness_score

    async def test_feedback_is_visible_to_reads(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        memory = corpus["planning"]
        result = await _feedback(conformance_backend, world.home, memory, "positive")
        hot = await _hot(conformance_backend, world.home, limit=50)
        hit = next(hit for hit in hot.hits if hit.memory_id == memory.memory_id)
        assert hit.usefulness is None or hit.usefulness == pytest.approx(result.new_usefulness_score)

    async def test_feedback_on_an_unknown_memory_is_not_found(self, conformance_backend, world):
        await _seed(conformance_backend, world)
        ghost = SeedMemory(str(uuid.uuid4()), world.home.org_id, world.home.agent_id, "x", "factual", 0.5)
        with pytest.raises(MemoryNotFoundError):
            await _feedback(conformance_backend, world.home, ghost, "positive")

    async def test_feedback_from_another_org_is_not_found_and_changes_nothing(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        memory = corpus["espresso"]
        with pytest.raises(MemoryNotFoundError):
            await _feedback(conformance_backend, world.foreign_org, memory, "positive")
        result = await _feedback(conformance_backend, world.home, memory, "positive")
        assert result.total_positive_feedback == 1

    # --- lifecycle and timeouts ---------------------------------------------------------------

    async def test_calls_after_close_raise_closed(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        await conformance_backend.close()
        with pytest.raises(MemorySourceClosedError):
            await _hot(conformance_backend, world.home, limit=5)
        with pytest.raises(MemorySourceClosedError):
            await _search(conformance_backend, world.home, ANIMAL_QUERY, limit=5)
        with pytest.raises(MemorySourceError):
            await _feedback(conformance_backend, world.home, corpus["deploy"], "positive")
        await conformance_backend.close()  # closing twice is harmless

    async def test_a_generous_timeout_succeeds(self, conformance_backend, world):
        await _seed(conformance_backend, world)
        query = HotQuery(org_id=world.home.org_id, agent_id=world.home.agent_id, limit=5)
        assert len((await conformance_backend.source.hot(query, timeout_s=60.0)).hits) == 5

    async def test_a_tiny_timeout_answers_or_raises_timeout(self, conformance_backend, world):
        corpus = await _seed(conformance_backend, world)
        home = world.home
        query = SearchQuery(org_id=home.org_id, agent_id=home.agent_id, query=ANIMAL_QUERY, min_similarity=0.0)
        try:
            batch = await conformance_backend.source.search(query, timeout_s=1e-6)
        except MemorySourceTimeoutError:
            return
        _assert_within(batch, world.home, corpus)


async def _seed(backend: ConformanceBackend, world: World) -> Corpus:
    """Seed the corpus in the home tenant and in both neighbours; return the home one."""
    corpora = [corpus_for(tenant) for tenant in world.tenants]
    await backend.seed([memory for corpus in corpora for memory in corpus.values()])
    return corpora[0]


async def _hot(backend: ConformanceBackend, tenant: Tenant, *, limit: int, min_confidence: float = 0.0) -> MemoryBatch:
    query = HotQuery(org_id=tenant.org_id, agent_id=tenant.agent_id, limit=limit, min_confidence=min_confidence)
    return await backend.source.hot(query, timeout_s=TIMEOUT_S)


async def _search(
    backend: ConformanceBackend,
    tenant: Tenant,
    text: str,
    *,
    limit: int,
    min_similarity: float = 0.0,
    min_confidence: float = 0.0,
    categories: Sequence[str] = (),
    tags: Sequence[str] = (),
) -> MemoryBatch:
    query = SearchQuery(
        org_id=tenant.org_id, agent_id=tenant.agent_id, query=text, limit=limit, min_similarity=min_similarity,
        min_confidence=min_confidence, categories=tuple(categories), tags=tuple(tags),
    )
    batch = await backend.source.search(query, timeout_s=TIMEOUT_S)
    assert len(batch.hits) <= limit, f"search returned {len(batch.hits)} hits for limit {limit}"
    return batch


async def _feedback(
    backend: ConformanceBackend, tenant: Tenant, memory: SeedMemory, value: str, *, key: str | None = None
) -> FeedbackResult:
    item = FeedbackItem(
        org_id=tenant.org_id, memory_id=memory.memory_id, feedback=value,
        idempotency_key=key or str(uuid.uuid4()), trace_id=str(uuid.uuid4()),
    )
    return await backend.feedback.record(item, timeout_s=TIMEOUT_S)


def _ids(corpus: Corpus) -> set[str]:
    return {memory.memory_id for memory in corpus.values()}


def _assert_within(batch: MemoryBatch, tenant: Tenant, corpus: Corpus) -> None:
    for hit in batch.hits:
        assert (hit.org_id, hit.agent_id) == (tenant.org_id, tenant.agent_id), f"foreign hit {hit.memory_id}"
        assert hit.memory_id in _ids(corpus), f"hit {hit.memory_id} is not one of the tenant's memories"


def _assert_ordered(batch: MemoryBatch, *, check_id_ties: bool) -> None:
    assert [hit.rank for hit in batch.hits] == list(range(1, len(batch.hits) + 1))
    for hit in batch.hits:
        assert math.isfinite(hit.similarity) and 0.0 <= hit.similarity <= 1.0
    for earlier, later in zip(batch.hits, batch.hits[1:]):
        assert earlier.similarity >= later.similarity, "hits are not in descending order"
        if check_id_ties and earlier.similarity == later.similarity:
            assert earlier.memory_id < later.memory_id, "equal similarities are not ordered by memory id"


def _assert_reports(hit: MemoryHit, memory: SeedMemory) -> None:
    assert (hit.org_id, hit.agent_id, hit.content, hit.category) == (
        memory.org_id, memory.agent_id, memory.content, memory.category,
    )
    assert hit.confidence == pytest.approx(memory.confidence)
    assert isinstance(hit.source, str) and hit.source
    assert hit.usefulness is None or hit.usefulness == pytest.approx(memory.usefulness)
    # A service may stamp creation times itself: only their form is checked.
    assert hit.created_at is None or hit.created_at.utcoffset() is not None
    assert hit.tags in ((), memory.tags)
