from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from contracts.ibex.context.v1 import context_pb2 as pb
from domain.model.assembly import AssemblyMetrics, AssemblyResult, BranchStatus, MemoryUsed
from domain.model.operations import FeedbackOutcome, FoundMemory, ScoreUpdate, SearchResult
from entrypoints import translation


def result(**changes: object) -> AssemblyResult:
    fields: dict[str, object] = {
        "assembled_context": "<ctx>", "tokens_used": 120, "memories_included": 1,
        "memories_used": (
            MemoryUsed("m-1", "included", "", 0.9, 0.8, 0.5, 0.4, 1, "factual", 0.8, 0.95, 30, "hot_cache"),
            MemoryUsed("m-2", "budget", "budget", 0.5, 0.4, 0.0, 0.0, 2, "episodic", 0.4, 0.5, 44, "vector"),
        ),
        "directive_tokens": 10, "history_tokens": 40, "memory_tokens": 30,
        "metrics": AssemblyMetrics(0.4, 1.6, 2.5, 40.0, 0.2, 3.51, -0.3, 47.49, 2),
        "score_schema": "interim_v1", "degradation_level": "L1",
        "branches": (BranchStatus("directive", "success", 1.6), BranchStatus("hot", "success", 2.5),
                     BranchStatus("cold", "timeout", 40.0, "outer_deadline")),
        "usable_budget": 500, "estimate_kind": "exact_o200k_base", "packing_path": "exact", "nonce": "n",
        "request_id": "r-1", "trace_id": "t-1", "span_id": "s-1",
    }
    fields.update(changes)
    return AssemblyResult(**fields)  # type: ignore[arg-type]


def test_assembly_response_fills_every_field_including_the_additive_ones() -> None:
    message = translation.assembly_to_proto(result())

    assert (message.assembled_context, message.tokens_used, message.memories_included) == ("<ctx>", 120, 1)
    assert (message.directive_tokens, message.history_tokens, message.memory_tokens) == (10, 40, 30)
    assert (message.request_id, message.trace_id, message.span_id) == ("r-1", "t-1", "s-1")
    assert (message.score_schema, message.degradation_level) == ("interim_v1", "L1")
    assert (message.usable_budget, message.estimate_kind) == (500, "exact_o200k_base")
    assert [(b.name, b.outcome, b.latency_ms, b.detail) for b in message.branches] == [
        ("directive", "success", 2, ""), ("hot", "success", 2, ""), ("cold", "timeout", 40, "outer_deadline")]
    first, second = message.memories_used
    assert (first.memory_id, first.exclusion, first.detail, first.rank, first.category, first.token_estimate) == (
        "m-1", "included", "", 1, "factual", 30)
    assert first.composite_score == pytest.approx(0.9) and first.confidence == pytest.approx(0.95)
    assert (first.relevance_score, first.recency_score, first.usefulness_score, first.similarity) == pytest.approx(
        (0.8, 0.5, 0.4, 0.8))
    assert (second.exclusion, second.detail, second.token_estimate) == ("budget", "budget", 44)


def test_metrics_are_whole_non_negative_milliseconds() -> None:
    metrics = translation.assembly_to_proto(result()).metrics
    assert (metrics.budget_calculation_ms, metrics.directive_load_ms, metrics.hot_memory_retrieval_ms) == (0, 2, 2)
    assert (metrics.cold_memory_retrieval_ms, metrics.ranking_ms, metrics.packing_ms) == (40, 0, 4)
    assert (metrics.formatting_ms, metrics.total_ms, metrics.candidates_evaluated) == (0, 47, 2)


def test_counts_beyond_int32_are_clamped() -> None:
    assert translation.assembly_to_proto(result(tokens_used=2**40)).tokens_used == 2**31 - 1
    assert translation.whole_ms(1e12) == 2**31 - 1


def test_requests_take_the_admitted_tenant_over_the_requested_one() -> None:
    message = pb.AssembleContextRequest(org_id="asked-org", agent_id="asked-agent", model="m")
    request = translation.assemble_request_from_proto(message, tenant=("proved-org", "proved-agent"))
    assert (request.org_id, request.agent_id) == ("proved-org", "proved-agent")
    search = translation.search_request_from_proto(
        pb.SearchMemoriesRequest(org_id="asked-org", agent_id="asked-agent"), tenant=("proved-org", "proved-agent"))
    assert (search.org_id, search.agent_id) == ("proved-org", "proved-agent")
    feedback = translation.feedback_request_from_proto(pb.RecordMemoryFeedbackRequest(org_id="asked-org"), org_id="proved-org")
    assert feedback.org_id == "proved-org"


def test_assemble_request_copies_every_field_and_the_deadline() -> None:
    message = pb.AssembleContextRequest(
        org_id="o", agent_id="a", session_id="s", query="q", model="m", directive_version_id="d",
        available_tokens=77, recent_messages=[pb.Message(role="user", content="hi")],
        options=pb.AssemblyOptions(skip_cold_memories=True, skip_hot_memories=True, recency_weight=0.5,
                                   relevance_weight=0.25, usefulness_weight=0.125, confidence_weight=1.0, max_memories=7),
        request_id="r", trace_id="t", span_id="sp", tool_schemas=["{}"],
    )
    request = translation.assemble_request_from_proto(message, deadline_s=0.045)

    assert (request.org_id, request.agent_id, request.session_id, request.query, request.model) == ("o", "a", "s", "q", "m")
    assert (request.directive_version_id, request.available_tokens, request.tool_schemas) == ("d", 77, ("{}",))
    assert [(m.role, m.content) for m in request.recent_messages] == [("user", "hi")]
    assert (request.request_id, request.trace_id, request.span_id, request.deadline_s) == ("r", "t", "sp", 0.045)
    options = request.options
    assert (options.skip_cold_memories, options.skip_hot_memories, options.max_memories) == (True, True, 7)
    assert (options.recency_weight, options.relevance_weight, options.usefulness_weight, options.confidence_weight) == (
        0.5, 0.25, 0.125, 1.0)


def test_search_request_treats_zero_as_default() -> None:
    message = pb.SearchMemoriesRequest(org_id="o", agent_id="a", query="q", categories=["factual"], tags=["t"], session_id="s")
    request = translation.search_request_from_proto(message)
    assert (request.limit, request.min_similarity, request.categories, request.tags) == (0, None, ("factual",), ("t",))
    assert translation.search_request_from_proto(pb.SearchMemoriesRequest(min_similarity=0.5)).min_similarity == 0.5


def test_search_and_feedback_responses() -> None:
    found = FoundMemory("m-1", "text", "factual", 0.9, 0.81, 3, datetime(2026, 1, 1, tzinfo=UTC))
    search = translation.search_to_proto(SearchResult((found, FoundMemory("m-2", "t", "episodic", 0.1, 0.1, 0, None)), 5, 3.6))
    assert (search.total_candidates, search.search_time_ms) == (5, 4)
    assert (search.memories[0].id, search.memories[0].retrieval_count, search.memories[0].created_at) == (
        "m-1", 3, "2026-01-01T00:00:00Z")
    assert search.memories[1].created_at == ""

    outcome = FeedbackOutcome(False, (ScoreUpdate("m-1", 0.5, 0.6), ScoreUpdate("m-2", 0.0, 0.0, "not_found")))
    feedback = translation.feedback_to_proto(outcome)
    assert feedback.success is False
    assert [(u.memory_id, u.error) for u in feedback.updates] == [("m-1", ""), ("m-2", "not_found")]
    assert feedback.updates[0].new_score == pytest.approx(0.6)


def test_feedback_request() -> None:
    message = pb.RecordMemoryFeedbackRequest(org_id="o", memory_ids=["a", "b"], feedback="positive", session_id="s", trace_id="t")
    request = translation.feedback_request_from_proto(message, 1.5)
    assert (request.org_id, request.memory_ids, request.feedback, request.session_id, request.trace_id, request.deadline_s) == (
        "o", ("a", "b"), "positive", "s", "t", 1.5)


def test_the_calls_request_id_replaces_the_messages_own() -> None:
    assemble = pb.AssembleContextRequest(org_id="o", agent_id="a", model="m")
    assert translation.assemble_request_from_proto(assemble).request_id == ""
    assert translation.assemble_request_from_proto(assemble, request_id="call-1").request_id == "call-1"
    search = translation.search_request_from_proto(pb.SearchMemoriesRequest(org_id="o", agent_id="a"), request_id="call-2")
    feedback = translation.feedback_request_from_proto(pb.RecordMemoryFeedbackRequest(org_id="o"), request_id="call-3")
    assert (search.request_id, feedback.request_id) == ("call-2", "call-3")


def test_created_at_is_rfc3339_with_z_for_utc_at_both_edges() -> None:
    assert translation.rfc3339(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05Z"
    assert translation.rfc3339(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"  # naive: taken as UTC
    assert translation.rfc3339(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))) == (
        "2026-01-02T03:04:05+02:00")
    assert translation.rfc3339(None) == ""
