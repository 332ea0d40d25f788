"""Embedded backend: memories and directives in one local SQLite file (the default backend).

``EmbeddedMemoryStore`` implements MemorySource and FeedbackSink, ``EmbeddedDirectiveStore``
implements DirectiveStore; both also carry the write API the CLI uses. Scores: ``scoring``;
JSONL import format: ``importer``; schema and migrations: ``schema``; threads and WAL: ``database``.
"""

from __future__ import annotations

from adapters.embedded.database import EmbeddedDatabase
from adapters.embedded.directive_store import EmbeddedDirectiveStore
from adapters.embedded.errors import EmbeddedDatabaseError, EmbeddedValidationError
from adapters.embedded.memory_store import EmbeddedMemoryStore
from adapters.embedded.records import StoredMemory

__all__ = [
    "EmbeddedDatabase",
    "EmbeddedDatabaseError",
    "EmbeddedDirectiveStore",
    "EmbeddedMemoryStore",
    "EmbeddedValidationError",
    "StoredMemory",
]
