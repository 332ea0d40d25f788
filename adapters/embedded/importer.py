"""Reading a JSONL file of memories (one JSON object per line) for ``import_jsonl``.

Line format (UTF-8; blank lines are skipped; any other field is an error, so typos surface)::

    {"org_id": "<uuid>",            required
     "agent_id": "<uuid>",          required
     "content": "<text>",           required, non-blank, <= 32768 characters
     "category": "<name>",          required, non-blank, <= 64 characters
                                    (procedural | factual | preference | behavioral | episodic;
                                     another name gets the 14-day half-life)
     "confidence": 0.9,             optional, number in [0, 1], default 1.0
     "usefulness": 0.5,             optional, number in [0, 1], default 0.5
     "tags": ["ui", "editor"],      optional, <= 64 non-blank strings of <= 128 characters
     "memory_id": "<uuid>",         optional, default a new random UUID
     "created_at": "2026-01-01T00:00:00Z",  optional, ISO-8601 with a timezone, default now
     "retrieval_count": 0,          optional, integer in [0, 2^63 - 1], default 0
     "status": "active"}            optional, "active" | "archived" (archived: never returned)

Every bad value is an EmbeddedValidationError naming the line and the field, never another
exception: a line is at most 1 MiB (the largest valid one is about 0.5 MB: 32,768 characters of
content escaped as ``\\uXXXX`` surrogate pairs, plus 64 tags of 128), nested at most
``MAX_JSON_DEPTH`` levels (checked before it is parsed; a valid line needs 2), and an integer
literal longer than 64 digits is not converted (its field names it).

Example: ``{"org_id": "4f9c...", "agent_id": "a1b2...", "content": "Prefers dark mode",
"category": "preference", "confidence": 0.9, "tags": ["ui"]}``
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from adapters.embedded.errors import EmbeddedValidationError
from adapters.embedded.records import NewMemory
from adapters.embedded.validation import OversizedInteger

REQUIRED_FIELDS = ("org_id", "agent_id", "content", "category")
OPTIONAL_FIELDS = ("confidence", "usefulness", "tags", "memory_id", "created_at", "retrieval_count", "status")
MAX_LINE_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 16
MAX_INTEGER_DIGITS = 64
# A JSON string, escapes included; the closing quote is optional so that an unterminated string
# is one match to the end of the line (linear: no retry at every later quote).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}:]', re.DOTALL)
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_OPENER = {ord("]"): ord("["), ord("}"): ord("{")}
_SHOWN_FIELD_CHARS = 64


def read_jsonl(path: str | os.PathLike[str]) -> tuple[list[NewMemory], list[int]]:
    """Every memory of the file and the line it came from.

    Raises:
        EmbeddedValidationError: the file cannot be read, or a line is invalid (``line`` set).
    """
    try:
        raw_lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise EmbeddedValidationError("path", f"cannot read {os.fspath(path)!r}: {exc.strerror or exc}") from exc
    memories: list[NewMemory] = []
    lines: list[int] = []
    first_line_of: dict[str, int] = {}
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            memory = parse_line(raw)
        except EmbeddedValidationError as exc:
            raise exc.at_line(number) from None
        earlier = first_line_of.setdefault(memory.memory_id, number)
        if earlier != number:  # found before anything is written (an id already stored: at insert)
            raise EmbeddedValidationError(
                "memory_id", f"a memory with id {memory.memory_id} already exists on line {earlier}", line=number)
        memories.append(memory)
        lines.append(number)
    return memories, lines


def parse_line(raw: bytes) -> NewMemory:
    """One JSONL line as a validated memory (errors name the field, not yet the line)."""
    if len(raw) > MAX_LINE_BYTES:
        raise EmbeddedValidationError("line", f"is {len(raw)} bytes, the maximum is {MAX_LINE_BYTES}")
    deep = too_deep(raw, MAX_JSON_DEPTH) and deep_field(raw, MAX_JSON_DEPTH)
    if deep:
        raise EmbeddedValidationError(deep, f"is JSON nested deeper than {MAX_JSON_DEPTH} levels "
                                            "(a memory line needs 2)")
    try:
        data = json.loads(raw.decode("utf-8"), parse_int=_integer)
    except UnicodeDecodeError:
        raise EmbeddedValidationError("line", "is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise EmbeddedValidationError("line", f"is not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:  # not reached past too_deep(); kept so that no parse failure is a traceback
        raise EmbeddedValidationError("line", "is JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise EmbeddedValidationError("line", f"must be a JSON object, got {type(data).__name__}")
    for field in REQUIRED_FIELDS:
        if field not in data:
            raise EmbeddedValidationError(field, "is required")
    unknown = sorted(set(data) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        allowed = ", ".join(REQUIRED_FIELDS + OPTIONAL_FIELDS)
        raise EmbeddedValidationError(_shown_field(unknown[0]), f"unknown field (allowed: {allowed})")
    return NewMemory.create(**data)


def too_deep(raw: bytes, limit: int) -> bool:
    """True when the JSON text ``raw`` may nest deeper than ``limit`` levels (cheap: C speed, no parse).

    Strings are cut out, then the innermost bracket pairs are removed ``limit`` times over (one
    pass removes at least one level): anything left means deeper than ``limit``, or unbalanced.
    False is certain (at most ``2 * limit`` levels); True is settled by ``deep_field``.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"").replace(b"{}", b"")
    return bool(brackets)


def deep_field(raw: bytes, limit: int) -> str | None:
    """The top-level field whose value nests past ``limit`` levels ("line" when outside any), or None.

    An exact token scan, run only when ``too_deep`` said yes (the first bad line ends an import).
    """
    open_brackets, pending, field = bytearray(), b"", b""
    for match in _JSON_TOKEN.finditer(raw):
        token = match.group()
        depth = len(open_brackets)
        if token in (b"[", b"{"):
            if depth >= limit:
                return _field_name(field) if field else "line"
            open_brackets += token
        elif token in (b"]", b"}"):
            if not open_brackets or open_brackets[-1] != _OPENER[token[0]]:
                return None  # not JSON: the parser stops here, no deeper than this, and says why
            del open_brackets[-1]
        elif token == b":":
            field = pending if depth == 1 else field
        elif depth == 1:
            pending = token
    return None


def _field_name(token: bytes) -> str:
    try:
        name = json.loads(token.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return "line"
    return _shown_field(name) if isinstance(name, str) else "line"


def _integer(literal: str) -> int | OversizedInteger:
    """A JSON integer literal; a very long one is not converted (no valid field needs it)."""
    digits = len(literal.lstrip("-"))
    return OversizedInteger(digits) if digits > MAX_INTEGER_DIGITS else int(literal)


def _shown_field(name: str) -> str:
    """An unknown field's name for the error: printable and short."""
    if name.isprintable() and len(name) <= _SHOWN_FIELD_CHARS:
        return name
    return repr(name[:_SHOWN_FIELD_CHARS]) + ("..." if len(name) > _SHOWN_FIELD_CHARS else "")
