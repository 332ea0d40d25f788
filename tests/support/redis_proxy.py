"""A loopback TCP proxy in front of a redis-server that holds chosen commands until released.

Tests use it to interrupt exchanges on purpose instead of hoping a ``CLIENT PAUSE`` lands on
them: ``hold_gets(key, ...)`` makes every later GET of one of those keys stop at the proxy. The
held command, and everything the client sends after it on the same connection, is kept back (in
order) until ``release()``, so the caller's reply is owed for as long as the test wants: a call
with any timeout on such a GET times out, whatever the machine's scheduling. Other connections,
and other commands (the connection handshake included), pass straight through.

``release()`` forwards what was kept back on connections the client still has open, so Redis
answers them late: exactly the stale reply a careless pool would hand to the next caller. On a
connection the client has closed (discarded), what was kept back is dropped.

``hold_commands(name, ...)`` holds every later command of that name the same way (``PING``: a
connection that looks alive but never answers). ``refuse_connections(True)`` makes the proxy
close every new client connection at once (counted in ``refused``), so a client that lost its
connection cannot get a new one until ``refuse_connections(False)``.

Every client connection gets its own upstream connection (Redis' ``total_connections_received``
still counts the client's connections one for one). Runs on the test's event loop::

    proxy = await HoldingRedisProxy.start(server.port)
    proxy.hold_gets(key)
    ... RedisDirectiveStore.from_url(proxy.url, ...) ...
    await proxy.wait_for(lambda: proxy.held_gets == 1)
    proxy.release()
    await proxy.close()
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import attrs

CONDITION_CAP_S = 30.0  # wait_for gives up (and fails the test) after this long: a hang guard only


class RespCommandReader:
    """Splits the client's byte stream into whole RESP commands (arrays of bulk strings)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, list[bytes]]]:
        """Add ``data``; return the commands now complete, each as (raw bytes, arguments)."""
        self._buffer += data
        commands: list[tuple[bytes, list[bytes]]] = []
        while (parsed := self._one()) is not None:
            commands.append(parsed)
        return commands

    def _one(self) -> tuple[bytes, list[bytes]] | None:
        buffer = self._buffer
        if not buffer:
            return None
        if buffer[:1] != b"*":
            raise ValueError(f"not a RESP array command: {bytes(buffer[:32])!r}")
        end = buffer.find(b"\r\n")
        if end < 0:
            return None
        count, position, arguments = int(buffer[1:end]), end + 2, []
        for _ in range(count):
            end = buffer.find(b"\r\n", position)
            if end < 0:
                return None
            if buffer[position:position + 1] != b"$":
                raise ValueError(f"not a RESP bulk string argument: {bytes(buffer[position:position + 32])!r}")
            length = int(buffer[position + 1:end])
            start = end + 2
            if len(buffer) < start + length + 2:
                return None
            arguments.append(bytes(buffer[start:start + length]))
            position = start + length + 2
        raw = bytes(buffer[:position])
        del buffer[:position]
        return raw, arguments


@attrs.define(eq=False)
class Link:
    """One client connection and its upstream connection."""

    number: int
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    kept_back: list[bytes] = attrs.Factory(list)  # in order, from the first held command on
    held_keys: list[str] = attrs.Factory(list)  # the held GETs' keys, in order
    client_closed: bool = False

    @property
    def holding(self) -> bool:
        return bool(self.kept_back)


class HoldingRedisProxy:
    """See the module docstring. Counters: ``accepted``, ``refused``, ``open_links``, ``held_gets``, ``commands``."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._server: asyncio.AbstractServer | None = None
        self._hold: set[bytes] = set()
        self._hold_names: set[bytes] = set()
        self._refusing = False
        self._links: list[Link] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self.port = 0
        self.accepted = 0
        self.held_gets = 0  # GETs held since the start (released ones included)
        self.refused = 0  # client connections closed at once while refusing
        self.commands = 0  # whole commands received from clients since the start (held or not)

    @classmethod
    async def start(cls, upstream_port: int) -> HoldingRedisProxy:
        proxy = cls(upstream_port)
        proxy._server = await asyncio.start_server(proxy._serve, "127.0.0.1", 0)
        proxy.port = proxy._server.sockets[0].getsockname()[1]
        return proxy

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def open_links(self) -> int:
        """Client connections the proxy has not seen closed yet."""
        return sum(1 for link in self._links if not link.client_closed)

    def links_holding(self) -> list[Link]:
        return [link for link in self._links if link.held_keys]

    def hold_gets(self, *keys: str) -> None:
        """From now on, hold every GET of one of ``keys`` (and what follows it on its connection)."""
        self._hold.update(key.encode() for key in keys)

    def hold_commands(self, *names: str) -> None:
        """From now on, hold every command named one of ``names`` (and what follows it on its connection)."""
        self._hold_names.update(name.upper().encode() for name in names)

    def refuse_connections(self, refusing: bool) -> None:
        """While ``refusing``, close every new client connection as soon as it is accepted."""
        self._refusing = refusing

    def release(self) -> None:
        """Stop holding: forward what was kept back on connections still open, drop the rest."""
        self._hold.clear()
        self._hold_names.clear()
        for link in self._links:
            kept, link.kept_back = link.kept_back, []
            if kept and not link.client_closed:
                link.upstream.write(b"".join(kept))
            link.held_keys.clear()
        self._notify()

    def kept_back_commands(self) -> int:
        """Commands currently kept back, over every connection (held GETs and what followed them)."""
        return sum(len(link.kept_back) for link in self._links)

    async def wait_for(self, condition: Callable[[], bool], what: str = "proxy condition") -> None:
        """Wait until ``condition()`` holds; it is checked whenever the proxy's state changes."""
        try:
            async with asyncio.timeout(CONDITION_CAP_S):
                while not condition():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"{what}: not reached within {CONDITION_CAP_S} s") from None

    async def close(self) -> None:
        """Close every connection and wait for the proxy's tasks to end (they end on the close)."""
        if self._server is not None:
            self._server.close()
        for link in self._links:
            link.client.close()
            link.upstream.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    # ------------------------------------------------------------------ internals
    def _notify(self) -> None:
        self._changed.set()

    def _spawn(self, coroutine) -> None:  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        serving = asyncio.current_task()
        if serving is not None:
            self._tasks.add(serving)
            serving.add_done_callback(self._tasks.discard)
        if self._refusing:
            self.refused += 1
            client_writer.close()
            self._notify()
            return
        self.accepted += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        except OSError:
            client_writer.close()
            return
        link = Link(self.accepted, client_writer, upstream_writer)
        self._links.append(link)
        self._notify()
        self._spawn(self._replies(link, upstream_reader))
        await self._commands(link, client_reader)

    async def _commands(self, link: Link, reader: asyncio.StreamReader) -> None:
        commands = RespCommandReader()
        try:
            while data := await reader.read(65536):
                for raw, arguments in commands.feed(data):
                    self.commands += 1
                    held = len(arguments) == 2 and arguments[0].upper() == b"GET" and arguments[1] in self._hold
                    if held:
                        link.held_keys.append(arguments[1].decode())
                        self.held_gets += 1
                    elif arguments and arguments[0].upper() in self._hold_names:
                        held = True
                        link.held_keys.append(arguments[0].decode())
                    if held or link.holding:
                        link.kept_back.append(raw)
                    else:
                        link.upstream.write(raw)
                self._notify()
        except (ConnectionError, OSError):
            pass
        finally:
            link.client_closed = True
            link.kept_back.clear()
            link.upstream.close()
            self._notify()

    async def _replies(self, link: Link, reader: asyncio.StreamReader) -> None:
        try:
            while data := await reader.read(65536):
                if not link.client_closed:
                    link.client.write(data)
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                link.client.close()
