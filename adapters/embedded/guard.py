"""Runs store work on the database's threads and turns every outcome into a port error."""

from __future__ import annotations

import asyncio
import math
import sqlite3
from collections.abc import Callable
from typing import TypeVar

from adapters.embedded.database import EmbeddedDatabase
from adapters.embedded.errors import DatabaseClosedError
from ports.errors import (
    DirectiveStoreError,
    DirectiveStoreTimeoutError,
    MemorySourceClosedError,
    MemorySourceTimeoutError,
    MemorySourceUnavailableError,
    PortError,
)

T = TypeVar("T")


class PortGuard:
    """Closed check, per-call timeout and SQLite-error translation for one store."""

    def __init__(
        self,
        database: EmbeddedDatabase,
        *,
        name: str,
        closed: type[PortError],
        timeout: type[PortError],
        unavailable: type[PortError],
    ) -> None:
        self._database = database
        self._shut = False
        self._name = name
        self._closed = closed
        self._timeout = timeout
        self._unavailable = unavailable

    @classmethod
    def for_memory_source(cls, database: EmbeddedDatabase) -> PortGuard:
        return cls(
            database,
            name="embedded memory store",
            closed=MemorySourceClosedError,
            timeout=MemorySourceTimeoutError,
            unavailable=MemorySourceUnavailableError,
        )

    @classmethod
    def for_directive_store(cls, database: EmbeddedDatabase) -> PortGuard:
        return cls(
            database,
            name="embedded directive store",
            closed=DirectiveStoreError,
            timeout=DirectiveStoreTimeoutError,
            unavailable=DirectiveStoreError,
        )

    def shut(self) -> None:
        """Refuse every later call (the store was closed; the database may live on)."""
        self._shut = True

    async def call(self, work: Callable[[sqlite3.Connection], T], timeout_s: float | None) -> T:
        """``work(connection)`` on a worker thread, bounded by ``timeout_s`` (None: unbounded)."""
        if self._shut or self._database.closed:
            raise self._closed(f"{self._name} is closed")
        try:
            return await asyncio.wait_for(self._database.run(work), _bounded(timeout_s))
        except TimeoutError as exc:
            raise self._timeout(f"{self._name}: no answer within {timeout_s} s") from exc
        except DatabaseClosedError as exc:
            raise self._closed(f"{self._name} is closed") from exc
        except sqlite3.Error as exc:
            raise self._unavailable(f"{self._name}: database error: {exc}") from exc


def _bounded(timeout_s: float | None) -> float | None:
    """None or +inf: no bound; NaN or <= 0: answer only what is already done (i.e. time out)."""
    if timeout_s is None or timeout_s == math.inf:
        return None
    if math.isnan(timeout_s) or timeout_s <= 0:
        return 0.0
    return timeout_s
