"""The proto3 JSON mapping of ``ibex.context.v1`` at the HTTP edge: ``google.protobuf.json_format``
over the generated messages, with errors that name the proto field.

``parse(data, message_class)`` takes decoded JSON values (``body_json``'s bounded decoder for a
request body, ``loads_object`` for the CLI's files) and returns the message. ``json_format.ParseDict``
converts every value: int32 from a number or a decimal string, the int32 and float32 ranges,
"NaN"/"Infinity"/"-Infinity", unpaired surrogates. One walk over the objects before it (keys and
JSON types; the values are json_format's) keeps the edge's rules that protobuf's Python parser
does not have, and words every refusal:

- a key that is no field is refused naming it;
- a field given under both of its names (``orgId`` and ``org_id``) is refused: protobuf's Python
  parser keeps one of them silently (Go's protojson refuses the document, as here);
- every value has a JSON type its field takes: a string for a string, an object for a message, an
  array for a repeated field (no null element); a boolean is never a number (protobuf's Python
  parser reads ``true`` as 1.0 in a float field); an integer string is plain decimal (``"12"``,
  not ``"1e3"``, ``"1_000"`` or ``"+5"``, which Python's ``int`` would read);
- a field in ``REFUSED`` (``principal_context``: over HTTP the principal is a signed header) is
  refused with its reason.

When json_format refuses a value, the walk runs again and gives each scalar to json_format on its
own, to name the one it refused. Every error is an ``InvalidRequestError`` whose ``field`` is the
proto path (``options.max_memories``, ``recent_messages[2].role``); a key or value the caller sent
is echoed short, lone surrogates escaped (``errors.echo``). The walk follows the descriptors, so it
never nests deeper than the messages do.

``render(message)`` is ``json_format.MessageToDict`` with every field without presence printed
(defaults included) under its JSON (lowerCamelCase) name; floats print as the shortest decimal that
round-trips through float32, non-finite ones as "NaN"/"Infinity"/"-Infinity". These messages have
no int64, enum, map, oneof or well-known-type fields (``tests/unit/entrypoints/test_http_proto_json``
checks it), so those options do not arise.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from domain.model.errors import InvalidRequestError
from entrypoints.http_api.errors import MAX_ECHO_CHARS, echo

M = TypeVar("M", bound=Message)
PRINCIPAL_CONTEXT_REFUSAL = (
    "principal_context is not accepted over HTTP; send a signed proof in the X-Ibex-Principal-Proof header"
)
# fields a JSON request may not carry, by message name and proto field name, with the reason
REFUSED: Mapping[str, Mapping[str, str]] = {"AssembleContextRequest": {"principal_context": PRINCIPAL_CONTEXT_REFUSAL}}

_F = FieldDescriptor
_INTEGERS = {_F.CPPTYPE_INT32: "int32", _F.CPPTYPE_INT64: "int64", _F.CPPTYPE_UINT32: "uint32",
             _F.CPPTYPE_UINT64: "uint64"}
_NUMBERS = {_F.CPPTYPE_FLOAT: "float32", _F.CPPTYPE_DOUBLE: "float64"}
_INTEGER_TEXT = re.compile(r"-?[0-9]+")
_NON_FINITE = 'write non-finite numbers as "NaN", "Infinity" or "-Infinity"'
# what ParseDict raises for a value that does not fit its field (float(10**400) is an OverflowError)
_NOT_FITTING = (json_format.ParseError, ArithmeticError, ValueError, TypeError)


def parse(data: object, message_class: type[M]) -> M:
    """Decoded JSON values -> the message (see the module docstring); InvalidRequestError naming the field."""
    descriptor = message_class.DESCRIPTOR
    _walk(data, descriptor, "")
    message = message_class()
    try:
        json_format.ParseDict(data, message)
    except _NOT_FITTING as exc:
        _walk(data, descriptor, "", probe=True)  # raises naming the value json_format refused
        raise InvalidRequestError("", f"the request does not fit {descriptor.name}: {echo(str(exc))}") from None
    return message


def render(message: Message) -> dict[str, Any]:
    """The message as proto3 JSON values: every field without presence, under its JSON name."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


@functools.cache
def fields_by_key(descriptor: Descriptor) -> Mapping[str, FieldDescriptor]:
    """Each field under both of its names: its JSON name and its proto name."""
    keys = {field.json_name: field for field in descriptor.fields}
    keys.update({field.name: field for field in descriptor.fields})
    return keys


def refusal(descriptor: Descriptor, field: FieldDescriptor) -> str:
    """Why ``field`` is refused in a JSON request ("" when it is not)."""
    return REFUSED.get(descriptor.name, {}).get(field.name, "")


def type_error(field: FieldDescriptor, raw: object, path: str, *, element: bool = False) -> InvalidRequestError | None:
    """The error for a JSON value of a type ``field`` does not take (``element``: one item of a
    repeated field); None when it takes that type (whether the value fits is json_format's to say)."""
    if field.is_repeated and not element:
        return None if isinstance(raw, list) else InvalidRequestError(
            path, f"{path} must be a JSON array, got {json_type(raw)}")
    if raw is None:
        return InvalidRequestError(path, f"{path} must not be null") if element else None
    if field.message_type is not None:
        return None if isinstance(raw, dict) else InvalidRequestError(
            path, f"{path} must be a JSON object ({field.message_type.name}), got {json_type(raw)}")
    kind = field.cpp_type
    if kind == _F.CPPTYPE_STRING and not isinstance(raw, str):
        return InvalidRequestError(path, f"{path} must be a string, got {json_type(raw)}")
    if kind == _F.CPPTYPE_BOOL and not isinstance(raw, bool):
        return InvalidRequestError(path, f"{path} must be true or false, got {json_type(raw)}")
    if kind in _INTEGERS and isinstance(raw, str) and not _INTEGER_TEXT.fullmatch(raw):
        return InvalidRequestError(path, f"{path} must be an integer, got the string {echo(raw)!r}")
    if kind in _INTEGERS and (isinstance(raw, bool) or not isinstance(raw, int | float | str)):
        return InvalidRequestError(path, f"{path} must be an integer, got {json_type(raw)}")
    if kind in _NUMBERS and (isinstance(raw, bool) or not isinstance(raw, int | float | str)):
        return InvalidRequestError(path, f"{path} must be a number, got {json_type(raw)}")
    return None


def numeric(field: FieldDescriptor) -> bool:
    """An integer or floating-point field."""
    return field.cpp_type in _INTEGERS or field.cpp_type in _NUMBERS


def out_of_range(field: FieldDescriptor, path: str, raw: object = None) -> InvalidRequestError:
    """A number beyond what ``field`` holds (``raw`` quoted when known)."""
    kind = _INTEGERS.get(field.cpp_type) or _NUMBERS[field.cpp_type]
    got = "" if raw is None else f", got {_echo_number(raw)}"
    return InvalidRequestError(path, f"{path} is outside the {kind} range{got}")


def unknown_field(key: str, descriptor: Descriptor, path: str = "") -> InvalidRequestError:
    """The error for a key ``descriptor`` has no field for (the key echoed safely)."""
    shown = echo(key)
    return InvalidRequestError(join(path, shown), f"unknown field {shown!r} in {descriptor.name}")


def loads_object(text: str | bytes, what: str) -> dict[str, Any]:
    """Decode a JSON document that must be an object; duplicate keys and NaN literals are refused."""
    try:
        data = json.loads(text, object_pairs_hook=unique_keys, parse_constant=_refuse_constant)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, integers beyond the digit limit
        raise InvalidRequestError("", f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidRequestError("", f"{what} is not valid JSON: it nests arrays and objects too deeply") from None
    if not isinstance(data, dict):
        raise InvalidRequestError("", f"{what} must be a JSON object, got {json_type(data)}")
    return data


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` refusing a key given twice in one JSON object."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            shown = echo(key)
            raise InvalidRequestError(shown, f"duplicate key {shown!r} in a JSON object")
        result[key] = value
    return result


def json_type(value: object) -> str:
    """A JSON value's type as error messages name it ("an array", "a number")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    return "an object"


def join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# ------------------------------------------------------------------ the walk


@attrs.frozen
class _Key:
    """One key of a message's JSON object, as the walk needs it (read once per descriptor)."""

    field: FieldDescriptor
    name: str
    repeated: bool
    message: Descriptor | None
    accepts: Callable[[object], bool]  # the JSON types ``type_error`` takes, by exact type (the fast path)
    refusal: str


_ACCEPTS: dict[int, Callable[[object], bool]] = {
    _F.CPPTYPE_STRING: lambda raw: type(raw) is str,
    _F.CPPTYPE_BOOL: lambda raw: raw is True or raw is False,
    **dict.fromkeys(_INTEGERS, lambda raw: type(raw) in (int, float) or (
        type(raw) is str and _INTEGER_TEXT.fullmatch(raw) is not None)),  # type: ignore[arg-type]
    **dict.fromkeys(_NUMBERS, lambda raw: type(raw) in (int, float, str)),
}


@functools.cache
def _keys(descriptor: Descriptor) -> Mapping[str, _Key]:
    return {key: _Key(field, field.name, field.is_repeated, field.message_type,
                      _ACCEPTS.get(field.cpp_type, lambda raw: True), refusal(descriptor, field))
            for key, field in fields_by_key(descriptor).items()}


def _walk(data: object, descriptor: Descriptor, path: str, probe: bool = False) -> None:
    if not isinstance(data, dict):
        where = path or descriptor.name
        raise InvalidRequestError(path, f"{where} must be a JSON object ({descriptor.name}), got {json_type(data)}")
    keys = _keys(descriptor)
    seen: dict[str, str] = {}
    for key, raw in data.items():
        entry = keys.get(key)
        if entry is None:
            raise unknown_field(key, descriptor, path)
        if entry.name in seen:
            raise InvalidRequestError(join(path, entry.name),
                                      f"field {entry.name!r} given twice (as {seen[entry.name]!r} and {key!r})")
        seen[entry.name] = key
        if raw is None:  # the default
            continue
        if entry.refusal:
            raise InvalidRequestError(join(path, entry.name), entry.refusal)
        if not entry.repeated:
            _value(descriptor, entry, raw, path, -1, probe)
            continue
        if type(raw) is not list and (error := type_error(entry.field, raw, join(path, entry.name))):
            raise error
        for index, item in enumerate(raw):  # type: ignore[arg-type]
            _value(descriptor, entry, item, path, index, probe)


def _value(owner: Descriptor, entry: _Key, raw: object, path: str, index: int, probe: bool) -> None:
    """One value (``index`` >= 0: one element of a repeated field) of ``entry`` in the object at ``path``."""
    if entry.message is not None:
        if isinstance(raw, dict):
            _walk(raw, entry.message, _where(path, entry.name, index), probe)
            return
    elif raw is not None and entry.accepts(raw):
        if probe:
            _probe(owner, entry, raw, _where(path, entry.name, index))
        return
    where = _where(path, entry.name, index)
    if error := type_error(entry.field, raw, where, element=index >= 0):
        raise error
    if probe:  # a subclass of a JSON type (the fast path checks exact types)
        _probe(owner, entry, raw, where)


def _probe(owner: Descriptor, entry: _Key, raw: object, path: str) -> None:
    """Give json_format this one value on its own; raise, worded, if it refuses it."""
    try:
        json_format.ParseDict({entry.name: [raw] if entry.repeated else raw}, GetMessageClass(owner)())
    except _NOT_FITTING as exc:
        raise _value_error(entry.field, raw, path, exc) from None


def _where(path: str, name: str, index: int) -> str:
    where = join(path, name)
    return where if index < 0 else f"{where}[{index}]"


def _value_error(field: FieldDescriptor, raw: Any, path: str, exc: Exception) -> InvalidRequestError:
    """Words json_format's refusal of a value whose JSON type the field takes."""
    kind = field.cpp_type
    if kind == _F.CPPTYPE_STRING and not _is_unicode(raw):
        return InvalidRequestError(path, f"{path} is not valid Unicode (it contains a lone surrogate)")
    if kind in _INTEGERS:
        if isinstance(raw, float) and not raw.is_integer():
            return InvalidRequestError(path, f"{path} must be an integer, got {raw!r}")
        return out_of_range(field, path, raw)
    if kind in _NUMBERS:
        if isinstance(raw, str):
            try:
                float(raw)
            except ValueError:
                return InvalidRequestError(path, f"{path} must be a number, got the string {echo(raw)!r}")
            return InvalidRequestError(path, f"{path}: {_NON_FINITE}")
        if isinstance(raw, float) and math.isnan(raw):
            return InvalidRequestError(path, f"{path}: {_NON_FINITE}")
        return out_of_range(field, path, raw)
    while exc.__cause__ is not None:  # json_format's own words, without its wrapping
        exc = exc.__cause__  # type: ignore[assignment]
    return InvalidRequestError(path, f"{path}: {echo(str(exc))}")


def _is_unicode(text: object) -> bool:
    try:
        str(text).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _echo_number(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_ECHO_CHARS else f"{text[:20]}... ({len(text.lstrip('-'))} digits)"


def _refuse_constant(name: str) -> None:
    raise InvalidRequestError("", f"JSON does not allow the literal {name}; write it as the string \"{name}\"")
