"""Synchronous write-side SQL (runs on a worker thread): insert, list, delete, feedback."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from adapters.embedded.database import tokenize
from adapters.embedded.errors import EmbeddedValidationError
from adapters.embedded.records import STORED_COLUMNS, NewMemory, StoredMemory, encode_tags, stored_from_row, to_micros
from adapters.embedded.reads import tenant_number
from adapters.embedded.scoring import updated_usefulness
from domain.model.feedback import FeedbackItem, FeedbackResult
from ports.errors import MemoryNotFoundError

Progress = Callable[[int, int], None]


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT, rolled back when the block raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def insert_memories(
    conn: sqlite3.Connection,
    memories: Sequence[NewMemory],
    now_us: int,
    *,
    lines: Sequence[int] | None = None,
    progress: Progress | None = None,
) -> int:
    """Insert every memory in one transaction (all or nothing) and return how many.

    ``lines`` gives each memory's import line, used to locate a duplicate id in the error.
    """
    with write_transaction(conn):
        for position, memory in enumerate(memories):
            try:
                _insert_one(conn, memory, now_us)
            except EmbeddedValidationError as exc:
                if lines is None:
                    raise
                raise exc.at_line(lines[position]) from None
            if progress is not None:
                progress(position + 1, len(memories))
    return len(memories)


def _insert_one(conn: sqlite3.Connection, memory: NewMemory, now_us: int) -> None:
    if conn.execute("SELECT 1 FROM memories WHERE memory_id = ?", (memory.memory_id,)).fetchone():
        raise EmbeddedValidationError("memory_id", f"a memory with id {memory.memory_id} already exists")
    terms = Counter(tokenize(conn, memory.content))
    length = sum(terms.values())
    created_us = now_us if memory.created_at is None else to_micros(memory.created_at)
    cursor = conn.execute(
        "INSERT INTO memories (memory_id, org_id, agent_id, content, category, confidence, usefulness,"
        " retrieval_count, tags, status, token_count, created_us, updated_us)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (memory.memory_id, memory.org_id, memory.agent_id, memory.content, memory.category,
         memory.confidence, memory.usefulness, memory.retrieval_count, encode_tags(memory.tags),
         memory.status, length, created_us, now_us),
    )
    if memory.status != "active":
        return
    tenant_no = _ensure_tenant(conn, memory.org_id, memory.agent_id)
    conn.executemany(
        "INSERT INTO memory_postings (tenant_no, term, memory_rowid, tf, doc_length) VALUES (?, ?, ?, ?, ?)",
        [(tenant_no, term, cursor.lastrowid, tf, length) for term, tf in terms.items()],
    )


def _ensure_tenant(conn: sqlite3.Connection, org_id: str, agent_id: str) -> int:
    existing = tenant_number(conn, org_id, agent_id)
    if existing is not None:
        return existing
    cursor = conn.execute("INSERT INTO tenants (org_id, agent_id) VALUES (?, ?)", (org_id, agent_id))
    return int(cursor.lastrowid)  # type: ignore[arg-type]  # set by every INSERT


def list_memories(conn: sqlite3.Connection, org_id: str, agent_id: str, limit: int) -> tuple[StoredMemory, ...]:
    """The tenant's memories (any status), newest first, at most ``limit``."""
    rows = conn.execute(
        f"SELECT {STORED_COLUMNS} FROM memories WHERE org_id = ? AND agent_id = ?"
        " ORDER BY created_us DESC, memory_id LIMIT ?",
        (org_id, agent_id, limit),
    ).fetchall()
    return tuple(stored_from_row(row) for row in rows)


def delete_memory(conn: sqlite3.Connection, org_id: str, agent_id: str, memory_id: str) -> bool:
    """Delete one memory of the tenant, with its postings and feedback records."""
    with write_transaction(conn):
        row = conn.execute(
            "SELECT id, content, status FROM memories WHERE memory_id = ? AND org_id = ? AND agent_id = ?",
            (memory_id, org_id, agent_id),
        ).fetchone()
        if row is None:
            return False
        rowid, content, status = row
        tenant_no = tenant_number(conn, org_id, agent_id)
        if status == "active" and tenant_no is not None:
            conn.executemany(
                "DELETE FROM memory_postings WHERE tenant_no = ? AND term = ? AND memory_rowid = ?",
                [(tenant_no, term, rowid) for term in set(tokenize(conn, content))],
            )
        conn.execute("DELETE FROM memories WHERE id = ?", (rowid,))
    return True


def apply_feedback(conn: sqlite3.Connection, item: FeedbackItem, now_us: int) -> FeedbackResult:
    """Apply one feedback write atomically; a known idempotency key returns the first result.

    Raises:
        MemoryNotFoundError: no memory ``item.memory_id`` in ``item.org_id``.
    """
    with write_transaction(conn):
        if item.idempotency_key:
            earlier = _recorded_feedback(conn, item)
            if earlier is not None:
                return earlier
        row = conn.execute(
            "SELECT usefulness, positive_feedback, negative_feedback FROM memories"
            " WHERE memory_id = ? AND org_id = ?",
            (item.memory_id, item.org_id),
        ).fetchone()
        if row is None:
            raise MemoryNotFoundError(f"no memory {item.memory_id} in org {item.org_id}", status_code=404)
        result = _feedback_result(item, *row)
        conn.execute(
            "UPDATE memories SET usefulness = ?, positive_feedback = ?, negative_feedback = ?, updated_us = ?"
            " WHERE memory_id = ?",
            (result.new_usefulness_score, result.total_positive_feedback,
             result.total_negative_feedback, now_us, item.memory_id),
        )
        if item.idempotency_key:
            _record_feedback(conn, item, result, now_us)
    return result


def _feedback_result(item: FeedbackItem, usefulness: float, positive: int, negative: int) -> FeedbackResult:
    return FeedbackResult(
        memory_id=item.memory_id,
        feedback=item.feedback,
        new_usefulness_score=min(1.0, max(0.0, updated_usefulness(usefulness, item.feedback))),
        total_positive_feedback=positive + (item.feedback == "positive"),
        total_negative_feedback=negative + (item.feedback == "negative"),
        previous_usefulness_score=usefulness,
    )


def _recorded_feedback(conn: sqlite3.Connection, item: FeedbackItem) -> FeedbackResult | None:
    row = conn.execute(
        "SELECT feedback, previous_usefulness, new_usefulness, total_positive, total_negative"
        " FROM feedback_events WHERE org_id = ? AND memory_id = ? AND idempotency_key = ?",
        (item.org_id, item.memory_id, item.idempotency_key),
    ).fetchone()
    if row is None:
        return None
    feedback, previous, new, positive, negative = row
    return FeedbackResult(
        memory_id=item.memory_id,
        feedback=feedback,
        new_usefulness_score=new,
        total_positive_feedback=positive,
        total_negative_feedback=negative,
        previous_usefulness_score=previous,
    )


def _record_feedback(conn: sqlite3.Connection, item: FeedbackItem, result: FeedbackResult, now_us: int) -> None:
    conn.execute(
        "INSERT INTO feedback_events (org_id, memory_id, idempotency_key, feedback, previous_usefulness,"
        " new_usefulness, total_positive, total_negative, session_id, trace_id, notes, created_us)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (item.org_id, item.memory_id, item.idempotency_key, item.feedback,
         result.previous_usefulness_score, result.new_usefulness_score, result.total_positive_feedback,
         result.total_negative_feedback, item.session_id, item.trace_id, item.notes, now_us),
    )
