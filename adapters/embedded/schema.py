"""The embedded backend's schema, as migrations applied in order (``PRAGMA user_version``).

``MIGRATIONS[i]`` takes a database from version ``i`` to ``i + 1``; a file whose version is
above ``len(MIGRATIONS)`` was written by a newer build and is refused. Never edit a released
migration: append a new one.

Times are integer microseconds since the Unix epoch (UTC). Full-text search reads
``memory_postings``: for each tenant (``tenants.tenant_no``), term and active memory, the term's
frequency and the memory's length in terms, the terms being those of SQLite FTS5's tokenizer
(``TOKENIZER``). Keying postings by tenant keeps every search, and every statistic it ranks
with, inside the tenant (see ``scoring``). Archived memories have no postings.
"""

from __future__ import annotations

TOKENIZER = "porter unicode61 remove_diacritics 2"

_V1 = """
CREATE TABLE memories (
    id INTEGER PRIMARY KEY,
    memory_id TEXT NOT NULL UNIQUE,
    org_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    content TEXT NOT NULL,
    category TEXT NOT NULL,
    confidence REAL NOT NULL CHECK (confidence BETWEEN 0.0 AND 1.0),
    usefulness REAL NOT NULL CHECK (usefulness BETWEEN 0.0 AND 1.0),
    retrieval_count INTEGER NOT NULL DEFAULT 0 CHECK (retrieval_count >= 0),
    positive_feedback INTEGER NOT NULL DEFAULT 0,
    negative_feedback INTEGER NOT NULL DEFAULT 0,
    tags TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'archived')),
    token_count INTEGER NOT NULL,
    created_us INTEGER NOT NULL,
    updated_us INTEGER NOT NULL
);
CREATE INDEX memories_by_tenant ON memories (org_id, agent_id, status, token_count);
CREATE TABLE tenants (
    tenant_no INTEGER PRIMARY KEY,
    org_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    UNIQUE (org_id, agent_id)
);
-- No foreign keys on postings: deleting a memory deletes its postings by primary key.
CREATE TABLE memory_postings (
    tenant_no INTEGER NOT NULL,
    term TEXT NOT NULL,
    memory_rowid INTEGER NOT NULL,
    tf INTEGER NOT NULL,
    doc_length INTEGER NOT NULL,
    PRIMARY KEY (tenant_no, term, memory_rowid)
) WITHOUT ROWID;
CREATE TABLE feedback_events (
    org_id TEXT NOT NULL,
    memory_id TEXT NOT NULL REFERENCES memories (memory_id) ON DELETE CASCADE,
    idempotency_key TEXT NOT NULL,
    feedback TEXT NOT NULL,
    previous_usefulness REAL NOT NULL,
    new_usefulness REAL NOT NULL,
    total_positive INTEGER NOT NULL,
    total_negative INTEGER NOT NULL,
    session_id TEXT,
    trace_id TEXT,
    notes TEXT,
    created_us INTEGER NOT NULL,
    PRIMARY KEY (org_id, memory_id, idempotency_key)
);
CREATE INDEX feedback_by_memory ON feedback_events (memory_id);
CREATE TABLE directives (
    org_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    content TEXT NOT NULL,
    injection_mode TEXT NOT NULL,
    version_id TEXT NOT NULL,
    updated_us INTEGER NOT NULL,
    PRIMARY KEY (org_id, agent_id)
) WITHOUT ROWID;
"""

MIGRATIONS: tuple[str, ...] = (_V1,)
SCHEMA_VERSION = len(MIGRATIONS)

