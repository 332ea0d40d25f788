"""The use case's stage spans through the tracing port: one per branch with its outcome, then
budget, screening, packing, formatting and the final count; counts only, never the texts."""

from __future__ import annotations

import attrs

from domain.model.directive import Directive
from domain.model.memory import DroppedItem, MemoryBatch
from domain.usecases.assemble_context import AssembleContext
from ports.errors import MemorySourceUnavailableError
from ports.tracing import NO_SPAN, NO_TRACER
from tests.fakes.nonce_source import FixedNonceSource
from tests.fakes.token_counter import StaticCounters
from tests.fakes.tracer import RecordingTracer
from tests.unit.usecases.scripted import (
    ORG,
    RealTimeClock,
    ScriptedDirectiveStore,
    ScriptedMemorySource,
    StaticCatalog,
    make_hit,
)
from tests.unit.usecases.test_assemble_context import COUNTER, FAMILY, FAST, MODELS, NEVER_S, both, request

STAGES = ["budget", "scoring_and_packing", "formatting", "final_count"]


def traced(memories: ScriptedMemorySource, tracer: RecordingTracer, directive: object = Directive("Keep it secret."),
           config: object = FAST) -> AssembleContext:
    return AssembleContext(
        directives=ScriptedDirectiveStore(directive),  # type: ignore[arg-type]
        memories=memories, catalog=StaticCatalog(MODELS, (FAMILY,)), counters=StaticCounters(COUNTER),
        clock=RealTimeClock(), nonces=FixedNonceSource("test-nonce-0001"), config=config, tracer=tracer,  # type: ignore[arg-type]
    )


async def test_every_stage_is_one_span_with_counts_and_outcomes() -> None:
    tracer = RecordingTracer()
    memories = both(hot_ids=("h1", "h2"), cold_ids=("c1",))
    memories.hot_answer = MemoryBatch(memories.hot_answer.hits, (DroppedItem("malformed", "results[2].rank: bad"),))
    result = await traced(memories, tracer).execute(request(query="theme secret"))

    branches = {s.name.removeprefix("retrieval."): s for s in tracer.stages if s.name.startswith("retrieval.")}
    assert sorted(s.name for s in tracer.stages if s.name.startswith("retrieval.")) == [
        "retrieval.cold", "retrieval.directive", "retrieval.hot"]
    assert {name: s.attributes["ibex.branch.outcome"] for name, s in branches.items()} == {
        b.name: b.outcome for b in result.branches}
    assert branches["hot"].attributes["ibex.branch.candidates"] == 2
    assert branches["hot"].attributes["ibex.branch.dropped"] == 1
    assert branches["cold"].attributes["ibex.branch.candidates"] == 1
    assert branches["directive"].attributes["ibex.branch.candidates"] == 1
    assert branches["hot"].attributes["ibex.branch.timeout_ms"] == FAST.hot_timeout_s * 1000.0
    assert all(s.attributes["ibex.branch.latency_ms"] >= 0 for s in branches.values())  # type: ignore[operator]
    assert [s.name for s in tracer.stages if not s.name.startswith("retrieval.")] == STAGES
    assert all(s.parent is None and s.ended and not s.error for s in tracer.stages)  # children of the caller's span

    packing = tracer.named("scoring_and_packing")[0].attributes
    assert packing["ibex.packing.path"] == result.packing_path
    assert packing["ibex.packing.evaluated"] == result.metrics.candidates_evaluated
    assert packing["ibex.packing.included"] == result.memories_included
    assert tracer.named("budget")[0].attributes["ibex.budget.usable"] == result.usable_budget
    assert tracer.named("final_count")[0].attributes["ibex.count.tokens_used"] == result.tokens_used
    screening = packing  # one span for scoring, screening and packing
    assert screening["ibex.screening.ranked"] + screening["ibex.screening.excluded"] == len(result.memories_used)
    assert screening["ibex.screening.malformed"] == 1 and "ibex.screening.fenced" not in screening  # only when some

    texts = ("Keep it secret.", "theme secret", "hot h1", "cold c1", "hello")  # directive, query, memories, message
    for stage in tracer.stages:
        for key, value in stage.attributes.items():
            assert not any(text in f"{key}={value}" for text in texts), (stage.name, key, value)


async def test_failed_skipped_and_outer_deadline_branches_have_their_outcome() -> None:
    tracer = RecordingTracer()
    memories = ScriptedMemorySource(hot=MemoryBatch((make_hit("h1"),)), hot_delay_s=NEVER_S,
                                    cold=MemorySourceUnavailableError("memory service HTTP 503"))
    config = attrs.evolve(FAST, wall_s=0.05, hot_timeout_s=NEVER_S)
    result = await traced(memories, tracer, config=config).execute(request(query=""))  # blank: cold skipped
    assert {b.name: (b.outcome, b.detail) for b in result.branches}["hot"] == ("timeout", "outer_deadline")

    branches = {s.name.removeprefix("retrieval."): s.attributes for s in tracer.stages if s.name.startswith("retrieval.")}
    assert (branches["hot"]["ibex.branch.outcome"], branches["hot"]["ibex.branch.detail"]) == ("timeout", "outer_deadline")
    assert (branches["cold"]["ibex.branch.outcome"], branches["cold"]["ibex.branch.detail"]) == ("skipped", "blank_query")
    assert "ibex.branch.candidates" not in branches["hot"]
    assert tracer.named("retrieval.hot")[0].error == "CancelledError"

    failing = RecordingTracer()
    await traced(ScriptedMemorySource(cold=MemorySourceUnavailableError("memory service HTTP 503")), failing).execute(request())
    cold = failing.named("retrieval.cold")[0].attributes
    assert (cold["ibex.branch.outcome"], cold["ibex.branch.detail"]) == ("error", "memory service HTTP 503")


async def test_the_null_tracer_is_the_default_and_records_nothing() -> None:
    assert NO_TRACER.stage("budget") is NO_SPAN
    with NO_TRACER.stage("budget") as span:
        span.set_attributes({"ibex.budget.usable": 1})
    result = await AssembleContext(
        directives=ScriptedDirectiveStore(Directive("d")), memories=both(),  # type: ignore[arg-type]
        catalog=StaticCatalog(MODELS, (FAMILY,)), counters=StaticCounters(COUNTER), clock=RealTimeClock(),
        nonces=FixedNonceSource("test-nonce-0001"), config=FAST,
    ).execute(request(org_id=ORG))
    assert result.degradation_level == "L0"
