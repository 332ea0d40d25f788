"""Token counting adapter: exact tiktoken counts for OpenAI encodings, length heuristics otherwise."""

from __future__ import annotations

from .exact import EXACT_CL100K_BASE, EXACT_O200K_BASE, ExactTokenCounter
from .heuristic import CHARS_DIV_4, RUNES_DIV_3_5, CharsDiv4Counter, RunesDiv35Counter
from .registry import TokenCountersRegistry

__all__ = [
    "CHARS_DIV_4",
    "EXACT_CL100K_BASE",
    "EXACT_O200K_BASE",
    "RUNES_DIV_3_5",
    "CharsDiv4Counter",
    "ExactTokenCounter",
    "RunesDiv35Counter",
    "TokenCountersRegistry",
]
