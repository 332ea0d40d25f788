"""How much of a request the HTTP edge reads: body sizes and element counts from the validation bounds.

Every bound comes from ``domain.usecases.validation`` (the same numbers the use cases check and
the gRPC edge sizes its receive limit from, ``grpc_api.wire``); nothing here is a guess.

**Body limit.** A route's limit is the size of the largest valid request body plus a margin,
computed field by field from the generated message's descriptor (``contracts/ibex/context/v1``):

- every string at its character bound, each character in the longest form JSON has for it, 6
  bytes: a ``\\uXXXX`` escape, which every encoder writes for control characters and an
  ``ensure_ascii`` encoder (Python's ``json.dumps`` default) for every non-ASCII character;
- every number or boolean in 64 bytes (a double's exact decimal expansion fits), principal_context
  as ``null`` (any other value is refused);
- every field under its longer name, with quotes, colon and comma; brackets and braces;
- plus ``MARGIN_BYTES`` (64 KiB) for whitespace and fields a newer client may add.

For AssembleContextRequest, by far the largest:

    recent_messages  100 x (64 + 32,768 characters) x 6 bytes + framing    19,701,821
    tool_schemas     524,288 characters (all schemas) x 6 + 64 x 3 framing  3,145,938
    query 8,192 chars, model 256, 7 ids x 256, numbers, names, braces          62,284
    margin                                                                     65,536
    ----------------------------------------------------------------------------------
                                                                           22,975,579 bytes (21.9 MiB)

SearchMemoriesRequest's limit is 175,068 bytes and RecordMemoryFeedbackRequest's 224,310.
A character outside the Basic Multilingual Plane counts once against a bound but is 12 bytes as
an escaped surrogate pair: a body made mostly of those can exceed the limit; sent as UTF-8 (4
bytes) it fits. ``tests/unit/entrypoints/test_http_body.py`` builds the largest valid bodies and
checks them against these figures.

**Element counts.** ``REPEATED_BOUNDS`` caps each repeated field at its validation bound; the body
decoder refuses the first element past it while reading (``body_json``), with the validation's
field name. ``MAX_STRING_CHARS``, the longest string any field allows, caps every string the
same way; the field's own, shorter bound is the validation's to check.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from contracts.ibex.context.v1 import context_pb2 as pb
from domain.usecases import validation as bounds
from entrypoints.http_api.proto_json import refusal

ESCAPED_CHAR_BYTES = 6
NUMBER_BYTES = 64
MARGIN_BYTES = 64 * 1024
_ASSEMBLE, _SEARCH, _FEEDBACK = (pb.AssembleContextRequest.DESCRIPTOR, pb.SearchMemoriesRequest.DESCRIPTOR,
                                 pb.RecordMemoryFeedbackRequest.DESCRIPTOR)

# the character bound of every string field, by message and proto field name
STRING_BOUNDS: Mapping[str, Mapping[str, int]] = {
    _ASSEMBLE.name: {
        **dict.fromkeys(("agent_id", "org_id", "session_id", "directive_version_id", "request_id", "trace_id",
                         "span_id"), bounds.MAX_ID_CHARS),
        "query": bounds.MAX_QUERY_CHARS, "model": bounds.MAX_MODEL_CHARS,
        "tool_schemas": bounds.MAX_TOOL_SCHEMA_CHARS,
    },
    pb.Message.DESCRIPTOR.name: {"role": bounds.MAX_ROLE_CHARS, "content": bounds.MAX_CONTENT_CHARS},
    _SEARCH.name: {
        **dict.fromkeys(("agent_id", "org_id", "session_id"), bounds.MAX_ID_CHARS),
        "query": bounds.MAX_QUERY_CHARS, "categories": bounds.MAX_CATEGORY_CHARS, "tags": bounds.MAX_TAG_CHARS,
    },
    _FEEDBACK.name: {
        **dict.fromkeys(("memory_ids", "session_id", "trace_id", "org_id"), bounds.MAX_ID_CHARS),
        "feedback": bounds.MAX_FEEDBACK_CHARS,
    },
}
# the most items of every repeated field of a request
REPEATED_BOUNDS: Mapping[str, Mapping[str, int]] = {
    _ASSEMBLE.name: {"recent_messages": bounds.MAX_MESSAGES, "tool_schemas": bounds.MAX_TOOL_SCHEMAS},
    _SEARCH.name: {"categories": bounds.MAX_SEARCH_CATEGORIES, "tags": bounds.MAX_SEARCH_TAGS},
    _FEEDBACK.name: {"memory_ids": bounds.MAX_FEEDBACK_IDS},
}
# repeated string fields bounded in total as well as per item
TOTAL_CHARS_BOUNDS: Mapping[str, Mapping[str, int]] = {
    _ASSEMBLE.name: {"tool_schemas": bounds.MAX_TOOL_SCHEMAS_TOTAL_CHARS},
}
MAX_STRING_CHARS = max(limit for fields in STRING_BOUNDS.values() for limit in fields.values())


def _string_bytes(chars: int) -> int:
    return 2 + chars * ESCAPED_CHAR_BYTES


def _object_bytes(descriptor: Descriptor) -> int:
    strings = STRING_BOUNDS.get(descriptor.name, {})
    items = REPEATED_BOUNDS.get(descriptor.name, {})
    totals = TOTAL_CHARS_BOUNDS.get(descriptor.name, {})
    size = 2  # braces
    for field in descriptor.fields:
        name = max(field.name, field.json_name, key=len)
        size += len(name) + 4  # quotes, colon, comma
        if refusal(descriptor, field):
            size += len("null")
        elif field.is_repeated:
            count = items[field.name]
            size += 2 + count  # brackets, commas
            if field.message_type is not None:
                size += count * _object_bytes(field.message_type)
            elif field.type == FieldDescriptor.TYPE_STRING:
                chars = min(count * strings[field.name], totals.get(field.name, count * strings[field.name]))
                size += count * 2 + chars * ESCAPED_CHAR_BYTES
            else:
                size += count * NUMBER_BYTES
        elif field.message_type is not None:
            size += _object_bytes(field.message_type)
        elif field.type == FieldDescriptor.TYPE_STRING:
            size += _string_bytes(strings[field.name])
        else:
            size += NUMBER_BYTES
    return size


def largest_body_bytes(descriptor: Descriptor) -> int:
    """The largest valid JSON body of a request type, without the margin."""
    return _object_bytes(descriptor)


def body_limit(descriptor: Descriptor) -> int:
    """The most bytes the edge reads for a request type's body (413 beyond)."""
    return largest_body_bytes(descriptor) + MARGIN_BYTES


ASSEMBLE_BODY_LIMIT = body_limit(_ASSEMBLE)
SEARCH_BODY_LIMIT = body_limit(_SEARCH)
FEEDBACK_BODY_LIMIT = body_limit(_FEEDBACK)
