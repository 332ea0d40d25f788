"""The HTTP edge's JSON mapping: json_format over the generated messages, the edge's own rules on top.

Every case runs both ways a request reaches ``proto_json.parse``: as a body through the bounded
decoder (``BodyDecoder.read``, the HTTP edge) and as decoded values (``loads_object``, the CLI).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from contracts.ibex.context.v1 import context_pb2 as pb
from domain.model.assembly import AssembleRequest, AssemblyMetrics, AssemblyResult, BranchStatus, MemoryUsed
from domain.model.errors import InvalidRequestError
from domain.model.operations import FeedbackOutcome, FoundMemory, ScoreUpdate, SearchResult
from entrypoints import translation
from entrypoints.http_api import schemas
from entrypoints.http_api.body_json import BodyDecoder
from entrypoints.http_api.proto_json import loads_object, parse, refusal, render
from tests.support.hostile_http import dumps

ORG = "0b6f1a3e-7f44-4a53-9c59-0c8a4f0b8d21"
AGENT = "5d2b8c71-3e0a-4f6e-8b1d-9a7c6e5f4d30"
MEMORY_ID = "9f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"
DECODERS = {message: BodyDecoder(message) for message in (
    pb.AssembleContextRequest, pb.SearchMemoriesRequest, pb.RecordMemoryFeedbackRequest)}
Read = Callable[[object, type[Message]], Message]


def _through_the_body(data: object, message: type[Message]) -> Message:
    return DECODERS[message].read(dumps(data))


def _as_values(data: object, message: type[Message]) -> Message:
    return parse(data, message)


BOTH_WAYS = pytest.mark.parametrize("read", [_through_the_body, _as_values], ids=["body", "values"])


def _error(read: Read, data: object, message: type[Message] = pb.AssembleContextRequest) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        read(data, message)
    return caught.value


def _assemble_body(**extra: object) -> dict[str, object]:
    return {"orgId": ORG, "agentId": AGENT, "model": "gpt-4o", **extra}


# ---------------------------------------------------------------- what the mapping relies on


def _tree(descriptor: Descriptor, seen: set[str] | None = None) -> list[FieldDescriptor]:
    """Every field a JSON value can reach (a refused field, such as principal_context, never does)."""
    seen = set() if seen is None else seen
    seen.add(descriptor.full_name)
    fields = [field for field in descriptor.fields if not refusal(descriptor, field)]
    for field in list(fields):
        if field.message_type is not None and field.message_type.full_name not in seen:
            fields += _tree(field.message_type, seen)
    return fields


_PLAIN_KINDS = {FieldDescriptor.CPPTYPE_STRING, FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_FLOAT,
                FieldDescriptor.CPPTYPE_BOOL, FieldDescriptor.CPPTYPE_MESSAGE}


@pytest.mark.parametrize("message", [
    pb.AssembleContextRequest, pb.SearchMemoriesRequest, pb.RecordMemoryFeedbackRequest,
    pb.AssembleContextResponse, pb.SearchMemoriesResponse, pb.RecordMemoryFeedbackResponse,
], ids=lambda m: m.DESCRIPTOR.name)
def test_the_messages_hold_only_what_the_mapping_handles(message: type[Message]) -> None:
    """No int64 (a JSON string), enum, map, oneof, well-known type or optional scalar (presence: a
    default would go unprinted) anywhere in the tree: the walk and ``render`` assume none."""
    for field in _tree(message.DESCRIPTOR):
        assert field.cpp_type in _PLAIN_KINDS, field.full_name
        assert field.containing_oneof is None, field.full_name
        if field.message_type is not None:
            assert not field.message_type.GetOptions().map_entry, field.full_name
            assert not field.message_type.full_name.startswith("google.protobuf."), field.full_name
        else:
            assert field.is_repeated or not field.has_presence, field.full_name


# ---------------------------------------------------------------- requests


@BOTH_WAYS
def test_camel_case_and_snake_case_names_read_to_the_same_request(read: Read) -> None:
    camel = {"orgId": ORG, "agentId": AGENT, "model": "gpt-4o", "recentMessages": [{"role": "user", "content": "hi"}],
             "toolSchemas": ["{}"], "availableTokens": 300, "options": {"maxMemories": 4, "skipHotMemories": True}}
    snake = {"org_id": ORG, "agent_id": AGENT, "model": "gpt-4o", "recent_messages": [{"role": "user", "content": "hi"}],
             "tool_schemas": ["{}"], "available_tokens": 300, "options": {"max_memories": 4, "skip_hot_memories": True}}
    assert read(camel, pb.AssembleContextRequest) == read(snake, pb.AssembleContextRequest)


@BOTH_WAYS
def test_absent_and_null_fields_take_proto_defaults(read: Read) -> None:
    message = read(_assemble_body(query=None, options=None, recentMessages=None), pb.AssembleContextRequest)
    assert message == pb.AssembleContextRequest(org_id=ORG, agent_id=AGENT, model="gpt-4o")
    assert translation.assemble_request_from_proto(message) == AssembleRequest(org_id=ORG, agent_id=AGENT, model="gpt-4o")


@BOTH_WAYS
def test_int32_accepts_integral_numbers_and_decimal_strings_like_protobuf(read: Read) -> None:
    message = read(_assemble_body(availableTokens="1200", options={"maxMemories": 7.0}), pb.AssembleContextRequest)
    assert (message.available_tokens, message.options.max_memories) == (1200, 7)


@BOTH_WAYS
def test_float_accepts_numeric_strings_and_named_non_finite_values(read: Read) -> None:
    options = read(_assemble_body(options={"recencyWeight": "0.25", "relevanceWeight": "Infinity",
                                           "usefulnessWeight": "NaN"}), pb.AssembleContextRequest).options
    assert options.recency_weight == 0.25 and options.relevance_weight == float("inf")
    assert options.usefulness_weight != options.usefulness_weight  # NaN reaches the use case, which rejects it


def _full_assemble() -> pb.AssembleContextRequest:
    return pb.AssembleContextRequest(
        org_id=ORG, agent_id=AGENT, model="gpt-4o", query="what do I like?",
        recent_messages=[pb.Message(role="system", content="be brief"), pb.Message(role="user", content="héllo ✓")],
        tool_schemas=['{"name": "t"}'], available_tokens=900, session_id="s", directive_version_id="d",
        request_id="r-1", trace_id="t-1", span_id="sp",
        options=pb.AssemblyOptions(skip_cold_memories=True, recency_weight=0.5, relevance_weight=0.25,
                                   usefulness_weight=0.125, confidence_weight=1.0, max_memories=12),
    )


@BOTH_WAYS
@pytest.mark.parametrize("message", [
    _full_assemble(),
    pb.SearchMemoriesRequest(org_id=ORG, agent_id=AGENT, query="tea", limit=5, min_similarity=0.5,
                             categories=["preference"], tags=["drinks", "uk"], session_id="s"),
    pb.RecordMemoryFeedbackRequest(org_id=ORG, memory_ids=[MEMORY_ID, AGENT], feedback="positive", session_id="s",
                                   trace_id="t"),
], ids=lambda m: type(m).__name__)
def test_requests_round_trip_through_their_json(read: Read, message: Message) -> None:
    assert read(render(message), type(message)) == message


def test_search_min_similarity_zero_means_the_source_default() -> None:
    message = _through_the_body({"orgId": ORG, "agentId": AGENT, "query": "q", "minSimilarity": 0},
                                pb.SearchMemoriesRequest)
    assert translation.search_request_from_proto(message).min_similarity is None


# ---------------------------------------------------------------- request errors name the field


@BOTH_WAYS
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
        (_assemble_body(principalContext={}), "principal_context", "X-Ibex-Principal-Proof"),
    ],
)
def test_assemble_request_errors_name_the_field(read: Read, body: object, field: str, words: str) -> None:
    error = _error(read, body)
    assert (error.field, words in str(error)) == (field, True), str(error)
    str(error).encode("utf-8")  # renderable: no lone surrogate in the message


@BOTH_WAYS
@pytest.mark.parametrize(("body", "field"), [
    (_assemble_body(availableTokens="1e3"), "available_tokens"),
    (_assemble_body(availableTokens="1_000"), "available_tokens"),
    (_assemble_body(availableTokens="+5"), "available_tokens"),
    (_assemble_body(availableTokens=" 12"), "available_tokens"),
    (_assemble_body(options={"recencyWeight": True}), "options.recency_weight"),
    (_assemble_body(options={"maxMemories": 3, "max_memories": 3}), "options.max_memories"),
    (_assemble_body(recentMessages=[{"role": "a", "content": "x", "Content": "y"}]), "recent_messages[0].Content"),
])
def test_what_protobufs_python_parser_would_let_through_is_refused(read: Read, body: object, field: str) -> None:
    """json_format alone reads ``true`` as 1.0, "1_000" as 1000, keeps one of two names for a field."""
    assert _error(read, body).field == field


@BOTH_WAYS
def test_search_and_feedback_errors_name_the_field(read: Read) -> None:
    assert _error(read, {"query": "q", "limit": "ten"}, pb.SearchMemoriesRequest).field == "limit"
    assert _error(read, {"categories": "preference"}, pb.SearchMemoriesRequest).field == "categories"
    assert _error(read, {"memoryIds": [MEMORY_ID, 4]}, pb.RecordMemoryFeedbackRequest).field == "memory_ids[1]"
    assert _error(read, {"notes": "x"}, pb.RecordMemoryFeedbackRequest).field == "notes"


def test_values_that_are_not_an_object_name_the_message() -> None:
    error = _error(_as_values, [1, 2])
    assert (error.field, str(error)) == ("", "AssembleContextRequest must be a JSON object (AssembleContextRequest), "
                                             "got an array")


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
def test_documents_that_are_not_one_json_object_are_refused(text: str, words: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        loads_object(text, "the request body")
    assert words in str(caught.value)


# ---------------------------------------------------------------- responses


def _result() -> AssemblyResult:
    used = (
        MemoryUsed(MEMORY_ID, "included", "", 0.85, 0.9, 0.1, 0.3, 1, "factual", 0.9, 0.7, 31, "hot"),
        MemoryUsed(AGENT, "budget", "budget", 0.123456789, 0.5, 0.0, 0.0, 2, "episodic", 0.5, 0.5, 40, "cold"),
    )
    return AssemblyResult(  # type: ignore[arg-type]
        assembled_context="ctx", tokens_used=120, memories_included=1, memories_used=used, directive_tokens=10,
        history_tokens=20, memory_tokens=31,
        metrics=AssemblyMetrics(0.4, 1.5, 2.49, 40.0, 0.2, 0.6, -0.1, 44.7, 2),
        score_schema="interim_v1", degradation_level="L1",
        branches=(BranchStatus("directive", "success", 0.6), BranchStatus("cold", "timeout", 40.2, "outer_deadline")),
        usable_budget=71, estimate_kind="exact_o200k_base", packing_path="exact_dp", nonce="abc",
        request_id="r", trace_id="", span_id="s",
    )


def _assemble_response() -> dict[str, object]:
    return render(translation.assembly_to_proto(_result()))


def test_assemble_response_renders_every_field_under_its_json_name_defaults_included() -> None:
    body = _assemble_response()
    assert set(body) == {f.json_name for f in pb.AssembleContextResponse.DESCRIPTOR.fields}
    assert body["traceId"] == ""  # a default is printed, not left out
    assert set(body["metrics"]) == {f.json_name for f in pb.AssemblyMetrics.DESCRIPTOR.fields}  # type: ignore[arg-type]
    assert [m["detail"] for m in body["memoriesUsed"]] == ["", "budget"]  # type: ignore[attr-defined]
    parsed = json_format.ParseDict(body, pb.AssembleContextResponse())
    assert render(parsed) == body
    assert json.loads(json.dumps(body)) == body  # plain JSON values


def test_response_floats_print_as_protobuf_prints_float32() -> None:
    used = _assemble_response()["memoriesUsed"]
    assert used[0]["compositeScore"] == 0.85  # type: ignore[index]
    assert used[1]["compositeScore"] == 0.12345679  # type: ignore[index]


def test_durations_are_whole_non_negative_milliseconds() -> None:
    body = _assemble_response()
    assert body["metrics"] == {
        "budgetCalculationMs": 0, "directiveLoadMs": 2, "hotMemoryRetrievalMs": 2, "coldMemoryRetrievalMs": 40,
        "rankingMs": 0, "packingMs": 1, "formattingMs": 0, "totalMs": 45, "candidatesEvaluated": 2,
    }
    assert [b["latencyMs"] for b in body["branches"]] == [1, 40]  # type: ignore[attr-defined]


def test_search_response_carries_rfc3339_times_and_memory_ids() -> None:
    found = FoundMemory(MEMORY_ID, "likes tea", "preference", 0.9, 0.8, 3, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    body = render(translation.search_to_proto(SearchResult((found,), total_candidates=4, search_time_ms=3.6)))
    assert body == {
        "memories": [{"id": MEMORY_ID, "content": "likes tea", "category": "preference", "confidence": 0.9,
                      "compositeScore": 0.8, "retrievalCount": 3, "createdAt": "2026-01-02T03:04:05Z"}],
        "totalCandidates": 4, "searchTimeMs": 4,
    }


def test_feedback_response_lists_every_update_with_its_error() -> None:
    outcome = FeedbackOutcome(False, (ScoreUpdate(MEMORY_ID, 0.5, 0.75), ScoreUpdate(AGENT, 0.0, 0.0, "not_found")))
    assert render(translation.feedback_to_proto(outcome)) == {
        "success": False,
        "updates": [{"memoryId": MEMORY_ID, "previousScore": 0.5, "newScore": 0.75, "error": ""},
                    {"memoryId": AGENT, "previousScore": 0.0, "newScore": 0.0, "error": "not_found"}],
    }


def test_the_clis_mapping_is_the_edges() -> None:
    data = render(_full_assemble())
    assert schemas.assemble_request_from_json(data) == translation.assemble_request_from_proto(
        _through_the_body(data, pb.AssembleContextRequest))
    assert schemas.assemble_response_to_json(_result()) == _assemble_response()
    with pytest.raises(InvalidRequestError) as caught:
        schemas.assemble_request_from_json({"options": {"maxMemories": True}})
    assert caught.value.field == "options.max_memories"
