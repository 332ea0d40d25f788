"""Proto3 JSON mapping for the HTTP edge, driven by small message descriptions.

Parsing follows protobuf's JSON parser: each field is accepted under its lowerCamelCase JSON name
or its original proto name (not both); ``null`` means the default; int32 accepts a JSON integer,
an integral number or a decimal string, within the int32 range; float accepts a number, a numeric
string, or "NaN" / "Infinity" / "-Infinity", within the float32 range; bool accepts only true/false;
strings must be valid Unicode. Unknown fields and duplicate keys are rejected. Stricter than
protobuf's Python parser on purpose: a boolean is never a number, an integer string is plain
decimal (no exponent), and a field given under both of its names is refused (protobuf keeps the
last). Every error is an
``InvalidRequestError`` whose ``field`` is the proto path (``options.max_memories``,
``recent_messages[2].role``); a value or key the caller sent is echoed at most ``MAX_ECHO_CHARS``
characters long, with lone surrogates written as backslash escapes, so an error can always be
rendered as UTF-8 JSON.

``parse_message`` works on decoded JSON values: the HTTP edge decodes bodies with ``body_json``
(bounded size, depth and element counts); ``loads_object`` is the plain decoder for the CLI's
files, refusing nesting past the interpreter's recursion limit like any other malformed document.

Rendering emits every field under its JSON name (defaults included), floats as the shortest
decimal that round-trips through float32 (as protobuf prints them) and non-finite floats as strings.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping
from typing import Any

import attrs

from domain.model.errors import InvalidRequestError

STRING = "string"
INT32 = "int32"
FLOAT = "float"
BOOL = "bool"
MESSAGE = "message"

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
FLOAT32_MAX = 3.4028234663852886e38
_INTEGER_TEXT = re.compile(r"-?[0-9]+")
_MAX_INT_TEXT = 24
MAX_ECHO_CHARS = 64
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@attrs.frozen
class Field:
    name: str  # the proto field name (snake_case)
    kind: str  # STRING | INT32 | FLOAT | BOOL | MESSAGE
    repeated: bool = False
    message: MessageSpec | None = None
    refusal: str = ""  # non-empty: the field exists in the proto but any non-null value is refused

    @property
    def json_name(self) -> str:
        head, *rest = self.name.split("_")
        return head + "".join(part[:1].upper() + part[1:] for part in rest)


@attrs.frozen
class MessageSpec:
    name: str
    fields: tuple[Field, ...]

    def lookup(self) -> dict[str, Field]:
        names = {f.json_name: f for f in self.fields}
        names.update({f.name: f for f in self.fields})
        return names


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


def parse_message(data: object, spec: MessageSpec, path: str = "") -> dict[str, Any]:
    """Proto3 JSON object -> ``{proto field name: value}`` with every field present (defaults filled)."""
    if not isinstance(data, Mapping):
        where = path or spec.name
        raise InvalidRequestError(path, f"{where} must be a JSON object ({spec.name}), got {json_type(data)}")
    lookup = spec.lookup()
    values: dict[str, Any] = {f.name: _default(f) for f in spec.fields}
    seen: dict[str, str] = {}
    for key, raw in data.items():
        field = lookup.get(key)
        if field is None:
            raise unknown_field(key, spec, path)
        if field.name in seen:
            twice = f"field {field.name!r} given twice (as {seen[field.name]!r} and {key!r})"
            raise InvalidRequestError(_join(path, field.name), twice)
        seen[field.name] = key
        if raw is not None:
            values[field.name] = parse_field(raw, field, _join(path, field.name))
    return values


def unknown_field(key: str, spec: MessageSpec, path: str = "") -> InvalidRequestError:
    """The error for a key ``spec`` does not have (the key echoed safely, see the module docstring)."""
    shown = echo(key)
    return InvalidRequestError(_join(path, shown), f"unknown field {shown!r} in {spec.name}")


def echo(text: str) -> str:
    """``text`` as an error may quote it: at most MAX_ECHO_CHARS characters, lone surrogates escaped."""
    short = text if len(text) <= MAX_ECHO_CHARS else text[:MAX_ECHO_CHARS] + "..."
    return short.encode("utf-8", "backslashreplace").decode("utf-8")


def render_message(values: Mapping[str, Any], spec: MessageSpec) -> dict[str, Any]:
    """``{proto field name: value}`` (every field required) -> proto3 JSON object with JSON names."""
    missing = [f.name for f in spec.fields if f.name not in values and not f.refusal]
    if missing:
        raise KeyError(f"{spec.name}: no value for {', '.join(missing)}")
    return {f.json_name: _render_field(values[f.name], f) for f in spec.fields if not f.refusal}


def shortest_float32(value: float) -> float:
    """The shortest decimal that rounds to the same float32 as ``value`` (protobuf's float printing)."""
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        return float(value)
    single = _to_float32(value)
    for digits in range(6, 10):
        candidate = float(f"{single:.{digits}g}")
        if _to_float32(candidate) == single:
            return candidate
    return single


def parse_field(raw: object, field: Field, path: str) -> Any:
    """One non-null field value (a repeated field: the whole array) -> its Python value."""
    if field.refusal:
        raise InvalidRequestError(path, field.refusal)
    if not field.repeated:
        return parse_single(raw, field, path)
    if not isinstance(raw, list):
        raise InvalidRequestError(path, f"{path} must be a JSON array, got {json_type(raw)}")
    return tuple(parse_single(item, field, f"{path}[{index}]") for index, item in enumerate(raw))


def parse_single(raw: object, field: Field, path: str) -> Any:
    """One value of ``field`` (one element, for a repeated field) -> its Python value."""
    if raw is None:
        raise InvalidRequestError(path, f"{path} must not be null")
    if field.kind == MESSAGE:
        assert field.message is not None
        return parse_message(raw, field.message, path)
    return _SCALAR_PARSERS[field.kind](raw, path)


def _parse_string(raw: object, path: str) -> str:
    if not isinstance(raw, str):
        raise InvalidRequestError(path, f"{path} must be a string, got {json_type(raw)}")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequestError(path, f"{path} is not valid Unicode (it contains a lone surrogate)") from None
    return raw


def _parse_int32(raw: object, path: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise InvalidRequestError(path, f"{path} must be an integer, got {json_type(raw)}")
    if isinstance(raw, float) and not (math.isfinite(raw) and raw.is_integer()):
        raise InvalidRequestError(path, f"{path} must be an integer, got {raw!r}")
    if isinstance(raw, str) and not _INTEGER_TEXT.fullmatch(raw):
        raise InvalidRequestError(path, f"{path} must be an integer, got the string {echo(raw)!r}")
    if isinstance(raw, str) and len(raw) > _MAX_INT_TEXT:
        raise InvalidRequestError(path, f"{path} is outside the int32 range, got {echo(raw)}")
    value = int(raw)
    if not INT32_MIN <= value <= INT32_MAX:
        raise InvalidRequestError(path, f"{path} is outside the int32 range, got {_echo_number(value)}")
    return value


def _parse_float(raw: object, path: str) -> float:
    if isinstance(raw, str) and raw in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[raw]
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise InvalidRequestError(path, f"{path} must be a number, got {json_type(raw)}")
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequestError(path, f"{path} must be a number, got the string {echo(raw)!r}") from None
    except OverflowError:  # an integer too large for any float (a JSON number of 309+ digits)
        raise InvalidRequestError(path, f"{path} is outside the float32 range, got {_echo_number(raw)}") from None
    if math.isnan(value) or (isinstance(raw, str) and math.isinf(value)):
        raise InvalidRequestError(path, f"{path}: write non-finite numbers as \"NaN\", \"Infinity\" or \"-Infinity\"")
    if abs(value) > FLOAT32_MAX:
        raise InvalidRequestError(path, f"{path} is outside the float32 range, got {value!r}")
    return value


def _parse_bool(raw: object, path: str) -> bool:
    if not isinstance(raw, bool):
        raise InvalidRequestError(path, f"{path} must be true or false, got {json_type(raw)}")
    return raw


_SCALAR_PARSERS = {STRING: _parse_string, INT32: _parse_int32, FLOAT: _parse_float, BOOL: _parse_bool}
_SCALAR_DEFAULTS: dict[str, Any] = {STRING: "", INT32: 0, FLOAT: 0.0, BOOL: False}


def _default(field: Field) -> Any:
    if field.repeated:
        return ()
    if field.kind == MESSAGE:
        return None
    return _SCALAR_DEFAULTS[field.kind]


def _render_field(value: Any, field: Field) -> Any:
    if field.repeated:
        return [_render_single(item, field) for item in value]
    return _render_single(value, field)


def _render_single(value: Any, field: Field) -> Any:
    if field.kind == MESSAGE:
        assert field.message is not None
        return render_message(value, field.message)
    if field.kind == FLOAT:
        number = float(value)
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "Infinity" if number > 0 else "-Infinity"
        return shortest_float32(number)
    if field.kind == INT32:
        return int(value)
    if field.kind == BOOL:
        return bool(value)
    return str(value)


def _to_float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` refusing a key given twice in one JSON object."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            shown = echo(key)
            raise InvalidRequestError(shown, f"duplicate key {shown!r} in a JSON object")
        result[key] = value
    return result


def _echo_number(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_ECHO_CHARS else f"{text[:20]}... ({len(text.lstrip('-'))} digits)"


def _refuse_constant(name: str) -> None:
    raise InvalidRequestError("", f"JSON does not allow the literal {name}; write it as the string \"{name}\"")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


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
