"""The embedded memory source and feedback sink, plus the write API the CLI uses.

Port calls (``hot``, ``search``, ``record``) raise only ``ports.errors`` types: closed ->
MemorySourceClosedError, no answer within ``timeout_s`` -> MemorySourceTimeoutError (the work may
still complete: a timed-out feedback retried with the same idempotency key still counts once),
SQLite failures -> MemorySourceUnavailableError, unknown memory -> MemoryNotFoundError.
Hot/search semantics and scores: see ``reads`` and ``scoring``. Feedback is scoped by org (a
feedback item names no agent); an empty idempotency key is applied every time.

The write API (``add``, ``import_jsonl``, ``list``, ``delete``) raises EmbeddedValidationError for
bad input and the same port errors otherwise. Typical use::

    store = EmbeddedMemoryStore.open("./.ibex-context/ibex.db", clock=SystemClock())
    memory_id = await store.add(org_id=org, agent_id=agent, content="Prefers dark mode",
                                category="preference", confidence=0.9, tags=("ui",))
    count = await store.import_jsonl("memories.jsonl", progress=lambda done, total: ...)
    await store.close()

To serve memories and directives from one file with one pool of threads, share a database:
``db = EmbeddedDatabase.open(path)``, ``EmbeddedMemoryStore(db, clock)``,
``EmbeddedDirectiveStore(db, clock)``, and ``await db.close()`` after closing both stores.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from datetime import datetime
from functools import partial

import attrs

from adapters.embedded.database import DEFAULT_WORKERS, EmbeddedDatabase
from adapters.embedded.errors import EmbeddedDatabaseError, EmbeddedValidationError
from adapters.embedded.guard import PortGuard
from adapters.embedded.importer import read_jsonl
from adapters.embedded.reads import hot_memories, search_memories
from adapters.embedded.records import NewMemory, StoredMemory, to_micros
from adapters.embedded.validation import canonical_uuid, canonical_uuid_or_none
from adapters.embedded.writes import Progress, apply_feedback, delete_memory, insert_memories, list_memories
from domain.model.feedback import FEEDBACK_VALUES, FeedbackItem, FeedbackResult
from domain.model.memory import HotQuery, MemoryBatch, SearchQuery
from ports.clock import Clock
from ports.errors import MemorySourceError, MemorySourceUnavailableError
from ports.feedback_sink import FeedbackSink
from ports.memory_source import MemorySource

MAX_NOTES_CHARS = 2000


class EmbeddedMemoryStore(MemorySource, FeedbackSink):
    """Memories in the embedded SQLite file: hot list, ranked full-text search, feedback."""

    def __init__(self, database: EmbeddedDatabase, clock: Clock, *, owns_database: bool = False) -> None:
        """Use ``database`` (shared with the other embedded store, or owned: closed with this one)."""
        self._database = database
        self._clock = clock
        self._owns_database = owns_database
        self._guard = PortGuard.for_memory_source(database)

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, clock: Clock, workers: int = DEFAULT_WORKERS
    ) -> EmbeddedMemoryStore:
        """Open (creating or migrating) the file; MemorySourceUnavailableError when it cannot."""
        try:
            return cls(EmbeddedDatabase.open(path, workers=workers), clock, owns_database=True)
        except EmbeddedDatabaseError as exc:
            raise MemorySourceUnavailableError(str(exc)) from exc

    async def hot(self, query: HotQuery, *, timeout_s: float) -> MemoryBatch:
        return await self._guard.call(partial(hot_memories, query=query, now_us=self._now_us()), timeout_s)

    async def search(self, query: SearchQuery, *, timeout_s: float) -> MemoryBatch:
        return await self._guard.call(partial(search_memories, query=query), timeout_s)

    async def record(self, item: FeedbackItem, *, timeout_s: float) -> FeedbackResult:
        checked = _checked_feedback(item)
        return await self._guard.call(partial(apply_feedback, item=checked, now_us=self._now_us()), timeout_s)

    async def close(self) -> None:
        """Later calls raise; the database is closed too when this store owns it."""
        self._guard.shut()
        if self._owns_database:
            await self._database.close()

    async def add(
        self,
        *,
        org_id: str,
        agent_id: str,
        content: str,
        category: str,
        confidence: float = 1.0,
        usefulness: float = 0.5,
        tags: Iterable[str] = (),
        memory_id: str | None = None,
        created_at: datetime | str | None = None,
        retrieval_count: int = 0,
        status: str = "active",
    ) -> str:
        """Store one memory and return its id (a new UUID unless ``memory_id`` is given)."""
        memory = NewMemory.create(
            org_id=org_id, agent_id=agent_id, content=content, category=category, confidence=confidence,
            usefulness=usefulness, tags=tags, memory_id=memory_id, created_at=created_at,
            retrieval_count=retrieval_count, status=status,
        )
        await self._guard.call(partial(insert_memories, memories=[memory], now_us=self._now_us()), None)
        return memory.memory_id

    async def import_jsonl(self, path: str | os.PathLike[str], *, progress: Progress | None = None) -> int:
        """Import a JSONL file (format: ``importer``) in one transaction; return how many.

        All or nothing: a bad line N raises EmbeddedValidationError naming line N and the field,
        and nothing of the file is stored. ``progress(done, total)`` is called after each stored
        memory, from a worker thread.
        """
        now_us = self._now_us()

        def work(conn: sqlite3.Connection) -> int:
            memories, lines = read_jsonl(path)
            return insert_memories(conn, memories, now_us, lines=lines, progress=progress)

        return await self._guard.call(work, None)

    async def list(self, org_id: str, agent_id: str, limit: int = 100) -> tuple[StoredMemory, ...]:
        """The tenant's memories (any status), newest first, at most ``limit``."""
        org, agent = canonical_uuid(org_id, "org_id"), canonical_uuid(agent_id, "agent_id")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise EmbeddedValidationError("limit", f"must be an integer >= 1, got {limit!r}")
        return await self._guard.call(partial(list_memories, org_id=org, agent_id=agent, limit=limit), None)

    async def delete(self, org_id: str, agent_id: str, memory_id: str) -> bool:
        """Delete one memory of the tenant; False when the tenant has no such memory."""
        org, agent = canonical_uuid(org_id, "org_id"), canonical_uuid(agent_id, "agent_id")
        target = canonical_uuid(memory_id, "memory_id")
        return await self._guard.call(partial(delete_memory, org_id=org, agent_id=agent, memory_id=target), None)

    def _now_us(self) -> int:
        return to_micros(self._clock.now())


def _checked_feedback(item: FeedbackItem) -> FeedbackItem:
    """The item with canonical ids (an id that is no UUID stays as is: it will not be found)."""
    if item.feedback not in FEEDBACK_VALUES:
        raise MemorySourceError(f"feedback must be one of {', '.join(FEEDBACK_VALUES)}, got {item.feedback!r}")
    if item.notes is not None and len(item.notes) > MAX_NOTES_CHARS:
        raise MemorySourceError(f"notes is {len(item.notes)} characters, the maximum is {MAX_NOTES_CHARS}")
    return attrs.evolve(
        item,
        org_id=canonical_uuid_or_none(item.org_id) or item.org_id,
        memory_id=canonical_uuid_or_none(item.memory_id) or item.memory_id,
    )
