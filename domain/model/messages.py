"""Conversation messages carried in a request."""

from __future__ import annotations

import attrs


@attrs.frozen
class Message:
    role: str
    content: str
