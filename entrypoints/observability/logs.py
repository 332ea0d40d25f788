"""Structured (JSON lines) logging; correlation ids travel in the ``extra`` fields.

Every record is plain JSON, whoever logged it: third-party terminal decorations are dropped
(uvicorn's ``color_message`` extra) and terminal escape sequences are removed from every string,
keys and nested values included, so no field carries ANSI codes.

Trace ids: a record written while a trace context is current (inside a traced call: its server
span or one of its stages; with tracing off, the caller's context the edge attached) carries
``trace_id`` (32 hex digits) and ``span_id`` (16) of the current span, the ids an OpenTelemetry
backend shows. They win over extras of the same name: a request's own ``trace_id`` field is
logged as ``request_trace_id``.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
_DECORATIONS = frozenset({"color_message"})  # uvicorn's coloured copy of the message
# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), other two-character escapes, then any stray ESC / 8-bit CSI
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]|[\x1b\x9b]")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "event": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items()
                      if k not in _STANDARD and k not in _DECORATIONS and not k.startswith("_")})
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            entry["trace_id"] = trace.format_trace_id(span.trace_id)
            entry["span_id"] = trace.format_span_id(span.span_id)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(plain(entry), default=lambda value: plain(str(value)), ensure_ascii=False)


def plain(value: Any) -> Any:
    """``value`` with terminal escape sequences removed from every string in it (dicts, lists, tuples)."""
    if isinstance(value, str):
        return _ESCAPES.sub("", value) if "\x1b" in value or "\x9b" in value else value
    if isinstance(value, dict):
        return {plain(k) if isinstance(k, str) else k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
