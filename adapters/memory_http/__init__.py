"""The memory service over HTTP (aiohttp): HttpMemorySource implements MemorySource and FeedbackSink."""

from __future__ import annotations

from adapters.memory_http.http_memory_source import HttpMemorySource

__all__ = ["HttpMemorySource"]
