"""The embedded directive store: one directive per (org, agent) in the embedded SQLite file.

It holds the fields of the Redis envelope (content, injection_mode, version_id); every
``set_directive`` gets a new version id. ``get`` (the port) raises only DirectiveStoreError
(DirectiveStoreTimeoutError past ``timeout_s``); the write API raises EmbeddedValidationError for
bad input.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from functools import partial

from adapters.embedded.database import EmbeddedDatabase
from adapters.embedded.errors import EmbeddedDatabaseError, EmbeddedValidationError
from adapters.embedded.guard import PortGuard
from adapters.embedded.records import to_micros
from adapters.embedded.validation import canonical_uuid, canonical_uuid_or_none, text
from adapters.embedded.writes import write_transaction
from domain.model.directive import DEFAULT_INJECTION_MODE, INJECTION_MODES, Directive
from ports.clock import Clock
from ports.directive_store import DirectiveStore
from ports.errors import DirectiveStoreError


class EmbeddedDirectiveStore(DirectiveStore):
    """Directives in the embedded SQLite file."""

    def __init__(self, database: EmbeddedDatabase, clock: Clock, *, owns_database: bool = False) -> None:
        """Use ``database`` (shared with the other embedded store, or owned: closed with this one)."""
        self._database = database
        self._clock = clock
        self._owns_database = owns_database
        self._guard = PortGuard.for_directive_store(database)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, clock: Clock, workers: int = 2) -> EmbeddedDirectiveStore:
        """Open (creating or migrating) the file; DirectiveStoreError when it cannot."""
        try:
            return cls(EmbeddedDatabase.open(path, workers=workers), clock, owns_database=True)
        except EmbeddedDatabaseError as exc:
            raise DirectiveStoreError(str(exc)) from exc

    async def get(self, org_id: str, agent_id: str, *, timeout_s: float) -> Directive | None:
        org, agent = canonical_uuid_or_none(org_id), canonical_uuid_or_none(agent_id)
        if org is None or agent is None:
            return None
        return await self._guard.call(partial(_select, org_id=org, agent_id=agent), timeout_s)

    async def close(self) -> None:
        """Later calls raise; the database is closed too when this store owns it."""
        self._guard.shut()
        if self._owns_database:
            await self._database.close()

    async def set_directive(
        self, org_id: str, agent_id: str, content: str, injection_mode: str = DEFAULT_INJECTION_MODE
    ) -> str:
        """Store (or replace) the agent's directive and return its new version id."""
        org, agent = canonical_uuid(org_id, "org_id"), canonical_uuid(agent_id, "agent_id")
        body = text(content, "content")
        if injection_mode not in INJECTION_MODES:
            raise EmbeddedValidationError(
                "injection_mode", f"must be one of {', '.join(INJECTION_MODES)}, got {injection_mode!r}"
            )
        version_id = str(uuid.uuid4())
        now_us = to_micros(self._clock.now())
        row = (org, agent, body, injection_mode, version_id, now_us)
        await self._guard.call(partial(_upsert, row=row), None)
        return version_id

    async def get_directive(self, org_id: str, agent_id: str) -> Directive | None:
        """The agent's directive, or None."""
        org, agent = canonical_uuid(org_id, "org_id"), canonical_uuid(agent_id, "agent_id")
        return await self._guard.call(partial(_select, org_id=org, agent_id=agent), None)

    async def delete_directive(self, org_id: str, agent_id: str) -> bool:
        """Remove the agent's directive; False when it had none."""
        org, agent = canonical_uuid(org_id, "org_id"), canonical_uuid(agent_id, "agent_id")
        return await self._guard.call(partial(_delete, org_id=org, agent_id=agent), None)


def _select(conn: sqlite3.Connection, org_id: str, agent_id: str) -> Directive | None:
    row = conn.execute(
        "SELECT content, injection_mode, version_id FROM directives WHERE org_id = ? AND agent_id = ?",
        (org_id, agent_id),
    ).fetchone()
    if row is None:
        return None
    content, injection_mode, version_id = row
    if injection_mode not in INJECTION_MODES:
        raise DirectiveStoreError(f"stored directive for agent {agent_id} has injection_mode {injection_mode!r}")
    return Directive(content=content, injection_mode=injection_mode, version_id=version_id)


def _upsert(conn: sqlite3.Connection, row: tuple[str, str, str, str, str, int]) -> None:
    with write_transaction(conn):
        conn.execute(
            "INSERT INTO directives (org_id, agent_id, content, injection_mode, version_id, updated_us)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (org_id, agent_id) DO UPDATE SET"
            " content = excluded.content, injection_mode = excluded.injection_mode,"
            " version_id = excluded.version_id, updated_us = excluded.updated_us",
            row,
        )


def _delete(conn: sqlite3.Connection, org_id: str, agent_id: str) -> bool:
    with write_transaction(conn):
        return conn.execute(
            "DELETE FROM directives WHERE org_id = ? AND agent_id = ?", (org_id, agent_id)
        ).rowcount > 0
