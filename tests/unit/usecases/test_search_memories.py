from __future__ import annotations

import pytest

from domain.model.errors import InvalidRequestError
from domain.model.memory import DroppedItem, MemoryBatch
from domain.model.operations import SearchRequest
from domain.usecases.search_memories import SearchMemories
from ports.errors import MemorySourceUnavailableError
from entrypoints.settings import Settings
from tests.unit.usecases.scripted import AGENT, ORG, OTHER_ORG, RealTimeClock, ScriptedMemorySource, make_hit

CONFIG = Settings().search_config()  # the declared defaults


async def test_search_returns_own_tenant_hits_with_interim_scores() -> None:
    batch = MemoryBatch(
        (make_hit("a", similarity=1.0, confidence=0.0), make_hit("x", org_id=OTHER_ORG)),
        dropped=(DroppedItem("malformed", "rank"),),
    )
    source = ScriptedMemorySource(cold=batch)
    result = await SearchMemories(memories=source, clock=RealTimeClock(), config=CONFIG).execute(
        SearchRequest(ORG, AGENT, "theme", limit=0, min_similarity=0.0, categories=("factual",))
    )
    assert [m.memory_id for m in result.memories] == ["a"]
    assert result.memories[0].composite_score == pytest.approx(0.85)
    assert result.total_candidates == 3 and result.dropped == 2
    sent = source.search_calls[0]
    assert (sent.limit, sent.min_similarity, sent.categories) == (10, None, ("factual",))


async def test_source_failures_propagate_as_port_errors() -> None:
    source = ScriptedMemorySource(cold=MemorySourceUnavailableError("down", 503))
    with pytest.raises(MemorySourceUnavailableError):
        await SearchMemories(memories=source, clock=RealTimeClock(), config=CONFIG).execute(SearchRequest(ORG, AGENT, "q"))


async def test_blank_query_is_invalid() -> None:
    with pytest.raises(InvalidRequestError, match="query"):
        await SearchMemories(memories=ScriptedMemorySource(), clock=RealTimeClock(), config=CONFIG).execute(SearchRequest(ORG, AGENT, " "))
