"""The HTTP edge's body decoder and limits: depth, counts, sizes, duplicates, errors naming the field.

The decoder must refuse past the messages' own depth and past each repeated field's bound while
reading (no tree is built: checked with tracemalloc), size the body limit from the validation
bounds (the largest valid bodies fit, the documented figures are the computed ones), and accept
exactly what the plain ``json.loads`` + ``proto_json.parse`` path accepts.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.ibex.context.v1 import context_pb2 as pb
from domain.model.errors import InvalidRequestError
from domain.usecases import validation as bounds
from domain.usecases.validation import validate_assemble, validate_feedback, validate_search
from entrypoints import translation
from entrypoints.http_api import body_json, limits
from entrypoints.http_api.body_json import BodyDecoder
from entrypoints.http_api.proto_json import loads_object, parse
from entrypoints.settings import Settings, SettingsError
from tests.support.hostile_http import AGENT, ORG, dumps, json_values, shaped_objects

ASSEMBLE = BodyDecoder(pb.AssembleContextRequest)
SEARCH = BodyDecoder(pb.SearchMemoriesRequest)
FEEDBACK = BodyDecoder(pb.RecordMemoryFeedbackRequest)
ESCAPED = "\u00e9"  # json.dumps(ensure_ascii=True) writes it as the 6 bytes \u00e9


def _refused(decoder: BodyDecoder, body: bytes) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        decoder.decode(body)
    return caught.value


def _request_refused(body: bytes) -> InvalidRequestError:
    """Refused by the decoder (the shape) or by json_format (the values), as the edge reads a body."""
    with pytest.raises(InvalidRequestError) as caught:
        ASSEMBLE.read(body)
    return caught.value


# ---------------------------------------------------------------- depth: the messages' own


def test_the_depth_limit_is_the_depth_of_the_messages() -> None:
    assert (ASSEMBLE.max_depth, SEARCH.max_depth, FEEDBACK.max_depth) == (3, 2, 2)
    deepest = b'{"recentMessages": [{"role": "user", "content": "hi"}], "options": {"maxMemories": 1}}'
    assert ASSEMBLE.decode(deepest)["recentMessages"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("depth", [1, 2, 50, 1_100, 100_000])
@pytest.mark.parametrize(("prefix", "field"), [
    (b'{"query": ', "query"),
    (b'{"options": {"maxMemories": ', "options.max_memories"),
    (b'{"recentMessages": [', "recent_messages[0]"),
    (b'{"recentMessages": [{"role": ', "recent_messages[0].role"),
    (b'{"toolSchemas": ', "tool_schemas[0]"),
    (b'{"principalContext": ', "principal_context"),
])
def test_a_container_one_level_past_the_depth_is_refused_at_once_naming_the_field(
    depth: int, prefix: bytes, field: str
) -> None:
    extra = b"[" if prefix.endswith(b"[") or b"toolSchemas" in prefix else b""
    body = prefix + extra + b"[" * depth  # never closed: the decoder must not need to read further
    error = _refused(ASSEMBLE, body)
    assert error.field == field, str(error)


def test_a_deep_document_is_refused_as_not_an_object() -> None:
    error = _refused(ASSEMBLE, b"[" * 1_100 + b"]" * 1_100)
    assert (error.field, str(error)) == ("", "the request body must be a JSON object, got an array")


def test_loads_object_refuses_deep_nesting_instead_of_raising_recursion_error() -> None:
    with pytest.raises(InvalidRequestError, match="nests arrays and objects too deeply"):
        loads_object("[" * 100_000 + "]" * 100_000, "the file")


# ---------------------------------------------------------------- counts: refused while reading


@pytest.mark.parametrize(("decoder", "key", "field", "most", "item"), [
    (ASSEMBLE, "recentMessages", "recent_messages", bounds.MAX_MESSAGES, b"{}"),
    (ASSEMBLE, "tool_schemas", "tool_schemas", bounds.MAX_TOOL_SCHEMAS, b'""'),
    (SEARCH, "tags", "tags", bounds.MAX_SEARCH_TAGS, b'"t"'),
    (SEARCH, "categories", "categories", bounds.MAX_SEARCH_CATEGORIES, b'"c"'),
    (FEEDBACK, "memoryIds", "memory_ids", bounds.MAX_FEEDBACK_IDS, b'"m"'),
])
def test_a_repeated_field_is_refused_at_the_first_item_past_its_bound(
    decoder: BodyDecoder, key: str, field: str, most: int, item: bytes
) -> None:
    def body(count: int, closed: bool = True) -> bytes:
        return b'{"' + key.encode() + b'": [' + b",".join([item] * count) + (b"]}" if closed else b",")

    assert len(decoder.decode(body(most))[key]) == most
    error = _refused(decoder, body(most + 1))
    assert (error.field, str(error)) == (field, f"{field} exceeds {most} items")
    # refused at that item: what follows is never read (here it does not even exist)
    assert _refused(decoder, body(most + 1, closed=False)).field == field


def test_a_huge_repeated_field_builds_nothing() -> None:
    body = b'{"recentMessages": [' + b"{}," * 1_000_000 + b"{}]}"  # 3 MB: a million messages
    tracemalloc.start()
    try:
        _refused(ASSEMBLE, body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # a million Message objects would be ~60 MB


def test_an_unknown_field_is_refused_before_its_value_is_read() -> None:
    body = b'{"x": [' + b"{}," * 1_000_000 + b"{}]}"
    tracemalloc.start()
    try:
        error = _refused(ASSEMBLE, body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (error.field, str(error)) == ("x", "unknown field 'x' in AssembleContextRequest")
    assert peak < 1_000_000


def test_a_string_past_the_longest_bound_is_refused_naming_the_field() -> None:
    error = _refused(ASSEMBLE, dumps({"model": "m" * (limits.MAX_STRING_CHARS + 1)}))
    assert (error.field, str(error)) == ("model", f"model exceeds {limits.MAX_STRING_CHARS} characters")


# ---------------------------------------------------------------- the body limits


def _largest_assemble() -> bytes:
    ids = dict.fromkeys(("agent_id", "org_id", "session_id", "directive_version_id", "request_id", "trace_id",
                         "span_id"), ESCAPED * bounds.MAX_ID_CHARS)
    schema = ESCAPED * (bounds.MAX_TOOL_SCHEMAS_TOTAL_CHARS // bounds.MAX_TOOL_SCHEMAS)
    return dumps({**ids, "query": ESCAPED * bounds.MAX_QUERY_CHARS, "model": ESCAPED * bounds.MAX_MODEL_CHARS,
                  "available_tokens": 2**31 - 1,
                  "recent_messages": [{"role": ESCAPED * bounds.MAX_ROLE_CHARS,
                                       "content": ESCAPED * bounds.MAX_CONTENT_CHARS}] * bounds.MAX_MESSAGES,
                  "tool_schemas": [schema] * bounds.MAX_TOOL_SCHEMAS,
                  "options": {"max_memories": bounds.MAX_MEMORIES_OPTION, "recency_weight": 0.1,
                              "relevance_weight": 0.1, "usefulness_weight": 0.1, "confidence_weight": 0.1,
                              "skip_cold_memories": False, "skip_hot_memories": False}})


def test_the_largest_valid_assemble_body_fits_its_limit_and_decodes() -> None:
    body = _largest_assemble()
    assert limits.largest_body_bytes(pb.AssembleContextRequest.DESCRIPTOR) >= len(body)
    assert len(body) <= limits.ASSEMBLE_BODY_LIMIT
    request = translation.assemble_request_from_proto(ASSEMBLE.read(body))
    with pytest.raises(InvalidRequestError, match="org_id must be a UUID"):  # every bound passed before it
        validate_assemble(request)


def test_the_largest_valid_search_and_feedback_bodies_fit_their_limits() -> None:
    search = dumps({"org_id": ORG, "agent_id": AGENT, "session_id": ESCAPED * bounds.MAX_ID_CHARS,
                    "query": ESCAPED * bounds.MAX_QUERY_CHARS, "limit": bounds.MAX_SEARCH_LIMIT, "min_similarity": 0.5,
                    "categories": [ESCAPED * bounds.MAX_CATEGORY_CHARS] * bounds.MAX_SEARCH_CATEGORIES,
                    "tags": [ESCAPED * bounds.MAX_TAG_CHARS] * bounds.MAX_SEARCH_TAGS})
    assert len(search) <= limits.largest_body_bytes(pb.SearchMemoriesRequest.DESCRIPTOR)
    validate_search(translation.search_request_from_proto(SEARCH.read(search)))
    feedback = dumps({"org_id": ORG, "memory_ids": [ORG] * bounds.MAX_FEEDBACK_IDS,
                      "session_id": ESCAPED * bounds.MAX_ID_CHARS, "trace_id": ESCAPED * bounds.MAX_ID_CHARS,
                      "feedback": "positive"})
    assert len(feedback) <= limits.largest_body_bytes(pb.RecordMemoryFeedbackRequest.DESCRIPTOR)
    validate_feedback(translation.feedback_request_from_proto(FEEDBACK.read(feedback)))


def test_the_documented_limits_are_the_computed_ones() -> None:
    assert (limits.ASSEMBLE_BODY_LIMIT, limits.SEARCH_BODY_LIMIT, limits.FEEDBACK_BODY_LIMIT) == (
        22_975_579, 175_068, 224_310)
    assert all(f"{value:,}" in (limits.__doc__ or "") for value in
               (limits.ASSEMBLE_BODY_LIMIT, limits.SEARCH_BODY_LIMIT, limits.FEEDBACK_BODY_LIMIT))


def test_every_repeated_field_of_a_request_has_a_bound() -> None:
    for message in (pb.AssembleContextRequest, pb.SearchMemoriesRequest, pb.RecordMemoryFeedbackRequest, pb.Message):
        descriptor = message.DESCRIPTOR
        for field in descriptor.fields:
            if field.is_repeated:
                assert field.name in limits.REPEATED_BOUNDS[descriptor.name]
            if field.type == field.TYPE_STRING:
                assert field.name in limits.STRING_BOUNDS[descriptor.name]


# ---------------------------------------------------------------- duplicates, escapes, the reported cases


@pytest.mark.parametrize(("body", "field"), [
    (b'{"model": "a", "model": "b"}', "model"),
    (b'{"\\u006dodel": "a", "model": "b"}', "model"),
    (b'{"options": {"maxMemories": 1, "maxMemories": 2}}', "maxMemories"),
    (b'{"recentMessages": [{"role": "a"}, {"role": "a", "role": "b"}]}', "role"),
    (b'{"query": "x\\\\", "query": "y"}', "query"),
])
def test_duplicate_keys_are_refused_anywhere(body: bytes, field: str) -> None:
    error = _refused(ASSEMBLE, body)
    assert (error.field, str(error)) == (field, f"duplicate key {field!r} in a JSON object")


@pytest.mark.parametrize("text", ['a"b', "a\\", "\\\"", "\\\\\"\\", '"}', '\\u0022', "é" * 300, '"' * 300])
def test_escaped_quotes_and_backslashes_in_values_are_not_keys(text: str) -> None:
    body = dumps({"query": text, "model": text, "recentMessages": [{"role": text, "content": text}]})
    assert ASSEMBLE.decode(body)["query"] == text


@pytest.mark.parametrize(("body", "field", "words"), [
    (b'{"options": {"recencyWeight": 1' + b"0" * 400 + b"}}", "options.recency_weight", "float32 range"),
    (b'{"options": {"recencyWeight": 1e400}}', "options.recency_weight", "float32 range"),
    (b'{"availableTokens": 1' + b"0" * 400 + b"}", "available_tokens", "int32 range"),
    (b'{"availableTokens": ' + b"9" * 5000 + b"}", "available_tokens", "int32 range"),
    (b'{"\\ud800": 1}', "\\ud800", "unknown field '\\\\ud800'"),
    (b'{"query": "\\ud800"}', "query", "lone surrogate"),
    (b'{"principalContext": {"orgId": "x"}}', "principal_context", "X-Ibex-Principal-Proof"),
    (b'{"recentMessages": [null]}', "recent_messages[0]", "must not be null"),
    (b'{"options": []}', "options", "must be a JSON object"),
    (b'{"model": "x"} trailing', "", "not valid JSON"),
    (b"\xff", "", "not valid UTF-8"),
])
def test_reported_inputs_are_refused_naming_the_field(body: bytes, field: str, words: str) -> None:
    error = _request_refused(body)
    assert error.field == field and words in str(error), (error.field, str(error))
    str(error).encode("utf-8")  # renderable: no lone surrogate in the message
    error.field.encode("utf-8")


def test_a_float_field_given_a_huge_integer_is_refused_not_overflowed() -> None:
    with pytest.raises(InvalidRequestError, match=r"outside the float32 range, got 10000000000000000000\.\.\. \(401"):
        parse({"recencyWeight": 10**400}, pb.AssemblyOptions)


def test_large_malformed_bodies_are_named_without_a_second_decode() -> None:
    body = b'{"query": "a",' + b" " * 100_000 + b'"x"'
    error = _refused(ASSEMBLE, body)
    assert error.field == "" and str(error).startswith("the request body is not valid JSON")


# ---------------------------------------------------------------- properties: the same as the plain path


def _plain_path(body: bytes) -> bytes:
    """json.loads + proto_json.parse, as bytes (a message holding NaN is not equal to itself)."""
    message = parse(loads_object(body.decode("utf-8"), "the request body"), pb.AssembleContextRequest)
    return message.SerializeToString(deterministic=True)


@settings(max_examples=400, deadline=None)
@given(value=st.one_of(json_values, shaped_objects(pb.AssembleContextRequest.DESCRIPTOR)))
def test_the_decoder_accepts_exactly_what_the_plain_path_accepts(value: object) -> None:
    body = dumps(value)
    try:
        expected: object = _plain_path(body)
    except InvalidRequestError:
        expected = InvalidRequestError
    try:
        got: object = ASSEMBLE.read(body).SerializeToString(deterministic=True)
    except InvalidRequestError as exc:
        assert exc.field.encode("utf-8") and str(exc).encode("utf-8") or True
        got = InvalidRequestError
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from(["model", "query", "\\u006dodel", "orgId", "org_id"]),
                                st.text(max_size=5)), min_size=1, max_size=5))
def test_duplicates_are_found_as_the_plain_path_finds_them(pairs: list[tuple[str, str]]) -> None:
    body = ("{" + ",".join(f'"{key}":{json.dumps(value)}' for key, value in pairs) + "}").encode()
    plain_refuses = True
    try:
        _plain_path(body)
        plain_refuses = False
    except InvalidRequestError:
        pass
    try:
        ASSEMBLE.read(body)
        decoder_refuses = False
    except InvalidRequestError:
        decoder_refuses = True
    assert decoder_refuses == plain_refuses


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200))
def test_any_bytes_are_decoded_or_refused_naming_the_body(body: bytes) -> None:
    try:
        ASSEMBLE.decode(body)
    except InvalidRequestError as exc:
        str(exc).encode("utf-8")


# ---------------------------------------------------------------- settings


def test_the_http_edge_settings_have_defaults_and_named_errors() -> None:
    settings_ = Settings.from_env({})
    assert (settings_.http_read_timeout_ms, settings_.http_max_connections) == (10_000.0, 512)
    parsed = Settings.from_env({"IBEX_CONTEXT_HTTP_READ_TIMEOUT": "2s", "IBEX_CONTEXT_HTTP_MAX_CONNECTIONS": "8"})
    assert (parsed.http_read_timeout_ms, parsed.http_max_connections) == (2000.0, 8)
    with pytest.raises(SettingsError, match="IBEX_CONTEXT_HTTP_READ_TIMEOUT"):
        Settings.from_env({"IBEX_CONTEXT_HTTP_READ_TIMEOUT": "0"})
    with pytest.raises(SettingsError, match="IBEX_CONTEXT_HTTP_MAX_CONNECTIONS"):
        Settings.from_env({"IBEX_CONTEXT_HTTP_MAX_CONNECTIONS": "0"})


@pytest.mark.parametrize("window", [1, 2, 3, 7, 64])
def test_the_duplicate_check_reads_in_windows_without_losing_a_string(window: int, monkeypatch) -> None:
    monkeypatch.setattr(body_json, "_WINDOW", window)
    tricky = ['a"b', "a\\", "\\\"", "\\\\\"\\", '"}', "é" * 300, '"' * 300, "x" * 255, "y" * 257]
    body = dumps({"query": tricky[0], "model": "\\\\", "recentMessages": [{"role": t, "content": t} for t in tricky]})
    assert ASSEMBLE.decode(body)["recentMessages"][3]["role"] == tricky[3]
    doubled = b'{"query": "' + b'\\\\\\"' * 100 + b'", "recentMessages": [{"role": "a", "role": "b"}]}'
    assert _refused(ASSEMBLE, doubled).field == "role"
    assert _refused(ASSEMBLE, b'{"\\u006dodel": "' + b"x" * 300 + b'", "model": "b"}').field == "model"


def test_a_deep_element_of_a_large_body_is_refused_as_too_deep() -> None:
    body = b'{"query": "a",' + b" " * body_json.PRECISE_FALLBACK_BYTES + b'"recentMessages": [' + b"[" * 5000 + b"]}"
    error = _refused(ASSEMBLE, body)
    assert error.field == "" and "deeper than AssembleContextRequest allows (3 levels)" in str(error)
