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
     "retrieval_count": 0,          optional, integer >= 0, default 0
     "status": "active"}            optional, "active" | "archived" (archived: never returned)

Example: ``{"org_id": "4f9c...", "agent_id": "a1b2...", "content": "Prefers dark mode",
"category": "preference", "confidence": 0.9, "tags": ["ui"]}``
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from adapters.embedded.errors import EmbeddedValidationError
from adapters.embedded.records import NewMemory

REQUIRED_FIELDS = ("org_id", "agent_id", "content", "category")
OPTIONAL_FIELDS = ("confidence", "usefulness", "tags", "memory_id", "created_at", "retrieval_count", "status")


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
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            memories.append(parse_line(raw))
        except EmbeddedValidationError as exc:
            raise exc.at_line(number) from None
        lines.append(number)
    return memories, lines


def parse_line(raw: bytes) -> NewMemory:
    """One JSONL line as a validated memory (errors name the field, not yet the line)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise EmbeddedValidationError("line", "is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise EmbeddedValidationError("line", f"is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise EmbeddedValidationError("line", f"must be a JSON object, got {type(data).__name__}")
    for field in REQUIRED_FIELDS:
        if field not in data:
            raise EmbeddedValidationError(field, "is required")
    unknown = sorted(set(data) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        allowed = ", ".join(REQUIRED_FIELDS + OPTIONAL_FIELDS)
        raise EmbeddedValidationError(unknown[0], f"unknown field (allowed: {allowed})")
    return NewMemory.create(**data)
