"""Hostile HTTP requests for the API, as hypothesis strategies (shared by the tests and bench.hostile_http).

``hostile_requests()`` draws a ``HostileRequest``: random JSON values and request-shaped objects
with wrong types, huge numbers, deep nesting, lone surrogates, unknown and doubled fields; random
bytes and broken UTF-8; wrong content types, methods and paths. ``one_bad_field()`` draws a valid
AssembleContextRequest with exactly one field given a value of the wrong JSON type, and the proto
name the error must carry. ``check_error_shape`` is the property every answer must have.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs
import httpx
from hypothesis import strategies as st

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from contracts.ibex.context.v1 import context_pb2 as pb
from entrypoints.http_api.proto_json import fields_by_key

ORG = "0b7e3c1a-5d2f-4e8a-9c6b-1f2a3b4c5d6e"
AGENT = "6b2e0f3d-8c4a-4d9e-b7f6-3c2d1e0f9a8b"
API_PATHS: dict[str, Descriptor] = {"/v1/context:assemble": pb.AssembleContextRequest.DESCRIPTOR,
                                    "/v1/memories:search": pb.SearchMemoriesRequest.DESCRIPTOR,
                                    "/v1/memories:feedback": pb.RecordMemoryFeedbackRequest.DESCRIPTOR}
JSON = "application/json"
_HEADER_SAFE = re.compile(r"[\x21-\x7e]{1,128}")


@attrs.frozen
class HostileRequest:
    method: str
    path: str
    content_type: str | None
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()

    def send(self, client: httpx.Client) -> httpx.Response:
        headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in self.headers]
        if self.content_type is not None:
            headers.append((b"content-type", self.content_type.encode("latin-1")))
        return client.request(self.method, self.path, content=self.body, headers=headers)


def dumps(value: object) -> bytes:
    """JSON text of ``value``; lone surrogates become ``\\udXXX`` escapes (still JSON syntax)."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode("ascii")


# ------------------------------------------------------------------ values

_texts = st.one_of(
    st.text(max_size=20),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),  # lone surrogates
    st.sampled_from(["", " ", "NaN", "Infinity", "-Infinity", "1e400", "12.5", "0x10", "true", ORG, "\x00", "é" * 3]),
)
_numbers = st.one_of(
    st.integers(), st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.just(10**400), st.just(-(10**300)), st.just(2**31),
)
_scalars = st.one_of(st.none(), st.booleans(), _numbers, _texts)
json_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(_texts, inner, max_size=4)), max_leaves=12)


def _field_names(spec: Descriptor) -> list[str]:
    return sorted(fields_by_key(spec))


@st.composite
def shaped_objects(draw: st.DrawFn, spec: Descriptor, depth: int = 0) -> dict[str, Any]:
    """An object with mostly the message's own keys (either spelling), each with a random value."""
    keys = draw(st.lists(st.one_of(st.sampled_from(_field_names(spec)), _texts), max_size=6))
    result: dict[str, Any] = {}
    lookup = fields_by_key(spec)
    for key in keys:
        field = lookup.get(key)
        if field is not None and field.message_type is not None and depth < 2 and draw(st.booleans()):
            nested = shaped_objects(field.message_type, depth + 1)
            result[key] = draw(st.lists(nested, max_size=3) if field.is_repeated else nested)
        else:
            result[key] = draw(json_values)
    return result


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@st.composite
def hostile_bodies(draw: st.DrawFn, spec: Descriptor) -> bytes:
    kind = draw(st.sampled_from(["value", "shaped", "deep", "number", "bytes", "doubled", "mutated"]))
    if kind == "value":
        return dumps(draw(json_values))
    if kind == "shaped":
        return dumps(draw(shaped_objects(spec)))
    if kind == "deep":
        key = draw(st.sampled_from(_field_names(spec) + ["x"]))
        opener = draw(st.sampled_from([b"[", b'{"a":']))
        depth = draw(st.integers(min_value=1, max_value=3000))
        inner = opener * depth + (b"]" * depth if opener == b"[" else b"1" + b"}" * depth)
        return b'{"' + key.encode() + b'":' + (inner if draw(st.booleans()) else _nested(depth)) + b"}"
    if kind == "number":
        key = draw(st.sampled_from(_field_names(spec)))
        digits = draw(st.integers(min_value=1, max_value=6000))
        number = draw(st.sampled_from([b"1" + b"0" * digits, b"-" + b"9" * digits, b"1e" + str(digits).encode(),
                                       b"0." + b"1" * digits, b"1e-" + str(digits).encode()]))
        return b'{"' + key.encode() + b'":' + number + b"}"
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "doubled":
        field = draw(st.sampled_from(list(spec.fields)))
        first, second = draw(st.sampled_from([(field.name, field.name), (field.name, field.json_name),
                                              (field.json_name, field.json_name)]))
        return b'{"' + first.encode() + b'":' + dumps(draw(json_values)) + b',"' + second.encode() + b'":' \
            + dumps(draw(json_values)) + b"}"
    text = dumps(draw(shaped_objects(spec)))  # mutated: a byte flipped, inserted or cut
    position = draw(st.integers(min_value=0, max_value=len(text)))
    edit = draw(st.sampled_from(["cut", "insert", "replace"]))
    if edit == "cut":
        return text[:position]
    byte = bytes([draw(st.integers(min_value=0, max_value=255))])
    return text[:position] + byte + text[position + (edit == "replace"):]


def _header_values(most: int) -> st.SearchStrategy[str]:
    """Latin-1 text a client can send as a header value (HTTP trims the spaces around one)."""
    latin1 = st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f")
    return st.text(alphabet=latin1, max_size=most).map(lambda text: text.strip(" \t"))


_content_types = st.one_of(
    st.just(JSON), st.just(JSON), st.just(JSON),
    st.sampled_from(["application/json; charset=utf-8", "application/json; charset=latin-1", "text/plain",
                     "application/x-www-form-urlencoded", "", "application/json;;;", "APPLICATION/JSON",
                     "application/json; charset=\"utf8\"", "multipart/form-data; boundary=x"]),
    _header_values(40),
    st.none(),
)
_request_ids = st.one_of(st.none(), _header_values(140))


@st.composite
def hostile_requests(draw: st.DrawFn) -> HostileRequest:
    odd_paths = ["/v1/context", "/v1/nothing", "/", "/v1/context:assemble/", "/v1/memories:search?x=1", "/%ff", "/v1/%00"]
    path = draw(st.sampled_from(sorted(API_PATHS) * 6 + odd_paths))
    method = draw(st.sampled_from(["POST"] * 12 + ["GET", "PUT", "DELETE", "PATCH", "OPTIONS"]))
    spec = API_PATHS.get(path, pb.AssembleContextRequest.DESCRIPTOR)
    headers: tuple[tuple[str, str], ...] = ()
    request_id = draw(_request_ids)
    if request_id is not None:
        headers = (("x-request-id", request_id),)
    return HostileRequest(method, path, draw(_content_types), draw(hostile_bodies(spec)), headers)


# ------------------------------------------------------------------ one bad field in a valid request

_F = FieldDescriptor
_WRONG = {
    _F.CPPTYPE_STRING: st.one_of(st.integers(), st.booleans(), st.lists(st.integers(), max_size=2), st.just({"a": 1}),
                      st.just([[[[]]]])),
    _F.CPPTYPE_INT32: st.one_of(st.sampled_from(["x", "1.5", "9" * 30, "1e3"]), st.just(2**31), st.just(10**400),
                     st.just(-(2**31) - 1), st.just(1.5), st.booleans(), st.just([1]), st.just({})),
    _F.CPPTYPE_FLOAT: st.one_of(st.sampled_from(["heavy", "nan", "inf"]), st.just(10**400), st.just(1e39), st.booleans(),
                     st.just([0.5]), st.just({})),
    _F.CPPTYPE_BOOL: st.one_of(st.sampled_from(["true", "1", ""]), st.integers(), st.just([True]), st.just({})),
}


def valid_assemble() -> dict[str, Any]:
    return {"orgId": ORG, "agentId": AGENT, "model": "gpt-4o", "query": "tea",
            "recentMessages": [{"role": "user", "content": "hello"}], "options": {"maxMemories": 3}}


@st.composite
def one_bad_field(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A valid AssembleContextRequest with one field of the wrong JSON type, and that field's proto path."""
    body = valid_assemble()
    where = draw(st.sampled_from(["top", "options", "message"]))
    spec = {"top": pb.AssembleContextRequest, "options": pb.AssemblyOptions, "message": pb.Message}[where].DESCRIPTOR
    field = draw(st.sampled_from([f for f in spec.fields if f.message_type is None and not f.is_repeated]))
    key = draw(st.sampled_from([field.name, field.json_name]))
    value = draw(_WRONG[field.cpp_type])
    if where == "top":
        body.pop(field.json_name, None)
        body[key] = value
        return body, field.name
    if where == "options":
        body["options"] = {key: value}
        return body, f"options.{field.name}"
    body["recentMessages"] = [{"role": "user", "content": "ok"}, {key: value}]
    return body, f"recent_messages[1].{field.name}"


# ------------------------------------------------------------------ the property

def check_error_shape(response: httpx.Response) -> dict[str, Any] | None:
    """Assert the answer is not a 500 and, if an error, the JSON shape with a request id; return the error."""
    assert response.status_code < 500 or response.status_code == 503, (response.status_code, response.text[:300])
    if response.status_code < 400:
        return None
    assert response.headers.get("content-type", "").startswith("application/json"), response.text[:300]
    error = response.json()["error"]
    assert isinstance(error["code"], str) and error["code"], error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error.get("field", ""), str), error
    request_id = error["requestId"]
    assert isinstance(request_id, str) and request_id, error
    if _HEADER_SAFE.fullmatch(request_id):
        assert response.headers.get("x-request-id") == request_id, (response.headers, error)
    return error
