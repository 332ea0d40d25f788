"""A request on the wire: its largest valid size, and its shape checked before it is decoded.

**Receive limit.** ``LARGEST_VALID_REQUEST_BYTES`` is the serialized size of the largest request
the validation bounds (``domain.usecases.validation``) accept, computed field by field: every
string at its character bound, each character 4 UTF-8 bytes (the most one code point takes),
plus each field's tag and length prefix. For AssembleContextRequest, the largest of the three:

    recent_messages  100 x (64 + 32,768 characters) x 4 bytes + framing    13,133,900
    tool_schemas     524,288 characters (all schemas) x 4 + 64 x 4 framing  2,097,408
    query 8,192 chars, model 256, 7 ids x 256, principal_context 8,192 bytes,
    options, available_tokens                                                  49,217
    ----------------------------------------------------------------------------------
                                                                           15,280,525

SearchMemoriesRequest is at most 72,964 bytes and RecordMemoryFeedbackRequest 105,912. The
server's ``grpc.max_receive_message_length`` is ``MAX_RECEIVE_BYTES`` = 15,280,525 + 64 KiB (room
for fields a newer client may add) = 15,346,061 bytes (14.6 MiB); anything larger is refused by
the transport (RESOURCE_EXHAUSTED) before a byte of it reaches Python.
``tests/unit/grpc_api/test_wire.py`` builds the largest valid request and checks it against
these figures.

**Shape before decoding.** Decoding a message builds every element of its repeated fields: 14 MB
of empty ``recent_messages`` are 7.5 million messages, ~0.4 s of a blocked loop and ~600 MB
before any count could be checked. ``decode`` therefore first walks the top-level fields of a
body of ``SHAPE_WALK_MIN_BYTES`` or more (tags and lengths only, nothing copied; at most
``max_fields`` steps) and refuses a repeated field with more elements than its bound (a message
naming the field, as the validation's) and a message with more top-level fields than a valid one
can have; only then does it parse. A smaller body holds at most 8,192 elements, cheaper to parse
(well under a millisecond) than to walk in Python, so it is parsed first and its counts checked on
the message (the same messages). Bytes that are not the message (corrupt wire format, bad UTF-8
in a string) are ``InvalidRequestError`` on ``request``, which the edge answers INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from google.protobuf.message import DecodeError

from contracts.ibex.context.v1 import context_pb2 as pb
from domain.model.errors import InvalidRequestError
from domain.usecases import validation as bounds

UTF8_MAX_BYTES = 4
RECEIVE_MARGIN_BYTES = 64 * 1024
EXTRA_FIELDS = 64  # top-level fields beyond the known ones a valid request may carry (newer clients)
SHAPE_WALK_MIN_BYTES = 16 * 1024  # smaller bodies are parsed, then counted (every element is >= 2 bytes)
REQUEST_FIELD = "request"


def varint_size(value: int) -> int:
    """Bytes of ``value`` as a protobuf varint."""
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def length_delimited_size(payload: int, number: int = 1) -> int:
    """A length-delimited field (string, bytes, message) of ``payload`` bytes, with tag and length."""
    return varint_size(number << 3) + varint_size(payload) + payload


def string_size(chars: int, number: int = 1) -> int:
    return length_delimited_size(chars * UTF8_MAX_BYTES, number)


def _largest_assemble() -> int:
    message = string_size(bounds.MAX_ROLE_CHARS) + string_size(bounds.MAX_CONTENT_CHARS)
    per_schema_framing = 1 + varint_size(bounds.MAX_TOOL_SCHEMA_CHARS * UTF8_MAX_BYTES)
    options = 2 * 2 + 4 * 5 + 1 + varint_size(bounds.MAX_MEMORIES_OPTION)  # 2 bools, 4 floats, max_memories
    return (
        7 * string_size(bounds.MAX_ID_CHARS)  # agent_id, org_id, session_id, directive_version_id, request/trace/span ids
        + string_size(bounds.MAX_QUERY_CHARS)
        + string_size(bounds.MAX_MODEL_CHARS)
        + 1 + varint_size(2**31 - 1)  # available_tokens: an int32 >= 0
        + bounds.MAX_MESSAGES * length_delimited_size(message)
        + length_delimited_size(options)
        + length_delimited_size(bounds.MAX_PRINCIPAL_CONTEXT_BYTES)
        + bounds.MAX_TOOL_SCHEMAS * per_schema_framing + bounds.MAX_TOOL_SCHEMAS_TOTAL_CHARS * UTF8_MAX_BYTES
    )


def _largest_search() -> int:
    return (
        3 * string_size(bounds.MAX_ID_CHARS)  # agent_id, org_id, session_id
        + string_size(bounds.MAX_QUERY_CHARS)
        + 1 + varint_size(bounds.MAX_SEARCH_LIMIT) + 5  # limit, min_similarity
        + bounds.MAX_SEARCH_CATEGORIES * string_size(bounds.MAX_CATEGORY_CHARS)
        + bounds.MAX_SEARCH_TAGS * string_size(bounds.MAX_TAG_CHARS)
    )


def _largest_feedback() -> int:
    return (
        bounds.MAX_FEEDBACK_IDS * string_size(bounds.MAX_ID_CHARS)
        + 3 * string_size(bounds.MAX_ID_CHARS)  # session_id, trace_id, org_id
        + string_size(bounds.MAX_FEEDBACK_CHARS)
    )


LARGEST_ASSEMBLE_REQUEST_BYTES = _largest_assemble()
LARGEST_SEARCH_REQUEST_BYTES = _largest_search()
LARGEST_FEEDBACK_REQUEST_BYTES = _largest_feedback()
LARGEST_VALID_REQUEST_BYTES = max(LARGEST_ASSEMBLE_REQUEST_BYTES, LARGEST_SEARCH_REQUEST_BYTES,
                                  LARGEST_FEEDBACK_REQUEST_BYTES)
MAX_RECEIVE_BYTES = LARGEST_VALID_REQUEST_BYTES + RECEIVE_MARGIN_BYTES


@attrs.frozen
class RequestShape:
    """What a request type may hold at its top level: the bound of each repeated field, by number."""

    message_type: Any  # a generated message class
    repeated: Mapping[int, tuple[str, int]]  # field number -> (field name, most items)
    max_fields: int

    @classmethod
    def of(cls, message_type: Any, **repeated_bounds: int) -> RequestShape:
        fields = message_type.DESCRIPTOR.fields_by_name
        repeated = {fields[name].number: (name, limit) for name, limit in repeated_bounds.items()}
        singular = len(fields) - len(repeated)
        return cls(message_type, repeated, singular + sum(repeated_bounds.values()) + EXTRA_FIELDS)

    @property
    def full_name(self) -> str:
        return str(self.message_type.DESCRIPTOR.full_name)


ASSEMBLE_SHAPE = RequestShape.of(pb.AssembleContextRequest, recent_messages=bounds.MAX_MESSAGES,
                                 tool_schemas=bounds.MAX_TOOL_SCHEMAS)
SEARCH_SHAPE = RequestShape.of(pb.SearchMemoriesRequest, categories=bounds.MAX_SEARCH_CATEGORIES,
                               tags=bounds.MAX_SEARCH_TAGS)
FEEDBACK_SHAPE = RequestShape.of(pb.RecordMemoryFeedbackRequest, memory_ids=bounds.MAX_FEEDBACK_IDS)


class WireFormatError(Exception):
    """The bytes are not protobuf wire format (the reason is the message)."""


def decode(raw: bytes, shape: RequestShape) -> Any:
    """The request message, its repeated fields within their bounds (checked on the bytes first
    when the body is ``SHAPE_WALK_MIN_BYTES`` or more).

    Raises:
        InvalidRequestError: a repeated field over its bound (named), too many top-level fields, or
            bytes that are not a valid message (field ``request``).
    """
    if len(raw) >= SHAPE_WALK_MIN_BYTES:
        try:
            check_shape(raw, shape)
        except WireFormatError as exc:
            raise _undecodable(shape, str(exc)) from None
    try:
        message = shape.message_type.FromString(raw)
    except DecodeError as exc:
        reason = str(exc).rpartition(": ")[2] or "not protobuf wire format"
        raise _undecodable(shape, reason) from None
    for name, limit in shape.repeated.values():
        if len(getattr(message, name)) > limit:
            raise _too_many(name, limit)
    return message


def _too_many(name: str, limit: int) -> InvalidRequestError:
    return InvalidRequestError(name, f"{name} exceeds {limit} items")


def _undecodable(shape: RequestShape, reason: str) -> InvalidRequestError:
    return InvalidRequestError(REQUEST_FIELD, f"{REQUEST_FIELD}: the bytes are not a valid {shape.full_name} ({reason})")


def check_shape(raw: bytes, shape: RequestShape) -> None:
    """Walk the fields of ``raw`` (tags and lengths only) and check the shape's bounds.

    Groups (wire types 3 and 4, unused by proto3 but legal as unknown fields) are walked into,
    and their fields count towards ``max_fields``.

    Raises:
        InvalidRequestError: a bound was exceeded.
        WireFormatError: the bytes are not protobuf wire format.
    """
    counts = dict.fromkeys(shape.repeated, 0)
    fields = depth = position = 0
    end = len(raw)
    while position < end:
        key, position = _varint(raw, position)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireFormatError(f"field number 0 at byte {position}")
        fields += 1
        if fields > shape.max_fields:
            raise InvalidRequestError(REQUEST_FIELD, (
                f"{REQUEST_FIELD}: more than {shape.max_fields} fields; a valid {shape.full_name} has fewer"))
        if wire_type == 0:
            _, position = _varint(raw, position)
        elif wire_type == 1:
            position += 8
        elif wire_type == 2:
            length, position = _varint(raw, position)
            position += length
        elif wire_type == 5:
            position += 4
        elif wire_type == 3:
            depth += 1
        elif wire_type == 4:
            if depth == 0:
                raise WireFormatError(f"unmatched end of group at byte {position}")
            depth -= 1
        else:
            raise WireFormatError(f"wire type {wire_type} at byte {position}")
        if position > end:
            raise WireFormatError("a field runs past the end of the message")
        if depth == 0 and number in counts:
            counts[number] += 1
            name, limit = shape.repeated[number]
            if counts[number] > limit:  # stop counting here: the walk costs at most max_fields steps
                raise _too_many(name, limit)
    if depth:
        raise WireFormatError("a group is not closed")


def _varint(raw: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while position < len(raw):
        byte = raw[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift >= 64:
            raise WireFormatError(f"a varint longer than 10 bytes at byte {position}")
    raise WireFormatError("a varint runs past the end of the message")
