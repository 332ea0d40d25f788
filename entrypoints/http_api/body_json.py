"""Request bodies decoded at a bounded cost: the shape is checked in C, before any Python tree exists.

``json.loads`` (and so ``json_format.Parse``) builds the whole document before a single field can be
checked: 16 MB of ``{"x": [{}, {}, ...]}`` were five million dicts (1-2 s of a blocked loop, 400 MB)
before the unknown field was noticed, 1,100 nested arrays a RecursionError.
``BodyDecoder(message_class).decode(body)`` decodes with msgspec against a *gate* type generated
from the message's descriptor instead:

- every JSON object is a Struct that forbids unknown fields: an unknown key is refused when it is
  read, before its value is;
- every repeated field is an ``array_like`` Struct with as many optional slots as the validation
  allows items (``limits.REPEATED_BOUNDS``): the first element past the bound is refused when it
  is read, so no list longer than a valid one is ever built;
- a scalar field accepts only a JSON scalar (a container there is refused at its first byte) and a
  string of at most ``limits.MAX_STRING_CHARS`` characters; a refused field (principal_context)
  only an empty object;
- so the parser's depth limit is the messages' own: nothing nests deeper than ``max_depth``
  (3 for AssembleContextRequest: request -> recent_messages -> message), whatever the body;
  msgspec never recurses past it and never skips a value.

A body that fits the gate is bounded in every dimension by the largest valid request. Then:

- duplicate keys: msgspec keeps the last value, protobuf's JSON parser refuses the document; the
  keys are checked on a skeleton of the body (long strings emptied, whitespace dropped: a few
  kilobytes), with ``json.loads`` and a pairs hook;
- ``BodyDecoder.read(body)`` gives the decoded value, plain dicts and lists with the keys as sent,
  to ``proto_json.parse``: ``json_format`` builds the message (int32 from strings, the float32
  range, nulls) and the edge's own rules are checked (a field under both of its names).

Every refusal is an ``InvalidRequestError`` naming the proto field path with proto_json's
messages (``recent_messages[3].role must be a string, got an array``). A body that is not JSON
at all is named as ``the request body``; below ``PLAIN_FALLBACK_BYTES`` it is decoded again with
``json.loads`` to name the field (a lone surrogate in ``query``) and quote line and column.

For a bounded interpreter hold per step (large bodies are decoded on a worker thread, and the
event loop needs the interpreter between steps), the gate skips the elements of the top-level
repeated fields (``msgspec.Raw``, nothing built) and each element is decoded on its own after it;
the duplicate check reads the body in 1 MiB windows. An element nested past the interpreter's
recursion limit makes the skip fail: a body below ``PRECISE_FALLBACK_BYTES`` is then decoded with
every element typed, to name it; a larger one is refused as nested too deeply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from domain.model.errors import InvalidRequestError
from entrypoints.http_api import limits, proto_json
from entrypoints.http_api.errors import echo
from entrypoints.http_api.proto_json import fields_by_key, json_type, loads_object, refusal, unique_keys, unknown_field

WHAT = "the request body"
PRECISE_FALLBACK_BYTES = 256 * 1024  # a refused body this small is decoded again to name the field (~1 ms)
PLAIN_FALLBACK_BYTES = 64 * 1024  # and one this small that is not JSON, with json.loads, for line and column
_SKELETON_KEEP_BYTES = 256  # strings up to this long stay in the skeleton (every key is shorter)
_WINDOW = 1 << 20
_WHITESPACE = b" \t\r\n"
_UNSET = msgspec.UNSET
_GOT = {"int": 0, "float": 0.5, "bool": False, "str": "", "null": None, "array": [], "object": {}}
_PATH = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
_ERROR = re.compile(r"(?P<what>.*?)(?: - at `(?P<path>\$[^`]*)`)?", re.DOTALL)
_EXPECTED = re.compile(r"Expected `(?P<expected>[^`]*)`(?P<rest>.*?)(?:, got `(?P<got>\w+)`)?", re.DOTALL)
_UNKNOWN = "Object contains unknown field `"
_NOTHING = Annotated[int, msgspec.Meta(ge=1, le=0)]  # no JSON value fits: refused at its first byte
_SCALAR = bool | int | float | Annotated[str, msgspec.Meta(max_length=limits.MAX_STRING_CHARS)] | None


class _Refused(msgspec.Struct, forbid_unknown_fields=True):
    """A field any non-null value of which is refused: only ``{}`` reaches the refusal message."""


class BodyDecoder:
    """Decodes one request type's JSON body: ``decode`` to plain values, ``read`` to the message."""

    def __init__(self, message_class: type[Message],
                 repeated_bounds: Mapping[str, Mapping[str, int]] = limits.REPEATED_BOUNDS) -> None:
        self.message_class = message_class
        self.descriptor: Descriptor = message_class.DESCRIPTOR
        self._bounds = repeated_bounds
        self._elements: dict[str, Any] = {}  # JSON key (as sent) of a top-level repeated field -> element decoder
        self._typed, self.max_depth = self._gate_type(self.descriptor)  # elements typed too: for naming a deep one
        self._decoder = msgspec.json.Decoder(self._gate_type(self.descriptor, top=True)[0])
        self._precise = msgspec.json.Decoder(self._typed)

    def read(self, body: bytes | bytearray | memoryview) -> Message:
        """The request message (``proto_json.parse`` of ``decode``); InvalidRequestError naming the field."""
        return proto_json.parse(self.decode(body), self.message_class)

    def decode(self, body: bytes | bytearray | memoryview) -> dict[str, Any]:
        """The body as ``{key as sent: value}``; InvalidRequestError naming the field otherwise.

        The top-level repeated fields' elements are skipped (not built) by the gate and decoded one
        by one after it, so no single step works on more than the top level or one element: the
        interpreter is released between steps (this runs on a worker thread for large bodies).
        """
        try:
            gated = self._decoder.decode(body)
        except msgspec.ValidationError as exc:
            raise self._refusal(str(exc)) from None
        except msgspec.DecodeError as exc:
            raise self._malformed(body, str(exc)) from None
        except RecursionError:  # an element nested past the interpreter's limit, skipped by the gate
            raise self._too_deep(body) from None
        plain = _plain(gated)
        for key, decoder in self._elements.items():
            if plain.get(key) is not None:
                plain[key] = [self._element(decoder, item, f"$.{key}[{index}]") for index, item in enumerate(plain[key])]
        _check_unique_keys(body)
        return plain

    def _element(self, decoder: Any, raw: msgspec.Raw, where: str) -> Any:
        try:
            return _plain(decoder.decode(raw))
        except msgspec.ValidationError as exc:
            raise self._refusal(_relocated(str(exc), where)) from None
        except msgspec.DecodeError as exc:  # a string the skip let through (bad UTF-8)
            raise InvalidRequestError("", f"{WHAT} is not valid JSON: {exc}") from None

    def _too_deep(self, body: bytes | bytearray | memoryview) -> InvalidRequestError:
        if len(body) <= PRECISE_FALLBACK_BYTES:  # decode again with every element typed: refused at the right byte
            try:
                self._precise.decode(body)
            except msgspec.ValidationError as exc:
                return self._refusal(str(exc))
            except (msgspec.DecodeError, RecursionError):
                pass
        return InvalidRequestError("", f"{WHAT} nests arrays or objects deeper than {self.descriptor.name} allows "
                                   f"({self.max_depth} levels)")

    # ------------------------------------------------------------ the gate type

    def _gate_type(self, descriptor: Descriptor, top: bool = False) -> tuple[Any, int]:
        fields: list[tuple[str, Any, Any]] = []
        rename: dict[str, str] = {}
        depth = 1
        for field in descriptor.fields:
            kind, field_depth = self._field_type(descriptor, field, skip_elements=top)
            if top and field.is_repeated:
                element = msgspec.json.Decoder(self._element_type(field)[0])
                self._elements.update(dict.fromkeys((field.name, field.json_name), element))
            depth = max(depth, 1 + field_depth)
            for key in dict.fromkeys((field.name, field.json_name)):
                attribute = key if key == field.name else f"{field.name}__json"
                fields.append((attribute, kind, _UNSET))
                rename[attribute] = key
        gate = msgspec.defstruct(f"{descriptor.name}Gate", fields, rename=rename, forbid_unknown_fields=True)
        return gate, depth

    def _element_type(self, field: FieldDescriptor) -> tuple[Any, int]:
        if field.message_type is not None:
            element, depth = self._gate_type(field.message_type)
            return element | None, depth
        return _SCALAR, 0

    def _field_type(self, descriptor: Descriptor, field: FieldDescriptor,
                    skip_elements: bool = False) -> tuple[Any, int]:
        if refusal(descriptor, field):
            return _Refused | None, 1
        element, depth = self._element_type(field)
        if not field.is_repeated:
            return element, depth
        if skip_elements:
            element = msgspec.Raw
        most = self._bounds[descriptor.name][field.name]
        slots = [(f"item{index}", element, _UNSET) for index in range(most)]
        slots.append((f"item{most}", _NOTHING, _UNSET))  # an element past the bound fails here, with its path
        array = msgspec.defstruct(f"{descriptor.name}_{field.name}", slots, array_like=True, forbid_unknown_fields=True)
        return array | None, depth + 1

    # ------------------------------------------------------------ errors

    def _refusal(self, text: str) -> InvalidRequestError:
        """A msgspec ValidationError in proto_json's words, naming the proto path."""
        parts = _ERROR.fullmatch(text)
        assert parts is not None  # the pattern matches any text
        what, located = parts["what"], _Location.find(self.descriptor, parts["path"] or "$")
        if located is None:
            return InvalidRequestError("", f"{WHAT} does not fit {self.descriptor.name}: {echo(text)}")
        if located.field is not None and located.owner is not None and (reason := refusal(located.owner, located.field)):
            return InvalidRequestError(located.path, reason)
        if located.element and located.owner is not None and located.field is not None:
            most = self._bounds[located.owner.name][located.field.name]
            if located.index >= most:
                field_path = located.path.rpartition("[")[0]
                return InvalidRequestError(field_path, f"{field_path} exceeds {most} items")
        if what.startswith(_UNKNOWN) and what.endswith("`") and located.descriptor is not None:
            return unknown_field(what[len(_UNKNOWN):-1], located.descriptor, located.path)
        expected = _EXPECTED.fullmatch(what)
        if expected is None:  # "Integer value out of range", "Number out of range": no float holds it
            return located.out_of_range()
        if expected["got"] is not None:
            return located.error(_GOT[expected["got"]])
        rest = expected["rest"]
        if "length <=" in rest:
            return InvalidRequestError(located.path, f"{located.path} exceeds {_number(rest)} characters")
        return InvalidRequestError(located.path,
                                   f"{located.path or WHAT} does not fit {self.descriptor.name}: {echo(text)}")

    def _malformed(self, body: bytes | bytearray | memoryview, text: str) -> InvalidRequestError:
        if len(body) <= PRECISE_FALLBACK_BYTES:
            try:  # every element typed: a wrong value before the broken part is named, as read
                self._precise.decode(body)
            except msgspec.ValidationError as exc:
                return self._refusal(str(exc))
            except (msgspec.DecodeError, RecursionError):
                pass
        if len(body) <= PLAIN_FALLBACK_BYTES:
            try:
                proto_json.parse(loads_object(bytes(body).decode("utf-8"), WHAT), self.message_class)
            except UnicodeDecodeError:
                return InvalidRequestError("", f"{WHAT} is not valid UTF-8")
            except InvalidRequestError as exc:
                return exc
        return InvalidRequestError("", f"{WHAT} is not valid JSON: {text}")


class _Location:
    """Where in the request a msgspec path points: the proto path and what is expected there."""

    def __init__(self, path: str, descriptor: Descriptor | None, field: FieldDescriptor | None,
                 owner: Descriptor | None, index: int) -> None:
        self.path, self.descriptor, self.field, self.owner, self.index = path, descriptor, field, owner, index
        self.element = index >= 0  # the path ends at an element of a repeated field

    @classmethod
    def find(cls, root: Descriptor, where: str) -> _Location | None:
        descriptor: Descriptor | None = root  # the message the path is in (None: a scalar or an array)
        field: FieldDescriptor | None = None
        owner: Descriptor | None = None
        path, element, position, last_index = "", False, 1, -1
        for match in _PATH.finditer(where, 1):
            if match.start() != position:
                return None
            position = match.end()
            key, index = match.groups()
            if key is not None:  # into an object: a message here
                if descriptor is None:
                    return None
                owner, field = descriptor, fields_by_key(descriptor).get(key)
                if field is None:
                    return None
                path, element, last_index = proto_json.join(path, field.name), False, -1
                descriptor = field.message_type if not field.is_repeated else None
            else:  # into an array: field must be repeated and not yet indexed
                if field is None or not field.is_repeated or element:
                    return None
                path, element, last_index = f"{path}[{index}]", True, int(index)
                descriptor = field.message_type
        return cls(path, descriptor, field, owner, last_index) if position == len(where) else None

    def error(self, raw: object) -> InvalidRequestError:
        """The error proto_json gives for ``raw`` here (a value of the JSON type that was refused)."""
        if self.field is None:
            return InvalidRequestError("", f"{WHAT} must be a JSON object, got {json_type(raw)}")
        error = proto_json.type_error(self.field, raw, self.path, element=self.element)
        return error or InvalidRequestError(self.path, f"{self.path} is not valid here")  # the gate refused it: never reached

    def out_of_range(self) -> InvalidRequestError:
        """A JSON number beyond any float (1e400, 5,000 digits) where the field is."""
        if self.field is not None and proto_json.numeric(self.field) and (self.element or not self.field.is_repeated):
            return proto_json.out_of_range(self.field, self.path)
        return self.error(0)


def _relocated(text: str, where: str) -> str:
    """An element decoder's error with its path made absolute (``$.role`` at ``$.recentMessages[3]``)."""
    if " - at `$" in text:
        head, _, path = text.rpartition(" - at `$")
        return f"{head} - at `{where}{path}"
    return f"{text} - at `{where}`"


def _number(text: str) -> str:
    digits = re.search(r"\d+", text)
    return digits.group() if digits else "?"


def _plain(value: Any) -> Any:
    """A gate value as plain JSON values: dicts with the keys as sent, lists, scalars."""
    if isinstance(value, _Refused):
        return {}
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        if config.array_like:
            return [_plain(item) for item in msgspec.structs.astuple(value) if item is not _UNSET]
        names = dict(zip(value.__struct_fields__, value.__struct_encode_fields__, strict=True))
        return {names[name]: _plain(item) for name, item in msgspec.structs.asdict(value).items() if item is not _UNSET}
    return value


def _check_unique_keys(body: bytes | bytearray | memoryview) -> None:
    """Refuse a key given twice in one object. Runs after the gate: the body is well-formed JSON with
    few strings, so its skeleton (short strings kept, long ones emptied, no whitespace) is small.

    The body is read in windows of ``_WINDOW`` bytes, each step a short C call. In a window, escaped
    backslashes and escaped quotes are removed first (a window never ends inside a run of
    backslashes); every quote left then opens or closes a string (UTF-8 continuation bytes are
    never ``"`` or ``\\``).
    """
    parts: list[bytes] = []
    inside, kept, length = False, bytearray(), 0  # in a string; its first bytes; its length so far
    start, size = 0, len(body)
    while start < size:
        end = min(start + _WINDOW, size)
        while end < size and body[end - 1] == 0x5C:
            end += 1
        window = bytes(body[start:end])
        if b"\\" in window:
            window = window.replace(b"\\\\", b"").replace(b'\\"', b"")
        position = 0
        while (quote := window.find(b'"', position)) >= 0:
            if inside:
                length += quote - position
                if length <= _SKELETON_KEEP_BYTES:
                    kept += window[position:quote]
                parts.append(b'"' + bytes(kept) + b'"' if length <= _SKELETON_KEEP_BYTES else b'""')
                inside, kept, length = False, bytearray(), 0
            else:
                parts.append(window[position:quote].translate(None, _WHITESPACE))
                inside = True
            position = quote + 1
        if inside:
            length += len(window) - position
            if length <= _SKELETON_KEEP_BYTES:
                kept += window[position:]
        else:
            parts.append(window[position:].translate(None, _WHITESPACE))
        start = end
    try:
        json.loads(b"".join(parts), object_pairs_hook=unique_keys)
    except ValueError:  # the gate accepted the body, so this would be a bug here: refuse rather than guess
        raise InvalidRequestError("", f"{WHAT} is not valid JSON") from None
