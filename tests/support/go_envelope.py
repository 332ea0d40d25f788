"""Directive envelopes byte-for-byte as the Go proxy's ``encoding/json`` writes them.

The proxy marshals ``struct{V int `json:"v"`; Content string `json:"content"`; InjectionMode string
`json:"injection_mode"`; VersionID *uuid.UUID `json:"version_id,omitempty"`}``: compact, fields in
declaration order, ``version_id`` omitted when nil. Strings follow Go >= 1.22 ``encoding/json``:
``"`` and ``\\`` backslash-escaped; ``\\b \\f \\n \\r \\t`` short escapes; other bytes below 0x20 and
the HTML characters ``< > &`` as ``\\u00XX`` with lowercase hex; U+2028/U+2029 as ``\\u2028``/``\\u2029``;
everything else (DEL, non-ASCII) raw UTF-8.
"""

from __future__ import annotations

import uuid

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_HTML_UNSAFE = frozenset("<>&")
_LINE_SEPARATORS = frozenset("\u2028\u2029")


def go_json_string(text: str) -> bytes:
    """One JSON string literal as Go's ``encoding/json`` (HTML escaping on) encodes ``text``."""
    out: list[str] = ['"']
    for char in text:
        if "\ud800" <= char <= "\udfff":
            raise ValueError("a Go string cannot hold a lone surrogate")
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif char < " " or char in _HTML_UNSAFE or char in _LINE_SEPARATORS:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out).encode("utf-8")


def go_envelope(content: str, injection_mode: str, version_id: uuid.UUID | None = None) -> bytes:
    """The cached directive value for these fields, exactly as the proxy stores it."""
    parts = [b'{"v":1,"content":', go_json_string(content), b',"injection_mode":', go_json_string(injection_mode)]
    if version_id is not None:
        parts += [b',"version_id":', go_json_string(str(version_id))]
    parts.append(b"}")
    return b"".join(parts)
