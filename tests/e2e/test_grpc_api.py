"""The gRPC surface over the wire: every RPC, the error table, deadlines, cancellation, health,
reflection, graceful shutdown and the bind guard. Real Redis, real memory service, real gRPC."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from contracts.ibex.context.v1 import context_pb2 as pb
from contracts.ibex.context.v1 import context_pb2_grpc as pb_grpc
from entrypoints.auth.proof import PROOF_METADATA_KEY
from entrypoints.containers import StartupError
from entrypoints.grpc_api.server import SERVICE_NAME
from tests.e2e.conftest import SHORT_BUDGET_MS, Harness, StartService
from tests.e2e.tenant import AGENT_ID, DIRECTIVE, MEMORIES, NAMESPACE, ORG_ID, assemble_request
from tests.support.memory_server import MemoryServer
from tests.support.polling import until
from tests.support.principal_proofs import context as principal_context
from tests.support.principal_proofs import ed_entry, ed_proof, write_key_file

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


def memory_id(index: int) -> str:
    return str(uuid.uuid5(NAMESPACE, f"memory-{index}"))


async def rpc_error(call) -> grpc.aio.AioRpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as excinfo:
        await call
    return excinfo.value


# ------------------------------------------------------------------ AssembleContext
async def test_assemble_answers_l0_and_fills_every_field(harness: Harness) -> None:
    response = await harness.stub.AssembleContext(assemble_request(), timeout=5)

    assert DIRECTIVE in response.assembled_context
    assert "dark theme" in response.assembled_context
    assert response.memories_included >= 1
    assert response.degradation_level == "L0"
    assert [(b.name, b.outcome) for b in response.branches] == [
        ("directive", "success"), ("hot", "success"), ("cold", "success")]
    assert all(b.latency_ms >= 0 for b in response.branches)
    assert response.estimate_kind == "exact_o200k_base"
    assert response.score_schema == "relevance_v1"
    assert (response.request_id, response.trace_id, response.span_id) == ("req-e2e-1", "trace-e2e-1", "span-e2e-1")
    assert response.directive_tokens > 0 and response.history_tokens > 0 and response.tokens_used > 0
    assert response.metrics.total_ms >= 0 and response.metrics.candidates_evaluated >= 1
    included = [m for m in response.memories_used if m.exclusion == "included"]
    assert len(included) == response.memories_included
    assert {m.memory_id for m in response.memories_used} <= {memory_id(i) for i in range(len(MEMORIES))}
    assert all(m.token_estimate > 0 and m.detail == "" for m in included)
    assert sum(m.token_estimate for m in included) == response.memory_tokens <= response.usable_budget


async def test_a_tight_budget_excludes_for_budget_and_says_so(harness: Harness) -> None:
    full = await harness.stub.AssembleContext(assemble_request(), timeout=5)
    costs = sorted(m.token_estimate for m in full.memories_used if m.exclusion == "included")
    response = await harness.stub.AssembleContext(assemble_request(available_tokens=costs[0]), timeout=5)

    assert response.usable_budget == costs[0]
    assert response.memories_included <= 1
    assert any(m.exclusion == "budget" and m.detail == "budget" for m in response.memories_used)
    assert response.memory_tokens <= response.usable_budget


async def test_request_weights_switch_the_score_schema(harness: Harness) -> None:
    options = pb.AssemblyOptions(relevance_weight=1.0, confidence_weight=0.5, max_memories=2)
    response = await harness.stub.AssembleContext(assemble_request(options=options), timeout=5)

    assert response.score_schema == "weighted_v1"
    assert response.memories_included <= 2
    assert any(m.detail == "max_memories" for m in response.memories_used)


async def test_tool_schemas_are_formatted_into_the_context(harness: Harness) -> None:
    schema = json.dumps({"name": "lookup_invoice", "parameters": {"type": "object"}})
    response = await harness.stub.AssembleContext(assemble_request(tool_schemas=[schema]), timeout=5)
    assert "lookup_invoice" in response.assembled_context


async def test_slow_cold_search_degrades_to_l1(
    start_service_under_test: StartService, memory_server: MemoryServer, directive: str
) -> None:
    harness = await start_service_under_test(IBEX_CONTEXT_COLD_TIMEOUT_MS=SHORT_BUDGET_MS)
    memory_server.hold("search")  # never answers: the cold branch's 200 ms budget runs out
    response = await harness.stub.AssembleContext(assemble_request(), timeout=30)

    assert response.degradation_level == "L1"
    cold = {b.name: b for b in response.branches}["cold"]
    assert cold.outcome == "timeout"
    assert response.memories_included >= 1  # the hot side still answers


async def test_both_memory_sides_failing_degrade_to_l2_but_still_answer(harness: Harness, memory_server: MemoryServer) -> None:
    memory_server.force_status("hot", 503)
    memory_server.force_status("search", 503)
    response = await harness.stub.AssembleContext(assemble_request(), timeout=5)

    assert response.degradation_level == "L2"
    assert {b.name: b.outcome for b in response.branches} == {"directive": "success", "hot": "error", "cold": "error"}
    assert response.memories_included == 0
    assert DIRECTIVE in response.assembled_context


async def test_memory_credentials_refused_is_outcome_denied(harness: Harness, memory_server: MemoryServer) -> None:
    memory_server.force_status("hot", 401)
    response = await harness.stub.AssembleContext(assemble_request(), timeout=5)

    hot = {b.name: b for b in response.branches}["hot"]
    assert hot.outcome == "denied"
    assert response.degradation_level == "L1"


async def test_foreign_tenant_hits_are_fenced_out(harness: Harness, memory_server: MemoryServer) -> None:
    memory_server.inject_foreign_items("hot", 2)
    response = await harness.stub.AssembleContext(assemble_request(), timeout=5)

    fenced = [m for m in response.memories_used if m.detail == "tenant_mismatch"]
    assert len(fenced) == 2
    assert all(m.exclusion == "filter" for m in fenced)
    assert "foreign item" not in response.assembled_context


async def test_blank_query_skips_cold_and_stays_l0(harness: Harness) -> None:
    response = await harness.stub.AssembleContext(assemble_request(query=""), timeout=5)
    cold = {b.name: b for b in response.branches}["cold"]
    assert (cold.outcome, response.degradation_level) == ("skipped", "L0")


# ------------------------------------------------------------------ validation
def _messages(count: int) -> list[pb.Message]:
    return [pb.Message(role="user", content="hi") for _ in range(count)]


INVALID_REQUESTS = {
    "org_id not a uuid": ({"org_id": "not-a-uuid"}, "org_id"),
    "org_id empty": ({"org_id": ""}, "org_id"),
    "agent_id not a uuid": ({"agent_id": "agent-7"}, "agent_id"),
    "model empty": ({"model": ""}, "model"),
    "model 300 chars": ({"model": "m" * 300}, "model"),
    "query 9000 chars": ({"query": "q" * 9000}, "query"),
    "max_memories -1": ({"options": pb.AssemblyOptions(max_memories=-1)}, "max_memories"),
    "max_memories 101": ({"options": pb.AssemblyOptions(max_memories=101)}, "max_memories"),
    "101 messages": ({"recent_messages": _messages(101)}, "recent_messages"),
    "content 40000 chars": ({"recent_messages": [pb.Message(role="user", content="c" * 40_000)]}, "recent_messages[0].content"),
    "role 80 chars": ({"recent_messages": [pb.Message(role="r" * 80, content="hi")]}, "recent_messages[0].role"),
    "negative weight": ({"options": pb.AssemblyOptions(recency_weight=-0.5)}, "options.recency_weight"),
    "nan weight": ({"options": pb.AssemblyOptions(usefulness_weight=float("nan"))}, "options.usefulness_weight"),
    "negative available_tokens": ({"available_tokens": -1}, "available_tokens"),
    "65 tool schemas": ({"tool_schemas": ["{}"] * 65}, "tool_schemas"),
    "request_id 300 chars": ({"request_id": "r" * 300}, "request_id"),
}


@pytest.mark.parametrize(("changes", "field"), INVALID_REQUESTS.values(), ids=INVALID_REQUESTS.keys())
async def test_out_of_bounds_requests_are_invalid_argument_naming_the_field(
    harness: Harness, changes: dict[str, object], field: str
) -> None:
    error = await rpc_error(harness.stub.AssembleContext(assemble_request(**changes), timeout=5))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in error.details()


async def test_unknown_model_is_invalid_argument_naming_the_model_and_the_known_ones(harness: Harness) -> None:
    error = await rpc_error(harness.stub.AssembleContext(assemble_request(model="gpt-unknown-9"), timeout=5))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    known = ", ".join(spec.model_id for spec in harness.service.app.catalog.models())
    assert error.details() == f"model: unknown model 'gpt-unknown-9': not in the model catalog (known: {known})"
    assert "gpt-4o-mini" in known
    assert harness.requests_seen("AssembleContext", "INVALID_ARGUMENT") == 1


# ------------------------------------------------------------------ request ids
def _request_log(caplog: pytest.LogCaptureFixture, method: str) -> logging.LogRecord:
    (record,) = [r for r in caplog.records
                 if r.getMessage() == "grpc_request" and r.method == method]  # type: ignore[attr-defined]
    return record


def _is_uuid4(text: str) -> bool:
    return str(uuid.UUID(text)) == text and uuid.UUID(text).version == 4


async def test_without_a_request_id_one_is_generated_returned_and_logged(
    harness: Harness, memory_server: MemoryServer, caplog: pytest.LogCaptureFixture
) -> None:
    memory_server.clear_log()
    with caplog.at_level(logging.DEBUG, logger="ibex_context.grpc"):
        response = await harness.stub.AssembleContext(assemble_request(request_id=""), timeout=5)
        again = await harness.stub.AssembleContext(assemble_request(request_id=""), timeout=5)

    assert _is_uuid4(response.request_id) and _is_uuid4(again.request_id)
    assert response.request_id != again.request_id
    logged = [r for r in caplog.records if r.getMessage() == "grpc_request"]
    assert [r.request_id for r in logged] == [response.request_id, again.request_id]  # type: ignore[attr-defined]
    assert [r.call_id for r in logged] == [response.request_id, again.request_id]  # type: ignore[attr-defined]
    sent_downstream = {r.headers.get("x-request-id") for r in memory_server.requests()}
    assert sent_downstream == {response.request_id, again.request_id}


async def test_a_caller_request_id_is_echoed_unchanged_and_logged(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="ibex_context.grpc"):
        response = await harness.stub.AssembleContext(assemble_request(request_id=" Caller/ID 7 "), timeout=5)
    assert response.request_id == " Caller/ID 7 "
    assert _request_log(caplog, "AssembleContext").request_id == " Caller/ID 7 "  # type: ignore[attr-defined]


async def test_a_failed_call_logs_its_generated_request_id(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="ibex_context.grpc"):
        await rpc_error(harness.stub.AssembleContext(assemble_request(request_id="", model="gpt-17"), timeout=5))
    record = _request_log(caplog, "AssembleContext")
    assert record.code == "INVALID_ARGUMENT" and _is_uuid4(record.request_id)  # type: ignore[attr-defined]


async def test_a_search_logs_its_generated_request_id_and_sends_it_downstream(
    harness: Harness, memory_server: MemoryServer, caplog: pytest.LogCaptureFixture
) -> None:
    memory_server.clear_log()
    with caplog.at_level(logging.DEBUG, logger="ibex_context.grpc"):
        await harness.stub.SearchMemories(pb.SearchMemoriesRequest(org_id=ORG_ID, agent_id=AGENT_ID, query="theme"),
                                          timeout=5)
    logged = _request_log(caplog, "SearchMemories").request_id  # type: ignore[attr-defined]
    assert _is_uuid4(logged)
    assert [r.headers.get("x-request-id") for r in memory_server.requests("search")] == [logged]


async def test_an_unexpected_failure_is_internal_with_a_call_id_and_the_trace_only_in_the_logs(
    start_service_under_test: StartService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    catalog = {
        "schema_version": 1, "source": "e2e",
        "tokenizer_families": {"mystery": {"estimate_kind": "mystery_kind", "safety_buffer_fraction": 0.1}},
        "models": [{"model_id": "mystery-model", "provider": "e2e", "context_window": 8000, "max_output_tokens": 1000,
                    "supports_tools": False, "supports_vision": False, "supports_streaming": True,
                    "tokenizer_family": "mystery"}],
    }
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(catalog))
    harness = await start_service_under_test(IBEX_CONTEXT_CATALOG_PATH=str(path))

    with caplog.at_level(logging.ERROR, logger="ibex_context.grpc"):
        error = await rpc_error(harness.stub.AssembleContext(assemble_request(model="mystery-model"), timeout=5))

    assert error.code() == grpc.StatusCode.INTERNAL
    assert error.details().startswith("internal error (call_id=")
    assert "Traceback" not in error.details() and "mystery_kind" not in error.details()
    logged = [r for r in caplog.records if r.getMessage() == "grpc_internal_error"]
    assert logged and logged[0].exc_info is not None
    assert logged[0].call_id in error.details()  # type: ignore[attr-defined]


# ------------------------------------------------------------------ deadlines and cancellation
async def test_a_caller_deadline_shorter_than_the_wall_is_respected(
    start_service_under_test: StartService, memory_server: MemoryServer, directive: str
) -> None:
    # The search never answers and neither the 60 s wall nor the 120 s cold budget would end it:
    # only the caller's 3 s deadline, less the 1.5 s of headroom kept for packing and the answer.
    caller_s, headroom_s = 3.0, 1.5
    harness = await start_service_under_test(
        IBEX_CONTEXT_TIMEOUT="60s", IBEX_CONTEXT_DEADLINE_MS="60000", IBEX_CONTEXT_COLD_TIMEOUT_MS="120000",
        IBEX_CONTEXT_DEADLINE_HEADROOM_MS=str(headroom_s * 1000))
    memory_server.hold("search")
    started = time.perf_counter()
    response = await harness.stub.AssembleContext(assemble_request(), timeout=caller_s)
    elapsed = time.perf_counter() - started

    # It answered (a late answer would be DEADLINE_EXCEEDED), so retrieval stopped before the
    # caller's deadline; and not before that deadline minus the headroom (the server's view of the
    # deadline is never earlier than the caller's; 10 ms allow for the grpc-timeout encoding).
    assert elapsed >= caller_s - headroom_s - 0.01
    cold = {b.name: b for b in response.branches}["cold"]
    assert cold.outcome == "timeout"
    assert response.degradation_level == "L1"
    assert response.metrics.total_ms <= elapsed * 1000.0


async def test_caller_cancellation_is_seen_as_cancelled_by_the_server(harness: Harness, memory_server: MemoryServer) -> None:
    memory_server.hold("hot")  # the call cannot finish on its own (its budgets are 10 s)
    memory_server.hold("search")
    call = harness.stub.AssembleContext(assemble_request(), timeout=30)
    await asyncio.to_thread(memory_server.wait_held, "hot")  # the call is in the server
    call.cancel()

    with pytest.raises(asyncio.CancelledError):
        await call
    await until(lambda: harness.requests_seen("AssembleContext", "CANCELLED") == 1)
    assert harness.requests_seen("AssembleContext", "OK") == 0


async def test_an_expired_deadline_is_deadline_exceeded(harness: Harness) -> None:
    # whether the server sees such a call at all is up to grpc; the servicer's own handling of a
    # deadline that has passed is pinned in tests/unit/grpc_api/test_servicer_deadline.py. When the
    # server does see it with a sliver of its deadline left (seen on CI: 0.1 ms), admission refuses
    # it, and that answer can beat the caller's own timer: either way no assembly runs.
    error = await rpc_error(harness.stub.AssembleContext(assemble_request(), timeout=0.000001))
    if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
        assert error.details().startswith("not started (deadline): ")
    else:
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert harness.requests_seen("AssembleContext", "OK") == 0


async def test_a_search_outlived_by_its_caller_deadline_is_deadline_exceeded(
    start_service_under_test: StartService, memory_server: MemoryServer
) -> None:
    # The search never answers and its own budget is 60 s: only the caller's 3 s deadline, less the
    # 1 s of headroom, ends it, and the server says so itself, before the caller's deadline. (With
    # a headroom shorter than the request's transit time, the caller's own deadline fires first and
    # the server counts the call CANCELLED instead: which one wins would depend on the machine.)
    harness = await start_service_under_test(IBEX_CONTEXT_COLD_TIMEOUT_MS="60s", IBEX_CONTEXT_DEADLINE_HEADROOM_MS="1000")
    memory_server.hold("search")
    request = pb.SearchMemoriesRequest(org_id=ORG_ID, agent_id=AGENT_ID, query="theme")

    call = harness.stub.SearchMemories(request, timeout=3)
    await asyncio.to_thread(memory_server.wait_held, "search")  # the server is running it
    error = await rpc_error(call)

    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert error.details() == "deadline exceeded while searching memories"  # the server's answer
    await until(lambda: harness.requests_seen("SearchMemories", "DEADLINE_EXCEEDED") == 1)


# ------------------------------------------------------------------ SearchMemories
async def test_search_returns_ranked_memories_of_the_tenant(harness: Harness) -> None:
    request = pb.SearchMemoriesRequest(org_id=ORG_ID, agent_id=AGENT_ID, query="dark theme", limit=3)
    response = await harness.stub.SearchMemories(request, timeout=5)

    assert 1 <= len(response.memories) <= 3
    assert response.memories[0].id == memory_id(0)
    assert response.memories[0].content == MEMORIES[0][0]
    assert response.memories[0].category == "preference"
    assert response.memories[0].created_at.startswith("2026-01-01T00:00:00")
    scores = [m.composite_score for m in response.memories]
    assert scores == sorted(scores, reverse=True)
    assert response.total_candidates >= len(response.memories) and response.search_time_ms >= 0


@pytest.mark.parametrize(("changes", "field"), [
    ({"query": "  "}, "query"), ({"limit": 101}, "limit"), ({"min_similarity": 1.5}, "min_similarity"),
    ({"org_id": "nope"}, "org_id"), ({"categories": [""]}, "categories[0]"),
])
async def test_search_validation_names_the_field(harness: Harness, changes: dict[str, object], field: str) -> None:
    fields = {"org_id": ORG_ID, "agent_id": AGENT_ID, "query": "theme", **changes}
    error = await rpc_error(harness.stub.SearchMemories(pb.SearchMemoriesRequest(**fields), timeout=5))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in error.details()


@pytest.mark.parametrize(("status", "code"), [
    (503, grpc.StatusCode.UNAVAILABLE), (401, grpc.StatusCode.FAILED_PRECONDITION),
    (403, grpc.StatusCode.FAILED_PRECONDITION),
])
async def test_search_maps_memory_service_failures(
    harness: Harness, memory_server: MemoryServer, status: int, code: grpc.StatusCode
) -> None:
    memory_server.force_status("search", status)
    request = pb.SearchMemoriesRequest(org_id=ORG_ID, agent_id=AGENT_ID, query="theme")
    error = await rpc_error(harness.stub.SearchMemories(request, timeout=5))
    assert error.code() == code


async def test_a_search_timeout_with_caller_time_left_is_unavailable(
    start_service_under_test: StartService, memory_server: MemoryServer
) -> None:
    harness = await start_service_under_test(IBEX_CONTEXT_COLD_TIMEOUT_MS=SHORT_BUDGET_MS)
    memory_server.hold("search")  # never answers: the 200 ms search budget runs out
    request = pb.SearchMemoriesRequest(org_id=ORG_ID, agent_id=AGENT_ID, query="theme")
    error = await rpc_error(harness.stub.SearchMemories(request, timeout=30))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert "timed out" in error.details()


# ------------------------------------------------------------------ RecordMemoryFeedback
async def test_feedback_updates_every_id_and_reports_failures(harness: Harness, memory_server: MemoryServer) -> None:
    unknown = str(uuid.uuid4())
    request = pb.RecordMemoryFeedbackRequest(
        org_id=ORG_ID, memory_ids=[memory_id(0), unknown], feedback="positive", trace_id=str(uuid.uuid4()))
    response = await harness.stub.RecordMemoryFeedback(request, timeout=5)

    assert response.success is False
    updates = {u.memory_id: u for u in response.updates}
    assert updates[memory_id(0)].error == "" and updates[memory_id(0)].new_score > 0
    assert updates[unknown].error == "not_found"
    assert memory_server.feedback_totals(memory_id(0)) == (1, 0)


async def test_feedback_on_known_ids_succeeds(harness: Harness) -> None:
    request = pb.RecordMemoryFeedbackRequest(org_id=ORG_ID, memory_ids=[memory_id(1), memory_id(2)], feedback="negative")
    response = await harness.stub.RecordMemoryFeedback(request, timeout=5)
    assert response.success is True
    assert [u.error for u in response.updates] == ["", ""]


@pytest.mark.parametrize(("changes", "field"), [
    ({"feedback": "great"}, "feedback"), ({"memory_ids": []}, "memory_ids"),
    ({"memory_ids": ["x"]}, "memory_ids[0]"), ({"org_id": ""}, "org_id"),
])
async def test_feedback_validation_names_the_field(harness: Harness, changes: dict[str, object], field: str) -> None:
    fields = {"org_id": ORG_ID, "memory_ids": [memory_id(0)], "feedback": "positive", **changes}
    error = await rpc_error(harness.stub.RecordMemoryFeedback(pb.RecordMemoryFeedbackRequest(**fields), timeout=5))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in error.details()


# ------------------------------------------------------------------ health, reflection
async def test_health_reports_serving_for_the_server_and_the_service(harness: Harness) -> None:
    health = health_pb2_grpc.HealthStub(harness.channel)
    for name in ("", SERVICE_NAME):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_the_service(harness: Harness) -> None:
    reflection = reflection_pb2_grpc.ServerReflectionStub(harness.channel)
    call = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
    names = [s.name async for reply in call for s in reply.list_services_response.service]
    assert SERVICE_NAME in names
    assert "grpc.health.v1.Health" in names


# ------------------------------------------------------------------ graceful shutdown, bind guard
async def test_shutdown_lets_in_flight_calls_finish_and_refuses_new_ones(harness: Harness, memory_server: MemoryServer) -> None:
    # The six calls stay in flight (their memory requests held) until the drain has begun and a
    # new call was refused; then they are let go and must all finish, L0 (their budgets are 10 s).
    memory_server.hold("hot")
    memory_server.hold("search")
    calls = [harness.stub.AssembleContext(assemble_request(), timeout=60) for _ in range(6)]
    await asyncio.to_thread(memory_server.wait_held, "hot", 6)
    await asyncio.to_thread(memory_server.wait_held, "search", 6)

    shutdown = asyncio.create_task(harness.service.shutdown(grace_s=60))
    await until(lambda: harness.service.draining)
    check = await harness.service.grpc.health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), None)
    assert check.status == health_pb2.HealthCheckResponse.NOT_SERVING
    late = await rpc_error(harness.stub.AssembleContext(assemble_request(), timeout=30))
    memory_server.release("hot")
    memory_server.release("search")
    responses = await asyncio.gather(*calls)
    await shutdown

    assert late.code() == grpc.StatusCode.UNAVAILABLE
    assert [r.degradation_level for r in responses] == ["L0"] * 6


async def test_a_non_loopback_bind_without_auth_refuses_to_start(start_service_under_test: StartService) -> None:
    with pytest.raises(StartupError, match="IBEX_CONTEXT_ALLOW_INSECURE_BIND"):
        await start_service_under_test(IBEX_CONTEXT_GRPC_ADDR="0.0.0.0:0")


async def test_the_insecure_override_starts_and_warns(
    start_service_under_test: StartService, caplog: pytest.LogCaptureFixture, directive: str
) -> None:
    with caplog.at_level(logging.WARNING):
        harness = await start_service_under_test(IBEX_CONTEXT_GRPC_ADDR="0.0.0.0:0", IBEX_CONTEXT_ALLOW_INSECURE_BIND="true")
    warnings = [r for r in caplog.records if r.getMessage() == "grpc_insecure_bind"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{harness.port}")
    try:
        response = await pb_grpc.ContextAssemblyServiceStub(channel).AssembleContext(assemble_request(), timeout=5)
    finally:
        await channel.close()
    assert response.degradation_level == "L0"



# ------------------------------------------------------------------ caller authentication wiring
async def test_principal_keys_make_every_call_prove_its_tenant(
    start_service_under_test: StartService, tmp_path: Path, directive: str
) -> None:
    keys = write_key_file(tmp_path / "keys.json", ed_entry("ed-1"))
    harness = await start_service_under_test(IBEX_CONTEXT_PRINCIPAL_KEYS=str(keys))
    now = datetime.now(UTC)
    own = ed_proof(principal_context(org_id=ORG_ID, agent_id=AGENT_ID, issued_at=now), "ed-1")
    other_agent = ed_proof(principal_context(org_id=ORG_ID, agent_id=str(uuid.uuid4()), issued_at=now), "ed-1")

    missing = await rpc_error(harness.stub.AssembleContext(assemble_request(), timeout=5))
    denied = await rpc_error(harness.stub.AssembleContext(
        assemble_request(), metadata=((PROOF_METADATA_KEY, other_agent),), timeout=5))
    response = await harness.stub.AssembleContext(assemble_request(), metadata=((PROOF_METADATA_KEY, own),), timeout=5)

    assert missing.code() == grpc.StatusCode.UNAUTHENTICATED and "missing_proof" in missing.details()
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED and "agent_mismatch" in denied.details()
    assert response.degradation_level == "L0" and DIRECTIVE in response.assembled_context
    assert harness.requests_seen("AssembleContext", "UNAUTHENTICATED") == 1
    assert harness.requests_seen("AssembleContext", "PERMISSION_DENIED") == 1
    failures = harness.service.app.metrics.registry.get_sample_value(
        "ibex_context_auth_failures_total", {"reason": "missing_proof"})
    assert failures == 1
