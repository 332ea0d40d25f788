"""relevance_v1's exclusion reasons reach the explain records and the Prometheus metrics."""

from __future__ import annotations

from domain.model.memory import MemoryBatch
from entrypoints.observability.metrics import ServiceMetrics
from tests.unit.usecases.scripted import ScriptedMemorySource, make_hit
from tests.unit.usecases.test_assemble_context import assembler, request


async def test_every_screening_reason_is_recorded_and_counted() -> None:
    hot = MemoryBatch((
        make_hit("h-cdn", content="The CDN purge API allows 100 requests per minute.", similarity=0.95, category="factual"),
        *(make_hit(f"h-fail{i}", content=f"Database failover drill {i} went fine.", similarity=0.9 - i / 100,
                   category="episodic", rank=i + 1) for i in range(6)),
    ))
    cold = MemoryBatch((
        make_hit("c-db", content="Before a database failover, freeze deploys.", similarity=0.8, source="vector"),
        make_hit("c-copy", content="before a DATABASE failover: freeze deploys", similarity=0.7, source="vector", rank=2),
    ))
    result = await assembler(ScriptedMemorySource(hot=hot, cold=cold)).execute(request(query="database failover"))
    details = sorted(m.detail for m in result.memories_used if m.exclusion == "filter")
    assert details == ["below_relevance_floor", "hot_bound", "hot_bound", "near_duplicate"]
    metrics = ServiceMetrics()
    metrics.observe_assembly(result)
    text = metrics.render()[0].decode()
    for reason, count in (("below_relevance_floor", 1), ("hot_bound", 2), ("near_duplicate", 1), ("included", 5)):
        assert f'ibex_context_candidates_total{{disposition="{reason}"}} {float(count)}' in text
