"""The embedded backend's SQLite file: migrations, WAL, and a small pool of worker threads.

Every SQLite call runs on one of ``workers`` dedicated threads, each holding its own connection,
so the event loop never waits on disk or on a lock. The file is in WAL mode (readers never block
the writer nor each other) with ``synchronous=FULL`` (a committed write survives a power loss).
Writers serialise on SQLite's write lock (``BEGIN IMMEDIATE``, ``busy_timeout``).
"""

from __future__ import annotations

import asyncio
import math
import os
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import TypeVar

from adapters.embedded.errors import DatabaseClosedError, EmbeddedDatabaseError
from adapters.embedded.schema import MIGRATIONS, SCHEMA_VERSION, TOKENIZER

T = TypeVar("T")
DEFAULT_WORKERS = 4
DEFAULT_BUSY_TIMEOUT_S = 5.0


class EmbeddedDatabase:
    """One SQLite file and the worker threads that use it. Build with ``open``."""

    def __init__(self, path: Path, *, workers: int, busy_timeout_s: float) -> None:
        self.path = path
        self._busy_timeout_s = busy_timeout_s
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ibex-sqlite")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        workers: int = DEFAULT_WORKERS,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    ) -> EmbeddedDatabase:
        """Create or migrate the file at ``path`` (blocking, milliseconds: call at start-up).

        Raises:
            EmbeddedDatabaseError: the file cannot be created, is not a database of ours, was
                written by a newer build, or cannot use WAL.
        """
        if workers < 1:
            raise EmbeddedDatabaseError(f"workers must be >= 1, got {workers}")
        target = Path(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with closing(_connect(target, busy_timeout_s)) as conn:
                _enable_wal(conn, target)
                _migrate(conn, target)
                _prepare_worker_connection(conn)  # proves FTS5 is available before any call
        except (OSError, sqlite3.Error) as exc:
            raise EmbeddedDatabaseError(f"cannot open embedded database {target}: {exc}") from exc
        return cls(target, workers=workers, busy_timeout_s=busy_timeout_s)

    @property
    def closed(self) -> bool:
        return self._closed

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work(connection)`` on a worker thread and return its result.

        Raises:
            DatabaseClosedError: the database was closed.
            sqlite3.Error: whatever ``work`` raised (stores translate it).
        """
        if self._closed:
            raise DatabaseClosedError(str(self.path))
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._executor, self._run_here, work)
        except RuntimeError as exc:  # the executor was shut down meanwhile
            raise DatabaseClosedError(str(self.path)) from exc
        return await future

    async def close(self) -> None:
        """Wait for running work, then close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        # Queued work still runs, but only to raise DatabaseClosedError (see _run_here).
        await asyncio.to_thread(self._executor.shutdown, True)
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()

    def _run_here(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise DatabaseClosedError(str(self.path))
        conn = self._connection()
        try:
            return work(conn)
        finally:
            if conn.in_transaction:  # never keep a stale snapshot or a lock past one call
                conn.rollback()

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self.path, self._busy_timeout_s)
            try:
                _prepare_worker_connection(conn)
            except sqlite3.Error:
                conn.close()
                raise
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn


def _connect(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _enable_wal(conn: sqlite3.Connection, path: Path) -> None:
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise EmbeddedDatabaseError(f"{path}: the file system does not support WAL (journal_mode={mode})")


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise EmbeddedDatabaseError(
            f"{path}: schema version {version} is newer than this build supports ({SCHEMA_VERSION})"
        )
    for target in range(version + 1, SCHEMA_VERSION + 1):
        try:
            conn.executescript(f"BEGIN IMMEDIATE;\n{MIGRATIONS[target - 1]}\nPRAGMA user_version = {target};\nCOMMIT;")
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


def _prepare_worker_connection(conn: sqlite3.Connection) -> None:
    conn.text_factory = _lenient_text
    try:
        conn.execute("SELECT exp(0.0)").fetchone()
    except sqlite3.OperationalError:  # SQLite built without its math functions
        conn.create_function("exp", 1, math.exp, deterministic=True)
    conn.execute(f"CREATE VIRTUAL TABLE temp.ibex_scratch USING fts5 (text, tokenize = '{TOKENIZER}')")
    conn.execute("CREATE VIRTUAL TABLE temp.ibex_scratch_terms USING fts5vocab (temp, ibex_scratch, 'instance')")


def _lenient_text(raw: bytes) -> str:
    # A file edited by hand may hold invalid UTF-8: clean it rather than fail the whole call.
    return raw.decode("utf-8", errors="replace")


def tokenize(conn: sqlite3.Connection, text: str) -> list[str]:
    """The terms FTS5's tokenizer makes of ``text``, in order (via a per-connection scratch index)."""
    conn.execute("INSERT INTO temp.ibex_scratch (rowid, text) VALUES (1, ?)", (text,))
    try:
        rows = conn.execute("SELECT term FROM temp.ibex_scratch_terms ORDER BY offset").fetchall()
    finally:
        conn.execute("DELETE FROM temp.ibex_scratch WHERE rowid = 1")
    return [row[0] for row in rows]
