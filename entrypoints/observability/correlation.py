"""Request ids: the caller's own when it sent one, else one generated at the edge for the whole call.

A generated id is a UUID4 in its canonical form (lowercase, ``8-4-4-4-12`` hex digits). The edge
puts it in the domain request (so downstream calls carry it and the response echoes it) and in
the call's log line, so an answer can always be matched to its log.
"""

from __future__ import annotations

import uuid


def new_request_id() -> str:
    """A fresh request id: ``str(uuid.uuid4())``."""
    return str(uuid.uuid4())


def request_id_or_new(given: str) -> str:
    """The caller's request id unchanged, or a fresh one when it sent none (empty)."""
    return given or new_request_id()
