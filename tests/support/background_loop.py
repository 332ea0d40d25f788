"""A service run on its own event loop in a daemon thread, for tests that drive it synchronously.

Subclasses write ``start()`` (open what they serve; its exception fails ``__enter__``) and
``stop()`` (close it); ``with`` waits for the start and stops the loop on exit.
"""

from __future__ import annotations

import abc
import asyncio
import threading
from typing import Self

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class BackgroundLoop(abc.ABC):
    what = "the service"

    def __init__(self) -> None:
        self._started = threading.Event()
        self._failure: list[BaseException] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    @abc.abstractmethod
    async def start(self) -> None:
        """Open what is served (on the background loop); an exception fails ``__enter__``."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Close what ``start`` opened."""

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S) or self._failure:
            raise RuntimeError(f"{self.what} did not start: {self._failure}")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(STOP_TIMEOUT_S)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            await self.start()
        except BaseException as exc:
            self._failure.append(exc)
            self._started.set()
            return
        self._started.set()
        await self._stop.wait()
        await self.stop()
