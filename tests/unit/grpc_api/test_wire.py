"""wire: the largest valid request and the receive limit; the shape walk that runs before decoding."""

from __future__ import annotations

import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.ibex.auth.v1 import principal_context_pb2 as auth_pb
from contracts.ibex.context.v1 import context_pb2 as pb
from domain.model.errors import InvalidRequestError
from domain.usecases import validation as bounds
from entrypoints import translation as translate
from entrypoints.grpc_api import server, wire

ORG = "7f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
AGENT = "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d"
WIDE = "\U0001f600"  # 4 UTF-8 bytes, the most a code point takes
SPACE = "\u3000"  # ideographic space: 3 UTF-8 bytes, removed by str.strip() (no 4-byte space exists)


def padded(uuid: str) -> str:
    """A UUID at the id bound, as many bytes as validation lets through."""
    return uuid + SPACE * (bounds.MAX_ID_CHARS - len(uuid))


def wide(chars: int) -> str:
    return WIDE * chars


def largest_assemble() -> pb.AssembleContextRequest:
    context = auth_pb.PrincipalContext(org_id="x" * (bounds.MAX_PRINCIPAL_CONTEXT_BYTES - 3))  # tag + 2-byte length
    assert context.ByteSize() == bounds.MAX_PRINCIPAL_CONTEXT_BYTES
    ids = {name: wide(bounds.MAX_ID_CHARS) for name in ("session_id", "directive_version_id", "request_id",
                                                           "trace_id", "span_id")}
    schema = wide(bounds.MAX_TOOL_SCHEMAS_TOTAL_CHARS // bounds.MAX_TOOL_SCHEMAS)
    return pb.AssembleContextRequest(
        org_id=padded(ORG), agent_id=padded(AGENT), model=wide(bounds.MAX_MODEL_CHARS),
        query=wide(bounds.MAX_QUERY_CHARS), available_tokens=2**31 - 1, principal_context=context,
        recent_messages=[pb.Message(role=wide(bounds.MAX_ROLE_CHARS), content=wide(bounds.MAX_CONTENT_CHARS))]
        * bounds.MAX_MESSAGES,
        options=pb.AssemblyOptions(skip_cold_memories=True, skip_hot_memories=True, recency_weight=1.0,
                                   relevance_weight=1.0, usefulness_weight=1.0, confidence_weight=1.0,
                                   max_memories=bounds.MAX_MEMORIES_OPTION),
        tool_schemas=[schema] * bounds.MAX_TOOL_SCHEMAS, **ids)


def test_the_largest_valid_assembly_request_is_valid_and_within_the_computed_size() -> None:
    message = largest_assemble()
    bounds.validate_assemble(translate.assemble_request_from_proto(message))
    size = message.ByteSize()
    # tight: only the two UUIDs fall short of 4 bytes a character (36 ASCII + 220 three-byte spaces)
    assert wire.LARGEST_ASSEMBLE_REQUEST_BYTES - size == 2 * (bounds.MAX_ID_CHARS * 4 - (36 + 220 * 3))
    assert wire.decode(message.SerializeToString(), wire.ASSEMBLE_SHAPE) == message


def test_the_largest_valid_search_and_feedback_requests_are_within_their_computed_sizes() -> None:
    search = pb.SearchMemoriesRequest(
        org_id=padded(ORG), agent_id=padded(AGENT), session_id=wide(bounds.MAX_ID_CHARS),
        query=wide(bounds.MAX_QUERY_CHARS), limit=bounds.MAX_SEARCH_LIMIT, min_similarity=1.0,
        categories=[wide(bounds.MAX_CATEGORY_CHARS)] * bounds.MAX_SEARCH_CATEGORIES,
        tags=[wide(bounds.MAX_TAG_CHARS)] * bounds.MAX_SEARCH_TAGS)
    bounds.validate_search(translate.search_request_from_proto(search))
    assert 0 <= wire.LARGEST_SEARCH_REQUEST_BYTES - search.ByteSize() == 2 * (bounds.MAX_ID_CHARS * 4 - 696)
    feedback = pb.RecordMemoryFeedbackRequest(
        org_id=padded(ORG), memory_ids=[padded(AGENT)] * bounds.MAX_FEEDBACK_IDS,
        session_id=wide(bounds.MAX_ID_CHARS), trace_id=wide(bounds.MAX_ID_CHARS),
        feedback="positive" + SPACE * (bounds.MAX_FEEDBACK_CHARS - 8))
    bounds.validate_feedback(translate.feedback_request_from_proto(feedback))
    assert feedback.ByteSize() <= wire.LARGEST_FEEDBACK_REQUEST_BYTES


def test_the_receive_limit_is_the_largest_valid_request_plus_a_margin() -> None:
    assert wire.LARGEST_VALID_REQUEST_BYTES == wire.LARGEST_ASSEMBLE_REQUEST_BYTES == 15_280_525
    assert wire.MAX_RECEIVE_BYTES == 15_280_525 + 64 * 1024
    assert ("grpc.max_receive_message_length", wire.MAX_RECEIVE_BYTES) in server.SERVER_OPTIONS


# ------------------------------------------------------------------ the shape walk
class NeverDecoded:
    """A message type whose parser must not run: the shape walk has to refuse first."""

    DESCRIPTOR = types.SimpleNamespace(full_name="ibex.context.v1.AssembleContextRequest")

    @staticmethod
    def FromString(raw: bytes) -> Any:  # noqa: N802  (the protobuf spelling)
        raise AssertionError("decoded although the shape walk should have refused the bytes")


UNDECODED = wire.RequestShape(NeverDecoded, wire.ASSEMBLE_SHAPE.repeated, wire.ASSEMBLE_SHAPE.max_fields)


def refusal(raw: bytes, shape: wire.RequestShape = wire.ASSEMBLE_SHAPE) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        wire.decode(raw, shape)
    return caught.value


def test_too_many_messages_in_a_large_body_are_refused_on_the_bytes_before_decoding() -> None:
    raw = pb.AssembleContextRequest(recent_messages=[pb.Message()] * 1_000_000).SerializeToString()
    error = refusal(raw, UNDECODED)
    assert (error.field, str(error)) == ("recent_messages", "recent_messages exceeds 100 items")


def test_too_many_messages_in_a_small_body_are_refused_after_parsing_with_the_same_message() -> None:
    raw = pb.AssembleContextRequest(recent_messages=[pb.Message()] * 101).SerializeToString()
    assert len(raw) < wire.SHAPE_WALK_MIN_BYTES
    error = refusal(raw)
    assert (error.field, str(error)) == ("recent_messages", "recent_messages exceeds 100 items")


def test_a_body_just_below_the_walk_threshold_holds_few_enough_elements_to_parse() -> None:
    assert wire.SHAPE_WALK_MIN_BYTES // 2 <= 8192  # every element is at least a tag and a length


@pytest.mark.parametrize("count", [1, 10_000], ids=["small-body", "large-body"])
def test_every_repeated_field_has_its_bound(count: int) -> None:
    cases = [
        (pb.AssembleContextRequest(tool_schemas=["{}"] * 65 * count), wire.ASSEMBLE_SHAPE, "tool_schemas"),
        (pb.SearchMemoriesRequest(tags=["t"] * 65 * count), wire.SEARCH_SHAPE, "tags"),
        (pb.SearchMemoriesRequest(categories=["c"] * 17 * count), wire.SEARCH_SHAPE, "categories"),
        (pb.RecordMemoryFeedbackRequest(memory_ids=[AGENT] * 101 * count), wire.FEEDBACK_SHAPE, "memory_ids"),
    ]
    for message, shape, field in cases:
        assert refusal(message.SerializeToString(), shape).field == field


def test_a_bound_is_inclusive() -> None:
    raw = pb.AssembleContextRequest(recent_messages=[pb.Message()] * 100, tool_schemas=["x"] * 64).SerializeToString()
    assert len(wire.decode(raw, wire.ASSEMBLE_SHAPE).recent_messages) == 100


def test_more_top_level_fields_than_a_valid_request_has_are_refused() -> None:
    unknown_varint = b"\xf8\x06\x01"  # field 111, varint 1: unknown to this contract
    padding = b"\xfa\x06" + bytes([0x80, 0x80, 0x01]) + b"\0" * 16384  # field 111, 16 KiB of bytes
    assert len(wire.decode(padding + unknown_varint * wire.EXTRA_FIELDS, wire.ASSEMBLE_SHAPE).recent_messages) == 0
    error = refusal(unknown_varint * 5_000_000, UNDECODED)
    assert error.field == "request" and f"more than {UNDECODED.max_fields} fields" in str(error)


BIG = pb.AssembleContextRequest(query="q" * wire.SHAPE_WALK_MIN_BYTES).SerializeToString()  # walked


@pytest.mark.parametrize(("tail", "reason"), [
    (b"\xff\xff\xff", "a varint runs past the end"),
    (b"\x22\x05ab", "runs past the end of the message"),
    (b"\x0b", "a group is not closed"),
    (b"\x0c", "unmatched end of group"),
    (b"\x07\x00", "field number 0"),
    (b"\x0e", "wire type 6"),
    (b"\x08" + b"\x80" * 11, "longer than 10 bytes"),
])
def test_bytes_that_are_not_wire_format_are_refused_naming_the_request(tail: bytes, reason: str) -> None:
    walked = refusal(BIG + tail, UNDECODED)  # found by the walk, before any parsing
    parsed = refusal(tail)  # a small body: found by the parser
    for error in (walked, parsed):
        assert error.field == "request"
        assert str(error).startswith("request: the bytes are not a valid ibex.context.v1.AssembleContextRequest (")
    assert reason in str(walked) and "Wire format was corrupt" in str(parsed)


def test_a_string_that_is_not_utf8_is_refused_by_the_parser_naming_the_request() -> None:
    error = refusal(BIG + b"\x22\x02\xff\xfe")  # query = invalid UTF-8: the walk passes it, the parser does not
    assert error.field == "request" and "bad UTF-8" in str(error)


def test_unknown_fields_and_groups_decode_as_protobuf_does() -> None:
    raw = BIG + b"\xfb\x06\x08\x01\xfc\x06"  # group 111 holding field 1
    assert wire.decode(raw, wire.ASSEMBLE_SHAPE).query == "q" * wire.SHAPE_WALK_MIN_BYTES


@settings(max_examples=400, deadline=None)
@given(raw=st.binary(max_size=200))
def test_any_bytes_decode_as_protobuf_does_or_are_refused_naming_a_field(raw: bytes) -> None:
    """Behind a walked prefix, at most 200 more bytes: the field cap cannot bite, so the walk must
    agree with the parser."""
    raw = BIG + raw
    try:
        expected = pb.AssembleContextRequest.FromString(raw)
    except Exception:
        expected = None
    try:
        decoded = wire.decode(raw, wire.ASSEMBLE_SHAPE)
    except InvalidRequestError as error:
        counts_ok = expected is not None and len(expected.recent_messages) <= 100 and len(expected.tool_schemas) <= 64
        assert not counts_ok, f"refused bytes the parser accepts within the bounds: {error}"
        assert error.field in ("request", "recent_messages", "tool_schemas") and str(error)
    else:
        assert decoded == expected


# ------------------------------------------------------------------ translation checks counts first
@pytest.mark.parametrize(("make", "field"), [
    (lambda: translate.assemble_request_from_proto(pb.AssembleContextRequest(recent_messages=[pb.Message()] * 101)),
     "recent_messages"),
    (lambda: translate.assemble_request_from_proto(pb.AssembleContextRequest(tool_schemas=["x"] * 65)), "tool_schemas"),
    (lambda: translate.search_request_from_proto(pb.SearchMemoriesRequest(tags=["t"] * 65)), "tags"),
    (lambda: translate.search_request_from_proto(pb.SearchMemoriesRequest(categories=["c"] * 17)), "categories"),
    (lambda: translate.feedback_request_from_proto(pb.RecordMemoryFeedbackRequest(memory_ids=["m"] * 101)),
     "memory_ids"),
    (lambda: translate.assemble_request_from_proto(pb.AssembleContextRequest(
        principal_context=auth_pb.PrincipalContext(org_id="x" * 8190))), "principal_context"),
])
def test_translation_refuses_an_oversized_repeated_field_before_building_elements(
        make, field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("an element was built before the count was checked")

    monkeypatch.setattr(translate, "Message", never)
    with pytest.raises(InvalidRequestError) as caught:
        make()
    assert caught.value.field == field and field in str(caught.value)
