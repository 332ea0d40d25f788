"""The HTTP edge's JSON mapping: proto names, camelCase/snake_case input, round trips, field errors."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from contracts.ibex.context.v1 import context_pb2 as pb
from domain.model.assembly import (
    AssembleRequest,
    AssemblyMetrics,
    AssemblyOptions,
    AssemblyResult,
    BranchStatus,
    MemoryUsed,
)
from domain.model.errors import InvalidRequestError
from domain.model.messages import Message
from domain.model.operations import (
    FeedbackOutcome,
    FeedbackRequest,
    FoundMemory,
    ScoreUpdate,
    SearchRequest,
    SearchResult,
)
from entrypoints.http_api import messages, schemas
from entrypoints.http_api.json_mapping import BOOL, FLOAT, INT32, MESSAGE, STRING, loads_object, shortest_float32

ORG = "0b6f1a3e-7f44-4a53-9c59-0c8a4f0b8d21"
AGENT = "5d2b8c71-3e0a-4f6e-8b1d-9a7c6e5f4d30"
MEMORY_ID = "9f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"
_PROTO_KINDS = {
    FieldDescriptor.TYPE_STRING: STRING, FieldDescriptor.TYPE_INT32: INT32,
    FieldDescriptor.TYPE_FLOAT: FLOAT, FieldDescriptor.TYPE_BOOL: BOOL, FieldDescriptor.TYPE_MESSAGE: MESSAGE,
}


def _error(call, *args) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        call(*args)
    return caught.value


def _assemble_body(**extra: object) -> dict[str, object]:
    return {"orgId": ORG, "agentId": AGENT, "model": "gpt-4o", **extra}


# ---------------------------------------------------------------- the descriptions match the proto


@pytest.mark.parametrize("spec", messages.ALL_MESSAGES, ids=lambda s: s.name)
def test_message_descriptions_match_the_proto_descriptor(spec) -> None:
    descriptor = pb.DESCRIPTOR.message_types_by_name[spec.name]
    proto = [(f.name, f.json_name, _PROTO_KINDS[f.type], f.is_repeated) for f in descriptor.fields]
    ours = [(f.name, f.json_name, f.kind, f.repeated) for f in spec.fields]
    assert ours == proto


# ---------------------------------------------------------------- requests


def test_camel_case_and_snake_case_names_decode_to_the_same_request() -> None:
    camel = {"orgId": ORG, "agentId": AGENT, "model": "gpt-4o", "recentMessages": [{"role": "user", "content": "hi"}],
             "toolSchemas": ["{}"], "availableTokens": 300, "options": {"maxMemories": 4, "skipHotMemories": True}}
    snake = {"org_id": ORG, "agent_id": AGENT, "model": "gpt-4o", "recent_messages": [{"role": "user", "content": "hi"}],
             "tool_schemas": ["{}"], "available_tokens": 300, "options": {"max_memories": 4, "skip_hot_memories": True}}
    assert schemas.assemble_request_from_json(camel) == schemas.assemble_request_from_json(snake)


def test_absent_and_null_fields_take_proto_defaults() -> None:
    request = schemas.assemble_request_from_json(_assemble_body(query=None, options=None, recentMessages=None))
    assert request == AssembleRequest(org_id=ORG, agent_id=AGENT, model="gpt-4o")


def test_int32_accepts_integral_numbers_and_decimal_strings_like_protobuf() -> None:
    request = schemas.assemble_request_from_json(_assemble_body(availableTokens="1200", options={"maxMemories": 7.0}))
    assert (request.available_tokens, request.options.max_memories) == (1200, 7)


def test_float_accepts_numeric_strings_and_named_non_finite_values() -> None:
    options = schemas.assemble_request_from_json(
        _assemble_body(options={"recencyWeight": "0.25", "relevanceWeight": "Infinity", "usefulnessWeight": "NaN"})
    ).options
    assert options.recency_weight == 0.25 and options.relevance_weight == float("inf")
    assert options.usefulness_weight != options.usefulness_weight  # NaN reaches the use case, which rejects it


def test_assemble_request_round_trips_through_json() -> None:
    request = AssembleRequest(
        org_id=ORG, agent_id=AGENT, model="gpt-4o", query="what do I like?",
        recent_messages=(Message("system", "be brief"), Message("user", "héllo ✓")), tool_schemas=('{"name": "t"}',),
        options=AssemblyOptions(True, False, 0.5, 0.25, 0.125, 1.0, 12), available_tokens=900, session_id="s",
        directive_version_id="d", request_id="r-1", trace_id="t-1", span_id="sp",
    )
    assert schemas.assemble_request_from_json(schemas.assemble_request_to_json(request)) == request


def test_search_request_round_trips_through_json() -> None:
    request = SearchRequest(org_id=ORG, agent_id=AGENT, query="tea", limit=5, min_similarity=0.5,
                            categories=("preference",), tags=("drinks", "uk"), session_id="s")
    assert schemas.search_request_from_json(schemas.search_request_to_json(request)) == request


def test_search_min_similarity_zero_means_the_source_default() -> None:
    request = schemas.search_request_from_json({"orgId": ORG, "agentId": AGENT, "query": "q", "minSimilarity": 0})
    assert request.min_similarity is None


def test_feedback_request_round_trips_through_json() -> None:
    request = FeedbackRequest(org_id=ORG, memory_ids=(MEMORY_ID, AGENT), feedback="positive", session_id="s", trace_id="t")
    assert schemas.feedback_request_from_json(schemas.feedback_request_to_json(request)) == request


def test_request_json_is_what_protobuf_itself_parses() -> None:
    body = schemas.assemble_request_to_json(schemas.assemble_request_from_json(_assemble_body(
        query="q", recentMessages=[{"role": "user", "content": "x"}], options={"maxMemories": 3, "recencyWeight": 0.1},
    )))
    parsed = json_format.ParseDict(body, pb.AssembleContextRequest())
    assert json_format.MessageToDict(parsed, always_print_fields_with_no_presence=True) == body


# ---------------------------------------------------------------- request errors name the field


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (_assemble_body(surprise=1), "surprise", "unknown field 'surprise'"),
        (_assemble_body(options={"maxMemory": 3}), "options.maxMemory", "unknown field"),
        (_assemble_body(model=5), "model", "must be a string"),
        (_assemble_body(availableTokens="12.5"), "available_tokens", "must be an integer"),
        (_assemble_body(availableTokens=1.5), "available_tokens", "must be an integer"),
        (_assemble_body(availableTokens=True), "available_tokens", "must be an integer"),
        (_assemble_body(availableTokens=2**31), "available_tokens", "int32 range"),
        (_assemble_body(availableTokens="9" * 40), "available_tokens", "int32 range"),
        (_assemble_body(options={"recencyWeight": 1e39}), "options.recency_weight", "float32 range"),
        (_assemble_body(options={"recencyWeight": "heavy"}), "options.recency_weight", "must be a number"),
        (_assemble_body(options={"recencyWeight": "nan"}), "options.recency_weight", "NaN"),
        (_assemble_body(options={"skipHotMemories": "true"}), "options.skip_hot_memories", "true or false"),
        (_assemble_body(options=[]), "options", "JSON object"),
        (_assemble_body(recentMessages={"role": "user"}), "recent_messages", "JSON array"),
        (_assemble_body(recentMessages=[{"role": "user"}, {"role": 3}]), "recent_messages[1].role", "must be a string"),
        (_assemble_body(recentMessages=[None]), "recent_messages[0]", "must not be null"),
        (_assemble_body(toolSchemas=["ok", 7]), "tool_schemas[1]", "must be a string"),
        (_assemble_body(query="bad \ud800 text"), "query", "lone surrogate"),
        (_assemble_body(org_id=ORG), "org_id", "given twice"),
        (_assemble_body(principalContext={"orgId": ORG}), "principal_context", "X-Ibex-Principal-Proof"),
    ],
)
def test_assemble_request_errors_name_the_field(body, field, words) -> None:
    error = _error(schemas.assemble_request_from_json, body)
    assert error.field == field
    assert words in str(error)


def test_search_and_feedback_errors_name_the_field() -> None:
    assert _error(schemas.search_request_from_json, {"query": "q", "limit": "ten"}).field == "limit"
    assert _error(schemas.search_request_from_json, {"categories": "preference"}).field == "categories"
    assert _error(schemas.feedback_request_from_json, {"memoryIds": [MEMORY_ID, 4]}).field == "memory_ids[1]"
    assert _error(schemas.feedback_request_from_json, {"notes": "x"}).field == "notes"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "not valid JSON"),
        ("[1, 2]", "must be a JSON object, got an array"),
        ('{"a": NaN}', "literal NaN"),
        ('{"model": "a", "model": "b"}', "duplicate key 'model'"),
        ('{"n": ' + "9" * 5000 + "}", "not valid JSON"),
    ],
)
def test_documents_that_are_not_one_json_object_are_refused(text, words) -> None:
    assert words in str(_error(loads_object, text, "the request body"))


# ---------------------------------------------------------------- responses


def _result() -> AssemblyResult:
    used = (
        MemoryUsed(MEMORY_ID, "included", "", 0.85, 0.9, 0.1, 0.3, 1, "factual", 0.9, 0.7, 31, "hot"),
        MemoryUsed(AGENT, "budget", "budget", 0.123456789, 0.5, 0.0, 0.0, 2, "episodic", 0.5, 0.5, 40, "cold"),
    )
    return AssemblyResult(
        assembled_context="ctx", tokens_used=120, memories_included=1, memories_used=used, directive_tokens=10,
        history_tokens=20, memory_tokens=31,
        metrics=AssemblyMetrics(0.4, 1.5, 2.49, 40.0, 0.2, 0.6, -0.1, 44.7, 2),
        score_schema="interim_v1", degradation_level="L1",
        branches=(BranchStatus("directive", "success", 0.6), BranchStatus("cold", "timeout", 40.2, "outer_deadline")),
        usable_budget=71, estimate_kind="exact_o200k_base", packing_path="exact_dp", nonce="abc",
        request_id="r", trace_id="t", span_id="s",
    )


def test_assemble_response_renders_every_field_under_its_json_name() -> None:
    body = schemas.assemble_response_to_json(_result())
    parsed = json_format.ParseDict(body, pb.AssembleContextResponse())
    assert json_format.MessageToDict(parsed, always_print_fields_with_no_presence=True) == body
    assert {"degradationLevel", "branches", "usableBudget", "estimateKind"} <= body.keys()
    assert [m["detail"] for m in body["memoriesUsed"]] == ["", "budget"]


def test_response_floats_print_as_protobuf_prints_float32() -> None:
    body = schemas.assemble_response_to_json(_result())
    assert body["memoriesUsed"][0]["compositeScore"] == 0.85
    assert body["memoriesUsed"][1]["compositeScore"] == 0.12345679
    assert shortest_float32(float("nan")) != shortest_float32(float("nan"))


def test_durations_are_whole_non_negative_milliseconds() -> None:
    body = schemas.assemble_response_to_json(_result())
    assert body["metrics"] == {
        "budgetCalculationMs": 0, "directiveLoadMs": 2, "hotMemoryRetrievalMs": 2, "coldMemoryRetrievalMs": 40,
        "rankingMs": 0, "packingMs": 1, "formattingMs": 0, "totalMs": 45, "candidatesEvaluated": 2,
    }
    assert [b["latencyMs"] for b in body["branches"]] == [1, 40]


def test_search_response_carries_rfc3339_times_and_memory_ids() -> None:
    found = FoundMemory(MEMORY_ID, "likes tea", "preference", 0.9, 0.8, 3, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    body = schemas.search_response_to_json(SearchResult((found,), total_candidates=4, search_time_ms=3.6))
    assert body == {
        "memories": [{"id": MEMORY_ID, "content": "likes tea", "category": "preference", "confidence": 0.9,
                      "compositeScore": 0.8, "retrievalCount": 3, "createdAt": "2026-01-02T03:04:05Z"}],
        "totalCandidates": 4, "searchTimeMs": 4,
    }


def test_feedback_response_lists_every_update_with_its_error() -> None:
    outcome = FeedbackOutcome(False, (ScoreUpdate(MEMORY_ID, 0.5, 0.75), ScoreUpdate(AGENT, 0.0, 0.0, "not_found")))
    assert schemas.feedback_response_to_json(outcome) == {
        "success": False,
        "updates": [{"memoryId": MEMORY_ID, "previousScore": 0.5, "newScore": 0.75, "error": ""},
                    {"memoryId": AGENT, "previousScore": 0.0, "newScore": 0.0, "error": "not_found"}],
    }
